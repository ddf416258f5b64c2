#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs fp8-worker (built here) and the non-system, non-CUDA shared libraries it needs into
# .calibrate-engines-carry/{bin,lib} (ignored by git), for scripts/gpu/calibrate_engines.sh.
#   scripts/gpu/calibrate_engines_pack.sh [BUILD_DIR]     (default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/pack_common.sh
B=${1:-build}
C=.calibrate-engines-carry
pack_start $C
pack_binaries $C/bin $B/bin fp8-worker
pack_libs $C $C/bin/fp8-worker
