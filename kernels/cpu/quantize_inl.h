// SPDX-License-Identifier: Apache-2.0
// Inner loops shared by the quantize kernels: amax and scaled casts over contiguous spans.
// Written as plain loops over integer/float selects so GCC vectorizes them at -O3.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/cpu/fp8_encode_inl.h"
#include "kernels/fp8_format.h"

namespace fp8::kernels::internal {

// max |x| over a span. Compares bit patterns: for non-negative floats integer order equals
// float order, and any NaN (above 0x7F800000) wins, so NaN propagates into the scale.
inline uint32_t AbsMaxBits(const float* x, int64_t n, uint32_t init = 0) {
  uint32_t m = init;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFFu);
  return m;
}
inline float BitsToFloat(uint32_t b) { return std::bit_cast<float>(b); }

// out[i] = max(out[i], |x[i]|) as bits; column-wise amax across rows.
inline void AbsMaxBitsInto(const float* x, int64_t n, uint32_t* out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = std::max(out[i], std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFFu);
}

// q[i] = fp8(x[i] / scale_inv): a true IEEE division, matched by __fdiv_rn on the GPU.
template <Fp8Format kFmt>
inline void CastSpan(const float* x, int64_t n, float scale_inv, uint8_t* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = EncodeFp8<kFmt, true>(x[i] / scale_inv);
}
// Per-element scales (128x1 tiles: one scale per column).
template <Fp8Format kFmt>
inline void CastSpanScales(const float* x, int64_t n, const float* scale_inv, uint8_t* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = EncodeFp8<kFmt, true>(x[i] / scale_inv[i]);
}

// y[i] = decode(fp8(x[i] / s)) * s, the quantize→dequantize round trip without the bytes.
template <Fp8Format kFmt>
inline void FakeSpan(const float* x, int64_t n, float scale_inv, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = RoundToFp8Grid<kFmt>(x[i] / scale_inv) * scale_inv;
}
template <Fp8Format kFmt>
inline void FakeSpanScales(const float* x, int64_t n, const float* scale_inv, float* y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = RoundToFp8Grid<kFmt>(x[i] / scale_inv[i]) * scale_inv[i];
}

// x[i] = decode(q[i]) * scale_inv (dequantization, one scale per span).
template <Fp8Format kFmt>
inline void DequantSpan(const uint8_t* q, int64_t n, float scale_inv, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = DecodeFp8<kFmt>(q[i]) * scale_inv;
}
template <Fp8Format kFmt>
inline void DequantSpanScales(const uint8_t* q, int64_t n, const float* scale_inv, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = DecodeFp8<kFmt>(q[i]) * scale_inv[i];
}

}  // namespace fp8::kernels::internal
