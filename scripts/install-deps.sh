#!/usr/bin/env bash
# Installs the Debian 12 packages fp8d needs to build and test, only those that are missing.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libsqlite3-dev sqlite3 libboost-dev libasio-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
  libgloo-dev libsystemd-dev libre2-dev python3 python3-numpy ccache
  libssl-dev openssl curl python3-grpcio python3-protobuf prometheus-cpp-dev
  python3-prometheus-client util-linux passwd prometheus
  tmux clang libclang-rt-14-dev
)
# Test-only tools (tests/deploy): systemd-analyze, and Node.js for the offline Kubernetes
# schema check. FP8D_DEPS_BUILD_ONLY=1 (the container's build stage) leaves them out.
if [ "${FP8D_DEPS_BUILD_ONLY:-0}" != 1 ]; then
  PKGS+=(systemd)
  # tests/slurm and scripts/slurm-cluster.sh: a Slurm cluster on this machine.
  PKGS+=(slurm-wlm munge iproute2 procps)
  command -v npm >/dev/null || PKGS+=(nodejs npm)
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
# The npm packages of tests/deploy (Kubernetes schema check, Dockerfile lint) and
# tests/worker_tokenizer (the Hugging Face tokenizers library), pinned by its package-lock.json;
# installed again when the lock file is newer than what npm last installed.
if [ "${FP8D_DEPS_BUILD_ONLY:-0}" != 1 ]; then
  deploy_npm="$(cd "$(dirname "$0")/.." && pwd)/tests/deploy/npm"
  if [ ! -d "$deploy_npm/node_modules" ] || [ "$deploy_npm/package-lock.json" -nt "$deploy_npm/node_modules/.package-lock.json" ]; then
    echo "install-deps: npm ci in tests/deploy/npm"
    npm ci --prefix "$deploy_npm" --no-audit --no-fund --loglevel=error
  fi
fi
