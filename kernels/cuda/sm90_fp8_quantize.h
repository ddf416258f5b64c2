// SPDX-License-Identifier: Apache-2.0
// FP8 quantization on sm_90 (H100/H200), the CUDA twin of kernels/quantize.h: same tiles, same
// scale rule, bit-identical bytes and scales (tests/kernels_cuda checks it against the CPU
// reference). All pointers are device pointers; work is enqueued on `stream`.
//
// Shapes: rows ≥ 1, cols ≥ 1 and cols a multiple of 16 (every row then starts 16-byte aligned,
// which the vector loads need); edge tiles may be partial, exactly like the CPU reference.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/fp8_format.h"
#include "kernels/scaling.h"

namespace fp8::kernels::cuda {

// Where scale_inv of a 1x128-tiled [rows, cols] tensor lives, with G = ceil(cols/128):
//   kRowMajor: [rows, G], (r, g) at r*G + g        — the CPU reference / DeepSeek act_quant layout
//   kMnMajor:  [G, rows], (r, g) at g*rows + r     — what cuBLASLt's VEC128_32F mode reads
enum class Sm90ScaleLayout : uint8_t { kRowMajor, kMnMajor };

// 1x128 tiles (activations, gradients): q [rows, cols], scale_inv per layout above.
Status Sm90Fp8Quantize1x128(const __nv_bfloat16* x, int64_t rows, int64_t cols, Fp8Format fmt,
                            ScaleFormat sf, Sm90ScaleLayout layout, uint8_t* q, float* scale_inv,
                            cudaStream_t stream);
Status Sm90Fp8Quantize1x128(const float* x, int64_t rows, int64_t cols, Fp8Format fmt,
                            ScaleFormat sf, Sm90ScaleLayout layout, uint8_t* q, float* scale_inv,
                            cudaStream_t stream);

// 128x128 blocks (weights, DeepSeek-V3): scale_inv [ceil(rows/128), scale_ld] row-major,
// scale_ld ≥ ceil(cols/128). scale_ld = ceil(cols/128) is the CPU layout; cuBLASLt's
// BLK128x128_32F mode wants Sm90BlockScaleLd(cols) (padding entries are left untouched).
Status Sm90Fp8Quantize128x128(const __nv_bfloat16* x, int64_t rows, int64_t cols, Fp8Format fmt,
                              ScaleFormat sf, uint8_t* q, float* scale_inv, int64_t scale_ld,
                              cudaStream_t stream);
Status Sm90Fp8Quantize128x128(const float* x, int64_t rows, int64_t cols, Fp8Format fmt,
                              ScaleFormat sf, uint8_t* q, float* scale_inv, int64_t scale_ld,
                              cudaStream_t stream);

// 128x128 blocks written transposed: qt [cols, rows] with scale_inv_t [ceil(cols/128), scale_ld_t]
// is bit for bit Sm90Fp8Quantize128x128 of xᵀ (a block's amax does not depend on its
// orientation), without a transpose pass; q (may be null) also gets x as Sm90Fp8Quantize128x128
// writes it. rows must be a multiple of 16 (16-byte rows of qt). The trainer's wgrad operand xᵀ and
// dgrad operand Wᵀ come from here.
Status Sm90Fp8Quantize128x128WithTranspose(const __nv_bfloat16* x, int64_t rows, int64_t cols,
                                           Fp8Format fmt, ScaleFormat sf, uint8_t* q, float* scale_inv,
                                           int64_t scale_ld, uint8_t* qt, float* scale_inv_t,
                                           int64_t scale_ld_t, cudaStream_t stream);
Status Sm90Fp8Quantize128x128WithTranspose(const float* x, int64_t rows, int64_t cols,
                                           Fp8Format fmt, ScaleFormat sf, uint8_t* q, float* scale_inv,
                                           int64_t scale_ld, uint8_t* qt, float* scale_inv_t,
                                           int64_t scale_ld_t, cudaStream_t stream);

// One read of x for fp8-blockwise's forward and backward: q1 [rows, cols] in 1x128 tiles with
// scale1 MN-major [ceil(cols/128), rows], bit for bit Sm90Fp8Quantize1x128 (kMnMajor); and qt, the
// 128x128 quantization of xᵀ, as Sm90Fp8Quantize128x128WithTranspose writes it. rows a multiple of 16.
Status Sm90Fp8Quantize1x128AndTransposed128x128(const __nv_bfloat16* x, int64_t rows, int64_t cols,
                                                Fp8Format fmt, ScaleFormat sf, uint8_t* q1, float* scale1,
                                                uint8_t* qt, float* scale_inv_t, int64_t scale_ld_t,
                                                cudaStream_t stream);

// Row pitch of a 128x128 scale array as cuBLASLt reads it: ceil(cols/128) rounded up to 4
// (16-byte aligned rows).
inline int64_t Sm90BlockScaleLd(int64_t cols) { return ((cols + 127) / 128 + 3) / 4 * 4; }

// Shared argument check of the quantize/dequantize launchers (no CUDA call; testable anywhere).
Status Sm90ValidateQuantShape(int64_t rows, int64_t cols, const void* in, const void* out,
                              const void* scale_inv);

}  // namespace fp8::kernels::cuda
