// SPDX-License-Identifier: Apache-2.0
// Fused quantization of X [rows, cols] and Xᵀ [cols, rows], both with 1x128 tiles, in one pass
// over X (sm_90) — the CUDA twin of Quantize1x128WithTranspose (kernels/quantize.h). The
// backward pass needs both: X for dgrad-style products, Xᵀ for wgrad.
//
// Shapes: rows and cols positive multiples of 16. Scales:
//   scale_inv   of X:  [rows, ceil(cols/128)] (kRowMajor) or [ceil(cols/128), rows] (kMnMajor)
//   scale_inv_t of Xᵀ: [cols, ceil(rows/128)] (kRowMajor) or [ceil(rows/128), cols] (kMnMajor)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/fp8_format.h"
#include "kernels/scaling.h"

namespace fp8::kernels::cuda {

Status Sm90Fp8Quantize1x128WithTranspose(const __nv_bfloat16* x, int64_t rows, int64_t cols,
                                         Fp8Format fmt, ScaleFormat sf, Sm90ScaleLayout layout,
                                         uint8_t* q, float* scale_inv, uint8_t* qt,
                                         float* scale_inv_t, cudaStream_t stream);
Status Sm90Fp8Quantize1x128WithTranspose(const float* x, int64_t rows, int64_t cols,
                                         Fp8Format fmt, ScaleFormat sf, Sm90ScaleLayout layout,
                                         uint8_t* q, float* scale_inv, uint8_t* qt,
                                         float* scale_inv_t, cudaStream_t stream);

}  // namespace fp8::kernels::cuda
