#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The project's test command (README): installs missing packages, builds everything, runs the
# whole suite with CTest. GPU tests skip themselves on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j "$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 900 "$@"
