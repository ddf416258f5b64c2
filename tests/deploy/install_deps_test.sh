#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/install-deps.sh's two selections, read from the lists the install itself uses
# (--print): --build-only (what scripts/demo.sh and the container's build stage install) has
# the build and run packages and none of the test tools (Slurm, munge, Prometheus, Node.js,
# GoogleTest); the full selection (scripts/test.sh) has both. Prints one ok/FAIL line per check.
set -uo pipefail
src=${1:?usage: install_deps_test.sh <source dir>}
script="$src/scripts/install-deps.sh"
fails=0
check() {  # check <description> <command...>
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
has() { grep -qxF "$2" <<<"$1"; }
lacks() { ! grep -qxF "$2" <<<"$1"; }

build=$(bash "$script" --build-only --print) || { echo "FAIL install-deps.sh --build-only --print exited $?"; exit 1; }
full=$(bash "$script" --print) || { echo "FAIL install-deps.sh --print exited $?"; exit 1; }
env_build=$(FP8D_DEPS_BUILD_ONLY=1 bash "$script" --print)

for p in cmake ninja-build build-essential libgrpc++-dev protobuf-compiler-grpc libsqlite3-dev \
         libspdlog-dev libcli11-dev libyaml-cpp-dev libboost-dev prometheus-cpp-dev libsystemd-dev; do
  check "--build-only lists $p" has "$build" "$p"
done
for p in slurm-wlm munge prometheus nodejs npm libgtest-dev tmux; do
  check "--build-only does not list $p" lacks "$build" "$p"
done
check "--build-only runs no npm ci" bash -c '! grep -q "^npm ci" <<<"$1"' _ "$build"
for p in slurm-wlm munge prometheus libgtest-dev cmake libgrpc++-dev; do
  check "the full selection lists $p" has "$full" "$p"
done
check "FP8D_DEPS_BUILD_ONLY=1 selects what --build-only does" test "$env_build" = "$build"
check "--print installs nothing and says so in no apt line" bash -c '! grep -q "install-deps: installing" <<<"$1"' _ "$build"
check "an unknown argument is refused" bash -c '! bash "$1" --bogus 2>/dev/null' _ "$script"
check "scripts/demo.sh installs with --build-only" grep -q 'install-deps.sh --build-only' "$src/scripts/demo.sh"
check "scripts/test.sh installs the full selection" grep -qE 'install-deps.sh"?$' "$src/scripts/test.sh"
[ "$fails" -eq 0 ]
