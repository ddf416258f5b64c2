#!/usr/bin/env bash
# Installs the Debian 12 packages fp8d needs to build and test, only those that are missing.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libsqlite3-dev sqlite3 libboost-dev libasio-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
  libgloo-dev libsystemd-dev python3 ccache
  slurm-wlm munge iproute2 procps
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
