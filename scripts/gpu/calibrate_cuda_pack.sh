#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs the calibration job's CUDA binaries (built here, -DFP8D_CUDA=ON) and the non-system,
# non-CUDA shared libraries they need into .calibrate-cuda-carry/{bin,lib} (ignored by git), for
# scripts/gpu/calibrate_cuda.sh on the GPU machine.
#   scripts/gpu/calibrate_cuda_pack.sh [BUILD_DIR]     (default build-calperf)
#   targets: calibrate_cuda_test calibrate_test test_kernels_cpu bench_calibrate
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/pack_common.sh
B=${1:-build-calperf}
C=.calibrate-cuda-carry
pack_start $C
pack_binaries $C/bin $B/bin calibrate_cuda_test calibrate_test test_kernels_cpu bench_calibrate
pack_libs $C $C/bin/*
