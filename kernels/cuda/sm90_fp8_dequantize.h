// SPDX-License-Identifier: Apache-2.0
// FP8 dequantization on sm_90 — the CUDA twin of Dequantize* in kernels/quantize.h, with bf16
// or fp32 output (bf16 = the fp32 result rounded to nearest even). Device pointers.
// Shapes: rows ≥ 1, cols a positive multiple of 16; q and out 16-byte aligned.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/fp8_format.h"

namespace fp8::kernels::cuda {

// 1x128 tiles, scale_inv in either layout of Sm90ScaleLayout.
Status Sm90Fp8Dequantize1x128(const uint8_t* q, const float* scale_inv, Sm90ScaleLayout layout,
                              int64_t rows, int64_t cols, Fp8Format fmt, __nv_bfloat16* x,
                              cudaStream_t stream);
Status Sm90Fp8Dequantize1x128(const uint8_t* q, const float* scale_inv, Sm90ScaleLayout layout,
                              int64_t rows, int64_t cols, Fp8Format fmt, float* x,
                              cudaStream_t stream);

// 128x128 blocks, scale_inv [ceil(rows/128), scale_ld] row-major.
Status Sm90Fp8Dequantize128x128(const uint8_t* q, const float* scale_inv, int64_t scale_ld,
                                int64_t rows, int64_t cols, Fp8Format fmt, __nv_bfloat16* x,
                                cudaStream_t stream);
Status Sm90Fp8Dequantize128x128(const uint8_t* q, const float* scale_inv, int64_t scale_ld,
                                int64_t rows, int64_t cols, Fp8Format fmt, float* x,
                                cudaStream_t stream);

// One scale for the whole tensor (a device float); n a positive multiple of 16.
Status Sm90Fp8DequantizeTensor(const uint8_t* q, int64_t n, const float* scale_inv,
                               Fp8Format fmt, __nv_bfloat16* x, cudaStream_t stream);
Status Sm90Fp8DequantizeTensor(const uint8_t* q, int64_t n, const float* scale_inv,
                               Fp8Format fmt, float* x, cudaStream_t stream);

}  // namespace fp8::kernels::cuda
