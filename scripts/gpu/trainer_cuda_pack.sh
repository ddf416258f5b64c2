#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs the CUDA trainer's binaries (built here, -DFP8D_CUDA=ON) and the non-system, non-CUDA
# shared libraries they need into .trainer-cuda-carry/{bin,lib} (ignored by git), for
# scripts/gpu/trainer_cuda.sh on the GPU machine.
#   scripts/gpu/trainer_cuda_pack.sh [BUILD_DIR]     (default build-trainer-cuda)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/pack_common.sh
B=${1:-build-trainer-cuda}
C=.trainer-cuda-carry
pack_start $C
pack_binaries $C/bin $B/bin worker_train_cuda_test bench_trainer_cuda fp8-worker
pack_libs $C $C/bin/*
