#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds and runs the control-plane benchmark; prints the numbers docs/performance.md quotes.
#   bench/control_plane/run.sh [build dir] [-- extra flags for control_plane_bench]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
shift || true
[[ "${1:-}" == "--" ]] && shift
cmake -S . -B "$BUILD_DIR" -G Ninja -DFP8D_BUILD_BENCH=ON -DFP8D_BUILD_TESTS=ON >/dev/null
cmake --build "$BUILD_DIR" --target control_plane_bench fp8d fp8-test-worker
echo "# $(date -u +%FT%TZ) $(nproc) cores: $BUILD_DIR/bin/control_plane_bench $*"
exec "$BUILD_DIR/bin/control_plane_bench" "$@"
