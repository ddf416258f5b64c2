#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs what scripts/gpu/multi_gpu.sh runs on a 2-GPU machine (all built here with -DFP8D_CUDA=ON):
# the CUDA trainer's tests and bench, the whole control plane (fp8d, fp8ctl, and
# fp8-worker with its CUDA backend), calibrate_cuda_test, and the non-system libraries they
# need, into .multi-gpu-carry/{bin,lib} (ignored by git).
#   scripts/gpu/multi_gpu_pack.sh [TRAINER_BUILD_DIR] [CALIBRATE_BUILD_DIR]
#   (defaults build-trainer-cuda, build-calperf)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/pack_common.sh
B=${1:-build-trainer-cuda}
CAL=${2:-build-calperf}
C=.multi-gpu-carry
pack_start $C
pack_binaries $C/bin $B/bin worker_train_cuda_test bench_trainer_cuda fp8d fp8ctl fp8-worker
pack_binaries $C/bin $CAL/bin calibrate_cuda_test
pack_libs $C $C/bin/*
