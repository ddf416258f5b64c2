// SPDX-License-Identifier: Apache-2.0
// AdamW on a linear layer's weight W [rows, cols] whose update also writes the next forward's
// fp8-blockwise operands, W and Wᵀ in 128x128 blocks (E4M3 or E5M2, FP32 or UE8M0 scales), from
// the updated values while they are in registers. Without it the next forward reads the FP32 W
// again to cast it (4 bytes per weight, ~1.6 GB per step at d4096 L8).
//
// Bit for bit AdamWStepTensor followed by kernels::cuda::Sm90Fp8Quantize128x128WithTranspose on
// the updated W: both share AdamWOne (adamw.cuh) and Sm90Fp8Cast128x128Block
// (kernels/cuda/sm90_fp8_quantize.cuh); tests/worker_train_cuda asserts the equality.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/fp8_format.h"
#include "kernels/scaling.h"
#include "worker/train/cuda/train_kernels.h"

namespace fp8::train::cuda {

// w, g, m, v: [rows, cols] FP32 (16-byte aligned, cols a multiple of 16, rows of 16); q, qt and
// their scales as Sm90Fp8Quantize128x128WithTranspose takes them.
Status AdamWStepCast128x128(float* w, const float* g, float* m, float* v, int64_t rows, int64_t cols, bool decay,
                            const AdamWArgs& a, kernels::Fp8Format fmt, kernels::ScaleFormat sf, uint8_t* q,
                            float* scale_inv, int64_t scale_ld, uint8_t* qt, float* scale_inv_t, int64_t scale_ld_t,
                            cudaStream_t s);

}  // namespace fp8::train::cuda
