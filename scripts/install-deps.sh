#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages fp8d needs, only those that are missing.
#
#   install-deps.sh               build, run and test (scripts/test.sh)
#   install-deps.sh --build-only  build and run only (scripts/demo.sh, the container's build
#                                 stage): no test tools, no Slurm, no Prometheus, no Node.js
#   --print                       lists the packages of the selection, one per line (and
#                                 `npm ci <dir>` when the npm packages would be installed),
#                                 installs nothing: the same lists the install uses.
# FP8D_DEPS_BUILD_ONLY=1 is the same as --build-only.
set -euo pipefail
build_only=${FP8D_DEPS_BUILD_ONLY:-0}
print=0
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    --print) print=1 ;;
    *) echo "install-deps: unknown argument $arg (expected --build-only, --print)" >&2; exit 2 ;;
  esac
done

# Building fp8d, fp8ctl and fp8-worker (FP8D_BUILD_TESTS=OFF) and running them.
BUILD_PKGS=(
  build-essential cmake ninja-build pkg-config git ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libsqlite3-dev libboost-dev libasio-dev libspdlog-dev libfmt-dev
  libcli11-dev libyaml-cpp-dev nlohmann-json3-dev prometheus-cpp-dev
  libgloo-dev libsystemd-dev libre2-dev libssl-dev
  python3 passwd
)
# The test suites and the tools they drive.
TEST_PKGS=(
  libgtest-dev libgmock-dev sqlite3 python3-numpy python3-grpcio python3-protobuf
  python3-prometheus-client openssl curl util-linux prometheus tmux clang libclang-rt-14-dev
  # tests/python_client: pip builds clients/python offline (its stubs come from protoc and
  # grpc_python_plugin of the build list, the versions of python3-protobuf and python3-grpcio).
  python3-yaml python3-pip python3-setuptools python3-wheel
  # tests/deploy: systemd-analyze, lintian for the .deb, and Node.js for the offline Kubernetes
  # schema check.
  systemd lintian
  # tests/slurm and scripts/slurm-cluster.sh: a Slurm cluster on this machine.
  slurm-wlm munge iproute2 procps
)
PKGS=("${BUILD_PKGS[@]}")
if [ "$build_only" != 1 ]; then
  PKGS+=("${TEST_PKGS[@]}")
  command -v npm >/dev/null || PKGS+=(nodejs npm)
fi
# The npm packages of tests/deploy (Kubernetes schema check, Dockerfile lint) and
# tests/worker_tokenizer (the Hugging Face tokenizers library), pinned by its package-lock.json;
# installed again when the lock file is newer than what npm last installed.
deploy_npm="$(cd "$(dirname "$0")/.." && pwd)/tests/deploy/npm"
npm_needed=0
if [ "$build_only" != 1 ] &&
   { [ ! -d "$deploy_npm/node_modules" ] || [ "$deploy_npm/package-lock.json" -nt "$deploy_npm/node_modules/.package-lock.json" ]; }; then
  npm_needed=1
fi

if [ "$print" = 1 ]; then
  printf '%s\n' "${PKGS[@]}"
  [ "$npm_needed" = 0 ] || echo "npm ci $deploy_npm"
  exit 0
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ "$npm_needed" = 1 ]; then
  echo "install-deps: npm ci in tests/deploy/npm"
  npm ci --prefix "$deploy_npm" --no-audit --no-fund --loglevel=error
fi
