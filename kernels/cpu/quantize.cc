// Quantize / dequantize kernels, CPU reference (design §6). Every granularity is one generic
// tile walker (amax → scale_inv → cast) with a pluggable "emit" step, so Quantize* and
// FakeQuantize share the scale logic and stay bit-identical by construction.
#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/cpu/quantize_inl.h"
#include "kernels/parallel.h"

namespace fp8::kernels {
namespace {

using internal::AbsMaxBits;
using internal::AbsMaxBitsInto;
using internal::BitsToFloat;

// Work per parallel chunk, in elements: small enough to use both cores on a 128x1024 tensor,
// big enough that the pool's wake-up cost (a few µs) stays negligible.
constexpr int64_t kMinElementsPerChunk = 1 << 15;

int64_t MinRowsPerChunk(int64_t cols) { return std::max<int64_t>(1, kMinElementsPerChunk / std::max<int64_t>(1, cols)); }

template <typename Fn>
void WithFormat(Fp8Format fmt, Fn&& fn) {
  if (fmt == Fp8Format::kE4M3) {
    fn.template operator()<Fp8Format::kE4M3>();
  } else {
    fn.template operator()<Fp8Format::kE5M2>();
  }
}

Status CheckShape(const char* op, int64_t rows, int64_t cols) {
  if (rows < 0) return InvalidArgumentError(std::string(op) + ": rows must be >= 0, got " + std::to_string(rows));
  if (cols < 0) return InvalidArgumentError(std::string(op) + ": cols must be >= 0, got " + std::to_string(cols));
  return OkStatus();
}

Status CheckPointer(const char* op, const char* name, const void* p, int64_t count) {
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
        const float s = ScaleInvFromAmax(BitsToFloat(AbsMaxBits(x + r * cols + c0, n)), fmt, sf);
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
      for (int64_t r = r0; r < r1; ++r) m = AbsMaxBits(x + r * cols + c0, n, m);
      const float s = ScaleInvFromAmax(BitsToFloat(m), fmt, sf);
      if (scale_inv != nullptr) scale_inv[b * tiles + t] = s;
      for (int64_t r = r0; r < r1; ++r) emit(r, c0, n, s);
    }
  });
}

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

Status CheckQuantizeArgs(const char* op, const float* x, int64_t rows, int64_t cols,
                         const uint8_t* q, const float* scale_inv) {
  FP8_RETURN_IF_ERROR(CheckShape(op, rows, cols));
  FP8_RETURN_IF_ERROR(CheckPointer(op, "x", x, rows * cols));
  FP8_RETURN_IF_ERROR(CheckPointer(op, "q", q, rows * cols));
  return CheckPointer(op, "scale_inv", scale_inv, rows * cols);
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

namespace {

Status CheckDequantizeArgs(const char* op, const uint8_t* q, const float* scale_inv,
                           int64_t rows, int64_t cols, const float* x) {
  FP8_RETURN_IF_ERROR(CheckShape(op, rows, cols));
  FP8_RETURN_IF_ERROR(CheckPointer(op, "q", q, rows * cols));
  FP8_RETURN_IF_ERROR(CheckPointer(op, "scale_inv", scale_inv, rows * cols));
  return CheckPointer(op, "x", x, rows * cols);
}

}  // namespace

Status Dequantize1x128(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                       Fp8Format fmt, float* x) {
  FP8_RETURN_IF_ERROR(CheckDequantizeArgs("Dequantize1x128", q, scale_inv, rows, cols, x));
  const int64_t tiles = CeilDiv(cols, kTile);
  WithFormat(fmt, [&]<Fp8Format F>() {
    ParallelFor(rows, MinRowsPerChunk(cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t c0 = t * kTile;
          internal::DequantSpan<F>(q + r * cols + c0, std::min(kTile, cols - c0), scale_inv[r * tiles + t],
                                   x + r * cols + c0);
        }
      }
    });
  });
  return OkStatus();
}

Status Dequantize128x1(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                       Fp8Format fmt, float* x) {
  FP8_RETURN_IF_ERROR(CheckDequantizeArgs("Dequantize128x1", q, scale_inv, rows, cols, x));
  WithFormat(fmt, [&]<Fp8Format F>() {
    ParallelFor(rows, MinRowsPerChunk(cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        internal::DequantSpanScales<F>(q + r * cols, cols, scale_inv + (r / kTile) * cols, x + r * cols);
      }
    });
  });
  return OkStatus();
}

Status Dequantize128x128(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                         Fp8Format fmt, float* x) {
  FP8_RETURN_IF_ERROR(CheckDequantizeArgs("Dequantize128x128", q, scale_inv, rows, cols, x));
  const int64_t tiles = CeilDiv(cols, kTile);
  WithFormat(fmt, [&]<Fp8Format F>() {
    ParallelFor(rows, MinRowsPerChunk(cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t c0 = t * kTile;
          internal::DequantSpan<F>(q + r * cols + c0, std::min(kTile, cols - c0),
                                   scale_inv[(r / kTile) * tiles + t], x + r * cols + c0);
        }
      }
    });
  });
  return OkStatus();
}

void DequantizeTensor(const uint8_t* q, int64_t n, float scale_inv, Fp8Format fmt, float* x) {
  WithFormat(fmt, [&]<Fp8Format F>() {
    ParallelFor(n, kMinElementsPerChunk, [&](int64_t b, int64_t e) {
      internal::DequantSpan<F>(q + b, e - b, scale_inv, x + b);
    });
  });
}

Status FakeQuantize(const float* x, int64_t rows, int64_t cols, Granularity g, Fp8Format fmt,
                    ScaleFormat sf, float tensor_scale_inv, float* y, float* scale_inv) {
  constexpr const char* kOp = "FakeQuantize";
  FP8_RETURN_IF_ERROR(CheckShape(kOp, rows, cols));
  FP8_RETURN_IF_ERROR(CheckPointer(kOp, "x", x, rows * cols));
  FP8_RETURN_IF_ERROR(CheckPointer(kOp, "y", y, rows * cols));
  switch (g) {
    case Granularity::kTensor: {
      if (!(tensor_scale_inv > 0.0f) || !std::isfinite(tensor_scale_inv)) {
        return InvalidArgumentError(std::string(kOp) + ": tensor_scale_inv must be finite and > 0, got " +
                                    std::to_string(tensor_scale_inv));
      }
      if (scale_inv != nullptr) *scale_inv = tensor_scale_inv;
      const int64_t n = rows * cols;
      WithFormat(fmt, [&]<Fp8Format F>() {
        ParallelFor(n, kMinElementsPerChunk, [&](int64_t b, int64_t e) {
          internal::FakeSpan<F>(x + b, e - b, tensor_scale_inv, y + b);
        });
      });
      return OkStatus();
    }
    case Granularity::k1x128:
      WithFormat(fmt, [&]<Fp8Format F>() {
        WalkRowTiles(x, rows, cols, fmt, sf, scale_inv, [&](int64_t r, int64_t c0, int64_t n, float s) {
          internal::FakeSpan<F>(x + r * cols + c0, n, s, y + r * cols + c0);
        });
      });
      return OkStatus();
    case Granularity::k128x1:
      WithFormat(fmt, [&]<Fp8Format F>() {
        WalkColumnTiles(x, rows, cols, fmt, sf, scale_inv,
                        [&](int64_t, int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* s) {
                          for (int64_t r = r0; r < r1; ++r)
                            internal::FakeSpanScales<F>(x + r * cols + c0, c1 - c0, s, y + r * cols + c0);
                        });
      });
      return OkStatus();
    case Granularity::k128x128:
      WithFormat(fmt, [&]<Fp8Format F>() {
        WalkBlockTiles(x, rows, cols, fmt, sf, scale_inv, [&](int64_t r, int64_t c0, int64_t n, float s) {
          internal::FakeSpan<F>(x + r * cols + c0, n, s, y + r * cols + c0);
        });
      });
      return OkStatus();
  }
  return InvalidArgumentError(std::string(kOp) + ": unknown granularity " + std::to_string(static_cast<int>(g)));
}

}  // namespace fp8::kernels
