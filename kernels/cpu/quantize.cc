// SPDX-License-Identifier: Apache-2.0
// Quantize kernels, CPU reference (docs/design.md §6): the tile walkers of tile_walkers_inl.h with
// a cast as their emit step, the fused X + Xᵀ quantizer, and the per-tensor cast with amax.
#include <algorithm>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/cpu/tile_walkers_inl.h"
#include "kernels/quantize.h"

namespace fp8::kernels {
namespace {

using namespace internal;  // NOLINT: the walkers and span loops of this part

// The scaled casts of the quantize kernels, compiled twice — for AVX2 and for the portable
// x86-64-v2 baseline of this library — and picked at load time (GCC function multiversioning):
// twice the vector width where the CPU has it. Both are the same C++ (a true IEEE division and
// integer selects, no FMA contraction: -ffp-contract=off), so they give the same bytes;
// tests/kernels_cpu/quantize_isa_test.cc checks the one the machine picks against FloatToFp8
// on every bf16 and fp16 pattern.
[[gnu::target_clones("avx2", "default")]]
void CastSpanE4M3(const float* x, int64_t n, float scale_inv, uint8_t* q) {
  internal::CastSpan<Fp8Format::kE4M3>(x, n, scale_inv, q);
}
[[gnu::target_clones("avx2", "default")]]
void CastSpanE5M2(const float* x, int64_t n, float scale_inv, uint8_t* q) {
  internal::CastSpan<Fp8Format::kE5M2>(x, n, scale_inv, q);
}
template <Fp8Format kFmt>
inline void CastSpanAnyIsa(const float* x, int64_t n, float scale_inv, uint8_t* q) {
  if constexpr (kFmt == Fp8Format::kE4M3) {
    CastSpanE4M3(x, n, scale_inv, q);
  } else {
    CastSpanE5M2(x, n, scale_inv, q);
  }
}

}  // namespace

namespace internal {
[[gnu::target_clones("avx2", "default")]]
uint32_t AbsMaxBitsAnyIsa(const float* x, int64_t n, uint32_t init) { return AbsMaxBits(x, n, init); }
}  // namespace internal

namespace {

#if defined(__SSE2__)
// 16x16 byte transpose: four rounds of "interleave row i with row i+8" rotate the 8-bit
// (row, column) index left by one bit each, so after four the rows and columns have swapped.
void Transpose16x16Bytes(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride) {
  __m128i x[16], t[16];
  for (int i = 0; i < 16; ++i) x[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_stride));
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm_unpacklo_epi8(x[i], x[i + 8]);
      t[2 * i + 1] = _mm_unpackhi_epi8(x[i], x[i + 8]);
    }
    std::copy(t, t + 16, x);
  }
  for (int i = 0; i < 16; ++i) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i * dst_stride), x[i]);
}
#endif

// dst[c * dst_stride + r] = src[r * cols + c] for a rows x cols byte block.
void TransposeBytes(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst, int64_t dst_stride) {
  int64_t c_done = 0, r_done = 0;
#if defined(__SSE2__)
  c_done = cols / 16 * 16;
  r_done = rows / 16 * 16;
  for (int64_t c = 0; c < c_done; c += 16)
    for (int64_t r = 0; r < r_done; r += 16) Transpose16x16Bytes(src + r * cols + c, cols, dst + c * dst_stride + r, dst_stride);
#endif
  // Ragged edges (and the whole block without SSE2): scalar.
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = c < c_done ? r_done : 0; r < rows; ++r) dst[c * dst_stride + r] = src[r * cols + c];
  }
}

}  // namespace

Status Quantize1x128(const float* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                     uint8_t* q, float* scale_inv) {
  FP8_RETURN_IF_ERROR(CheckQuantizeArgs("Quantize1x128", x, rows, cols, q, scale_inv));
  WithFormat(fmt, [&]<Fp8Format F>() {
    WalkRowTiles(x, rows, cols, fmt, sf, scale_inv, [&](int64_t r, int64_t c0, int64_t n, float s) {
      CastSpanAnyIsa<F>(x + r * cols + c0, n, s, q + r * cols + c0);
    });
  });
  return OkStatus();
}

Status Quantize128x1(const float* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                     uint8_t* q, float* scale_inv) {
  FP8_RETURN_IF_ERROR(CheckQuantizeArgs("Quantize128x1", x, rows, cols, q, scale_inv));
  WithFormat(fmt, [&]<Fp8Format F>() {
    WalkColumnTiles(x, rows, cols, fmt, sf, scale_inv,
                    [&](int64_t, int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* s) {
                      for (int64_t r = r0; r < r1; ++r)
                        internal::CastSpanScales<F>(x + r * cols + c0, c1 - c0, s, q + r * cols + c0);
                    });
  });
  return OkStatus();
}

Status Quantize128x128(const float* x, int64_t rows, int64_t cols, Fp8Format fmt,
                       ScaleFormat sf, uint8_t* q, float* scale_inv) {
  FP8_RETURN_IF_ERROR(CheckQuantizeArgs("Quantize128x128", x, rows, cols, q, scale_inv));
  WithFormat(fmt, [&]<Fp8Format F>() {
    WalkBlockTiles(x, rows, cols, fmt, sf, scale_inv, [&](int64_t r, int64_t c0, int64_t n, float s) {
      CastSpanAnyIsa<F>(x + r * cols + c0, n, s, q + r * cols + c0);
    });
  });
  return OkStatus();
}

Status Quantize1x128WithTranspose(const float* x, int64_t rows, int64_t cols, Fp8Format fmt,
                                  ScaleFormat sf, uint8_t* q, float* scale_inv, uint8_t* qt,
                                  float* scale_inv_t) {
  constexpr const char* kOp = "Quantize1x128WithTranspose";
  FP8_RETURN_IF_ERROR(CheckQuantizeArgs(kOp, x, rows, cols, q, scale_inv));
  FP8_RETURN_IF_ERROR(CheckPointer(kOp, "qt", qt, rows * cols));
  FP8_RETURN_IF_ERROR(CheckPointer(kOp, "scale_inv_t", scale_inv_t, rows * cols));
  // Xᵀ's 1x128 tiles are X's 128x1 tiles; their scales are stored transposed:
  // scale_inv_t[c, b] for column c of row block b.
  const int64_t blocks = CeilDiv(rows, kTile);
  WithFormat(fmt, [&]<Fp8Format F>() {
    WalkRowTiles(x, rows, cols, fmt, sf, scale_inv, [&](int64_t r, int64_t c0, int64_t n, float s) {
      CastSpanAnyIsa<F>(x + r * cols + c0, n, s, q + r * cols + c0);
    });
    WalkColumnTiles(x, rows, cols, fmt, sf, nullptr,
                    [&](int64_t b, int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* s) {
      for (int64_t c = c0; c < c1; ++c) scale_inv_t[c * blocks + b] = s[c - c0];
      // Cast row-wise (vectorized) into a block-local buffer, then scatter it transposed: the
      // strided byte writes then touch only c1 - c0 cache lines per pass.
      uint8_t buf[kTile * kStrip];
      const int64_t width = c1 - c0;
      for (int64_t r = r0; r < r1; ++r) internal::CastSpanScales<F>(x + r * cols + c0, width, s, buf + (r - r0) * width);
      TransposeBytes(buf, r1 - r0, width, qt + c0 * rows + r0, rows);
    });
  });
  return OkStatus();
}

float Amax(const float* x, int64_t n) {
  if (n <= 0) return 0.0f;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(NumThreads(), n / kMinElementsPerChunk));
  std::vector<uint32_t> partial(static_cast<size_t>(chunks), 0u);
  ParallelFor(chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = n * i / chunks, e = n * (i + 1) / chunks;
      partial[i] = AbsMaxBits(x + b, e - b);
    }
  });
  return BitsToFloat(*std::max_element(partial.begin(), partial.end()));
}

float QuantizeTensor(const float* x, int64_t n, float scale_inv, Fp8Format fmt, uint8_t* q) {
  if (n <= 0) return 0.0f;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(NumThreads(), n / kMinElementsPerChunk));
  std::vector<uint32_t> partial(static_cast<size_t>(chunks), 0u);
  WithFormat(fmt, [&]<Fp8Format F>() {
    ParallelFor(chunks, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t b = n * i / chunks, e = n * (i + 1) / chunks;
        // Fused: amax and cast in one pass, block by block so the block stays in L1.
        uint32_t m = 0;
        for (int64_t j = b; j < e; j += 4096) {
          const int64_t len = std::min<int64_t>(4096, e - j);
          m = AbsMaxBits(x + j, len, m);
          CastSpanAnyIsa<F>(x + j, len, scale_inv, q + j);
        }
        partial[i] = m;
      }
    });
  });
  return BitsToFloat(*std::max_element(partial.begin(), partial.end()));
}

}  // namespace fp8::kernels
