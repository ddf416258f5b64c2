// Quantize kernels, CPU reference (design §6): the tile walkers of tile_walkers_inl.h with
// a cast as their emit step, the fused X + Xᵀ quantizer, and the per-tensor cast with amax.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/cpu/quantize_stats.h"
#include "kernels/cpu/tile_walkers_inl.h"
#include "kernels/quantize.h"

namespace fp8::kernels {
namespace {

using namespace internal;  // NOLINT: the walkers and span loops of this part

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
      internal::CastSpan<F>(x + r * cols + c0, n, s, q + r * cols + c0);
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
      internal::CastSpan<F>(x + r * cols + c0, n, s, q + r * cols + c0);
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
      internal::CastSpan<F>(x + r * cols + c0, n, s, q + r * cols + c0);
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
          internal::CastSpan<F>(x + j, len, scale_inv, q + j);
        }
        partial[i] = m;
      }
    });
  });
  return BitsToFloat(*std::max_element(partial.begin(), partial.end()));
}

}  // namespace fp8::kernels

// ---- Fused cast + round-trip statistics (kernels/cpu/quantize_stats.h) ----

namespace fp8::kernels {
namespace {

// Elements per fused chunk: the widened source (1 KiB of FP32) stays in L1 between the widening
// and the cast, and the float partial sums stay short enough to lose nothing that matters.
constexpr int kStatsChunk = 256;

const float* HalfToFloatTable() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = HalfToFloat(static_cast<uint16_t>(i));
    return t;
  }();
  return table.data();
}

// Up to kStatsChunk source elements as FP32 (exact for all three types). F32 needs no copy.
[[gnu::always_inline]] inline const float* WidenChunk(SourceType type, const void* src, int64_t at, int n,
                                                      const float* half_table, float* buf) {
  if (type == SourceType::kF32) return static_cast<const float*>(src) + at;
  const uint16_t* s = static_cast<const uint16_t*>(src) + at;
  if (type == SourceType::kBf16) {
    // BF16 is the top half of an FP32.
    for (int i = 0; i < n; ++i) buf[i] = std::bit_cast<float>(static_cast<uint32_t>(s[i]) << 16);
  } else {
    for (int i = 0; i < n; ++i) buf[i] = half_table[s[i]];
  }
  return buf;
}

// Sum of n ≤ kStatsChunk floats by pairwise halving: every level is a plain element-wise add
// the compiler vectorizes (a float reduction loop would need -fassociative-math, which this
// file must not use: it would also reassociate the encoder's magic-number adds).
[[gnu::always_inline]] inline float PairwiseSum(float* v, int n) {
  for (int i = n; i < kStatsChunk; ++i) v[i] = 0.0f;
  for (int w = kStatsChunk / 2; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) v[i] += v[i + w];
  }
  return v[0];
}

// One chunk: bytes exactly as CastSpan, x̂ = RoundToFp8Grid(x / s) · s (equal bit for bit to
// decode(q) · s, without the table gather). Squares go to buffers (no float reduction in the
// element loop, so it vectorizes), the counts are integer reductions.
template <Fp8Format kFmt>
[[gnu::always_inline]] inline void CastChunkWithStats(const float* x, int n, float s, float limit, uint8_t* q,
                                                      RoundTripSums* sums) {
  float x2[kStatsChunk], e2[kStatsChunk];
  int32_t sat = 0, fl = 0, nz = 0;
  for (int i = 0; i < n; ++i) {
    const float v = x[i];
    const float y = v / s;
    q[i] = internal::EncodeFp8<kFmt, true>(y);
    const float h = internal::RoundToFp8Grid<kFmt>(y) * s;
    const float e = v - h;
    x2[i] = v * v;
    e2[i] = e * e;
    sat += std::fabs(v) >= limit;
    fl += (v != 0.0f) & (h == 0.0f);
    nz += v != 0.0f;
  }
  sums->sum_x2 += PairwiseSum(x2, n);
  sums->sum_e2 += PairwiseSum(e2, n);
  sums->saturated += sat;
  sums->flushed += fl;
  sums->nonzero += nz;
}

}  // namespace

// Compiled for AVX2 and for the baseline; the loader picks one (GCC function multiversioning).
[[gnu::target_clones("avx2", "default")]]
uint32_t SourceAbsMaxBits(SourceType type, const void* src, int64_t n, uint32_t init) {
  uint32_t m = init;
  if (type == SourceType::kBf16) {
    // |x| of BF16 as bits is (h & 0x7FFF) << 16: take the max of the 16-bit values, shift once.
    const uint16_t* s = static_cast<const uint16_t*>(src);
    uint16_t m16 = 0;
    for (int64_t i = 0; i < n; ++i) m16 = std::max<uint16_t>(m16, s[i] & 0x7FFFu);
    return std::max(m, static_cast<uint32_t>(m16) << 16);
  }
  const float* half_table = type == SourceType::kF16 ? HalfToFloatTable() : nullptr;
  float buf[kStatsChunk];
  for (int64_t at = 0; at < n; at += kStatsChunk) {
    const int len = static_cast<int>(std::min<int64_t>(kStatsChunk, n - at));
    m = internal::AbsMaxBits(WidenChunk(type, src, at, len, half_table, buf), len, m);
  }
  return m;
}

[[gnu::target_clones("avx2", "default")]]
void CastSpanWithStats(SourceType type, const void* src, int64_t n, float scale_inv, Fp8Format fmt, uint8_t* q,
                       RoundTripSums* sums) {
  const float limit = Fp8ClipThreshold(fmt) * scale_inv;
  const float* half_table = type == SourceType::kF16 ? HalfToFloatTable() : nullptr;
  float buf[kStatsChunk];
  for (int64_t at = 0; at < n; at += kStatsChunk) {
    const int len = static_cast<int>(std::min<int64_t>(kStatsChunk, n - at));
    const float* x = WidenChunk(type, src, at, len, half_table, buf);
    if (fmt == Fp8Format::kE4M3) {
      CastChunkWithStats<Fp8Format::kE4M3>(x, len, scale_inv, limit, q + at, sums);
    } else {
      CastChunkWithStats<Fp8Format::kE5M2>(x, len, scale_inv, limit, q + at, sums);
    }
  }
}

}  // namespace fp8::kernels
