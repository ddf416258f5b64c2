#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs the control-plane benchmark (fp8d, fp8-test-worker, control_plane_bench, built here)
# and the non-system shared libraries they need (gRPC, protobuf, SQLite, spdlog, ...) into
# .cp-carry/{bin,lib} (ignored by git), for scripts/gpu/control_plane_2core.sh on the GPU
# host, which has none of those libraries. BEFORE_DIR, if set, names a directory with the same
# three binaries from an earlier commit: they go to .cp-carry/before/ for a before/after run.
#   scripts/gpu/control_plane_pack.sh [BUILD_DIR]     (default build-cp)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/pack_common.sh
B=${1:-build-cp}
C=.cp-carry
BINS="fp8d fp8-test-worker control_plane_bench"
pack_start $C
pack_binaries $C/bin $B/bin $BINS
[[ -n "${BEFORE_DIR:-}" ]] && pack_binaries $C/before "$BEFORE_DIR" $BINS
pack_libs $C $C/bin/* ${BEFORE_DIR:+$C/before/*}
