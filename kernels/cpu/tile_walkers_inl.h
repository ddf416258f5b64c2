// SPDX-License-Identifier: Apache-2.0
// Tile walkers shared by the quantize, dequantize and fake-quantize kernels: each computes the
// tiles' amax → scale_inv and hands every span of one scale to a pluggable "emit" step, so all
// of them use one scale rule and stay bit-identical by construction. Internal to kernels/cpu.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "kernels/cpu/quantize_inl.h"
#include "kernels/parallel.h"
#include "kernels/quantize.h"
#include "kernels/scaling.h"

namespace fp8::kernels::internal {

// max |x| of a span as bits (AbsMaxBits), built for AVX2 and the baseline and picked at load
// time (quantize.cc); an integer max, so both builds agree exactly.
uint32_t AbsMaxBitsAnyIsa(const float* x, int64_t n, uint32_t init);

// Work per parallel chunk, in elements: small enough to use both cores on a 128x1024 tensor,
// big enough that the pool's wake-up cost (a few µs) stays negligible.
constexpr int64_t kMinElementsPerChunk = 1 << 15;

inline int64_t MinRowsPerChunk(int64_t cols) { return std::max<int64_t>(1, kMinElementsPerChunk / std::max<int64_t>(1, cols)); }

template <typename Fn>
void WithFormat(Fp8Format fmt, Fn&& fn) {
  if (fmt == Fp8Format::kE4M3) {
    fn.template operator()<Fp8Format::kE4M3>();
  } else {
    fn.template operator()<Fp8Format::kE5M2>();
  }
}

inline Status CheckShape(const char* op, int64_t rows, int64_t cols) {
  if (rows < 0) return InvalidArgumentError(std::string(op) + ": rows must be >= 0, got " + std::to_string(rows));
  if (cols < 0) return InvalidArgumentError(std::string(op) + ": cols must be >= 0, got " + std::to_string(cols));
  return OkStatus();
}

inline Status CheckPointer(const char* op, const char* name, const void* p, int64_t count) {
  if (p == nullptr && count > 0) return InvalidArgumentError(std::string(op) + ": " + name + " is null");
  return OkStatus();
}

// 1x128 tiles along each row. emit(row, col0, n, scale_inv).
template <typename Emit>
void WalkRowTiles(const float* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                  float* scale_inv, Emit&& emit) {
  const int64_t tiles = CeilDiv(cols, kTile);
  ParallelFor(rows, MinRowsPerChunk(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t c0 = t * kTile;
        const int64_t n = std::min(kTile, cols - c0);
        const float s = ScaleInvFromAmax(BitsToFloat(AbsMaxBitsAnyIsa(x + r * cols + c0, n, 0)), fmt, sf);
        if (scale_inv != nullptr) scale_inv[r * tiles + t] = s;
        emit(r, c0, n, s);
      }
    }
  });
}

// Column strip width for the 128-row walkers: a 128 x 256 FP32 strip (128 KiB) stays in L2
// between the amax pass and the cast pass. A multiple of kTile, so 128x128 tiles never straddle.
constexpr int64_t kStrip = 2 * kTile;

// 128x1 tiles: one scale per column per 128-row block, walked in (row block, column strip)
// units. emit(b, r0, r1, c0, c1, s) with s[c - c0] the scale of column c in block b.
template <typename Emit>
void WalkColumnTiles(const float* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                     float* scale_inv, Emit&& emit) {
  const int64_t blocks = CeilDiv(rows, kTile);
  const int64_t strips = CeilDiv(cols, kStrip);
  ParallelFor(blocks * strips, std::max<int64_t>(1, kMinElementsPerChunk / (kTile * kStrip)), [&](int64_t u0, int64_t u1) {
    uint32_t amax[kStrip];
    float scales[kStrip];
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / strips, c0 = (u % strips) * kStrip;
      const int64_t r0 = b * kTile, r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kStrip);
      std::fill(amax, amax + (c1 - c0), 0u);
      for (int64_t r = r0; r < r1; ++r) AbsMaxBitsInto(x + r * cols + c0, c1 - c0, amax);
      for (int64_t c = 0; c < c1 - c0; ++c) scales[c] = ScaleInvFromAmax(BitsToFloat(amax[c]), fmt, sf);
      if (scale_inv != nullptr) std::copy(scales, scales + (c1 - c0), scale_inv + b * cols + c0);
      emit(b, r0, r1, c0, c1, static_cast<const float*>(scales));
    }
  });
}

// 128x128 tiles, one (row block, 128-column tile) unit at a time. emit(row, col0, n, scale_inv).
template <typename Emit>
void WalkBlockTiles(const float* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                    float* scale_inv, Emit&& emit) {
  const int64_t blocks = CeilDiv(rows, kTile);
  const int64_t tiles = CeilDiv(cols, kTile);
  ParallelFor(blocks * tiles, std::max<int64_t>(1, kMinElementsPerChunk / (kTile * kTile)), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / tiles, t = u % tiles;
      const int64_t r0 = b * kTile, r1 = std::min(rows, r0 + kTile);
      const int64_t c0 = t * kTile, n = std::min(kTile, cols - c0);
      uint32_t m = 0;
      for (int64_t r = r0; r < r1; ++r) m = AbsMaxBitsAnyIsa(x + r * cols + c0, n, m);
      const float s = ScaleInvFromAmax(BitsToFloat(m), fmt, sf);
      if (scale_inv != nullptr) scale_inv[b * tiles + t] = s;
      for (int64_t r = r0; r < r1; ++r) emit(r, c0, n, s);
    }
  });
}

inline Status CheckQuantizeArgs(const char* op, const float* x, int64_t rows, int64_t cols,
                         const uint8_t* q, const float* scale_inv) {
  FP8_RETURN_IF_ERROR(CheckShape(op, rows, cols));
  FP8_RETURN_IF_ERROR(CheckPointer(op, "x", x, rows * cols));
  FP8_RETURN_IF_ERROR(CheckPointer(op, "q", q, rows * cols));
  return CheckPointer(op, "scale_inv", scale_inv, rows * cols);
}

}  // namespace fp8::kernels::internal
