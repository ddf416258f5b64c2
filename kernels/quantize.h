// SPDX-License-Identifier: Apache-2.0
// Quantize/dequantize, CPU reference (docs/design.md §6). All matrices are row-major [rows, cols].
// Tile shapes and the layout of their scale_inv arrays:
//   1x128   (activations, gradients):     scale_inv [rows, ceil(cols/128)]
//   128x1   (transposed operands):         scale_inv [ceil(rows/128), cols]
//   128x128 (weights, DeepSeek-V3):        scale_inv [ceil(rows/128), ceil(cols/128)]
//   tensor  (delayed scaling):             one scale_inv given by the caller
// Edge tiles are partial: their amax covers only the real elements. Shapes need not be
// multiples of 128 here; the GEMM documents its own rule.
// Each element: q = FloatToFp8(x / scale_inv, kSatFinite) with an IEEE FP32 division (the GPU
// uses __fdiv_rn to match), scale_inv = ScaleInvFromAmax(tile amax). A NaN in a tile makes its
// scale NaN (so the tile dequantizes to NaN and non-finite checks see it); other tiles are
// unaffected. Errors (InvalidArgument) name the offending argument.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/scaling.h"

namespace fp8::kernels {

constexpr int64_t kTile = 128;
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Status Quantize1x128(const float* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                     uint8_t* q, float* scale_inv);
Status Quantize128x1(const float* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                     uint8_t* q, float* scale_inv);
Status Quantize128x128(const float* x, int64_t rows, int64_t cols, Fp8Format fmt,
                       ScaleFormat sf, uint8_t* q, float* scale_inv);
// Fused: X with 1x128 tiles and Xᵀ ([cols, rows]) with 1x128 tiles, in one pass over X.
// qt/scale_inv_t are the quantized transpose and its scales [cols, ceil(rows/128)].
Status Quantize1x128WithTranspose(const float* x, int64_t rows, int64_t cols, Fp8Format fmt,
                                  ScaleFormat sf, uint8_t* q, float* scale_inv, uint8_t* qt,
                                  float* scale_inv_t);
// Per-tensor cast with a given scale_inv, saturating; returns amax(|x|) of the input (fused
// amax + cast, as delayed scaling needs). scale_inv should be finite and > 0 (DelayedScaling
// guarantees it); it is not checked here, in the hot path.
float QuantizeTensor(const float* x, int64_t n, float scale_inv, Fp8Format fmt, uint8_t* q);
float Amax(const float* x, int64_t n);

Status Dequantize1x128(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                       Fp8Format fmt, float* x);
Status Dequantize128x1(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                       Fp8Format fmt, float* x);
Status Dequantize128x128(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                         Fp8Format fmt, float* x);
void DequantizeTensor(const uint8_t* q, int64_t n, float scale_inv, Fp8Format fmt, float* x);

// Quantize then dequantize in place of a copy (x → fp8 → float into y), the fast path the CPU
// trainer uses: bit-identical to Quantize*+Dequantize*, without the byte buffers.
// scale_inv (optional, may be null) receives the scales in the layout above (one value for
// kTensor). kTensor uses tensor_scale_inv (finite and > 0, else InvalidArgument) and ignores
// sf; the tiled granularities ignore tensor_scale_inv.
enum class Granularity : uint8_t { kTensor, k1x128, k128x1, k128x128 };
Status FakeQuantize(const float* x, int64_t rows, int64_t cols, Granularity g, Fp8Format fmt,
                    ScaleFormat sf, float tensor_scale_inv, float* y, float* scale_inv);

}  // namespace fp8::kernels
