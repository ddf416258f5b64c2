// Quantize / dequantize kernels, CPU reference (design §6). Every granularity is one generic
// tile walker (amax → scale_inv → cast) with a pluggable "emit" step, so Quantize* and
// FakeQuantize share the scale logic and stay bit-identical by construction.
#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

// 128x1 tiles: one scale per column per 128-row block. emit_block(rb, r0, r1, scales[cols]).
template <typename EmitBlock>
void WalkColumnTiles(const float* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                     float* scale_inv, EmitBlock&& emit_block) {
  const int64_t blocks = CeilDiv(rows, kTile);
  ParallelFor(blocks, std::max<int64_t>(1, MinRowsPerChunk(cols) / kTile), [&](int64_t b0, int64_t b1) {
    std::vector<uint32_t> amax(static_cast<size_t>(cols));
    std::vector<float> scales(static_cast<size_t>(cols));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * kTile, r1 = std::min(rows, r0 + kTile);
      std::fill(amax.begin(), amax.end(), 0u);
      for (int64_t r = r0; r < r1; ++r) AbsMaxBitsInto(x + r * cols, cols, amax.data());
      for (int64_t c = 0; c < cols; ++c) scales[c] = ScaleInvFromAmax(BitsToFloat(amax[c]), fmt, sf);
      if (scale_inv != nullptr) std::copy(scales.begin(), scales.end(), scale_inv + b * cols);
      emit_block(b, r0, r1, scales.data());
    }
  });
}

// 128x128 tiles. emit(row, col0, n, scale_inv).
template <typename Emit>
void WalkBlockTiles(const float* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                    float* scale_inv, Emit&& emit) {
  const int64_t blocks = CeilDiv(rows, kTile);
  const int64_t tiles = CeilDiv(cols, kTile);
  ParallelFor(blocks, std::max<int64_t>(1, MinRowsPerChunk(cols) / kTile), [&](int64_t b0, int64_t b1) {
    std::vector<float> scales(static_cast<size_t>(tiles));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * kTile, r1 = std::min(rows, r0 + kTile);
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t c0 = t * kTile;
        const int64_t n = std::min(kTile, cols - c0);
        uint32_t m = 0;
        for (int64_t r = r0; r < r1; ++r) m = AbsMaxBits(x + r * cols + c0, n, m);
        scales[t] = ScaleInvFromAmax(BitsToFloat(m), fmt, sf);
        if (scale_inv != nullptr) scale_inv[b * tiles + t] = scales[t];
      }
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t c0 = t * kTile;
          emit(r, c0, std::min(kTile, cols - c0), scales[t]);
        }
      }
    }
  });
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
    WalkColumnTiles(x, rows, cols, fmt, sf, scale_inv, [&](int64_t, int64_t r0, int64_t r1, const float* s) {
      for (int64_t r = r0; r < r1; ++r) internal::CastSpanScales<F>(x + r * cols, cols, s, q + r * cols);
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
    WalkColumnTiles(x, rows, cols, fmt, sf, nullptr, [&](int64_t b, int64_t r0, int64_t r1, const float* s) {
      for (int64_t c = 0; c < cols; ++c) scale_inv_t[c * blocks + b] = s[c];
      // Column strips keep the strided byte writes within a few dozen cache lines.
      constexpr int64_t kStrip = 64;
      for (int64_t cs = 0; cs < cols; cs += kStrip) {
        const int64_t ce = std::min(cols, cs + kStrip);
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = x + r * cols;
          for (int64_t c = cs; c < ce; ++c) qt[c * rows + r] = internal::EncodeFp8<F, true>(xr[c] / s[c]);
        }
      }
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
  const float* table = Fp8DecodeTable(fmt);
  const int64_t tiles = CeilDiv(cols, kTile);
  ParallelFor(rows, MinRowsPerChunk(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = table[q[r * cols + c]] * scale_inv[r * tiles + c / kTile];
    }
  });
  return OkStatus();
}

Status Dequantize128x1(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                       Fp8Format fmt, float* x) {
  FP8_RETURN_IF_ERROR(CheckDequantizeArgs("Dequantize128x1", q, scale_inv, rows, cols, x));
  const float* table = Fp8DecodeTable(fmt);
  ParallelFor(rows, MinRowsPerChunk(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* s = scale_inv + (r / kTile) * cols;
      for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = table[q[r * cols + c]] * s[c];
    }
  });
  return OkStatus();
}

Status Dequantize128x128(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                         Fp8Format fmt, float* x) {
  FP8_RETURN_IF_ERROR(CheckDequantizeArgs("Dequantize128x128", q, scale_inv, rows, cols, x));
  const float* table = Fp8DecodeTable(fmt);
  const int64_t tiles = CeilDiv(cols, kTile);
  ParallelFor(rows, MinRowsPerChunk(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* s = scale_inv + (r / kTile) * tiles;
      for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = table[q[r * cols + c]] * s[c / kTile];
    }
  });
  return OkStatus();
}

void DequantizeTensor(const uint8_t* q, int64_t n, float scale_inv, Fp8Format fmt, float* x) {
  const float* table = Fp8DecodeTable(fmt);
  ParallelFor(n, kMinElementsPerChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = table[q[i]] * scale_inv;
  });
}

Status FakeQuantize(const float* x, int64_t rows, int64_t cols, Granularity g, Fp8Format fmt,
                    ScaleFormat sf, float tensor_scale_inv, float* y, float* scale_inv) {
  constexpr const char* kOp = "FakeQuantize";
  FP8_RETURN_IF_ERROR(CheckShape(kOp, rows, cols));
  FP8_RETURN_IF_ERROR(CheckPointer(kOp, "x", x, rows * cols));
  FP8_RETURN_IF_ERROR(CheckPointer(kOp, "y", y, rows * cols));
  const float* table = Fp8DecodeTable(fmt);
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
          internal::FakeSpan<F>(x + b, e - b, tensor_scale_inv, table, y + b);
        });
      });
      return OkStatus();
    }
    case Granularity::k1x128:
      WithFormat(fmt, [&]<Fp8Format F>() {
        WalkRowTiles(x, rows, cols, fmt, sf, scale_inv, [&](int64_t r, int64_t c0, int64_t n, float s) {
          internal::FakeSpan<F>(x + r * cols + c0, n, s, table, y + r * cols + c0);
        });
      });
      return OkStatus();
    case Granularity::k128x1:
      WithFormat(fmt, [&]<Fp8Format F>() {
        WalkColumnTiles(x, rows, cols, fmt, sf, scale_inv, [&](int64_t, int64_t r0, int64_t r1, const float* s) {
          for (int64_t r = r0; r < r1; ++r) internal::FakeSpanScales<F>(x + r * cols, cols, s, table, y + r * cols);
        });
      });
      return OkStatus();
    case Granularity::k128x128:
      WithFormat(fmt, [&]<Fp8Format F>() {
        WalkBlockTiles(x, rows, cols, fmt, sf, scale_inv, [&](int64_t r, int64_t c0, int64_t n, float s) {
          internal::FakeSpan<F>(x + r * cols + c0, n, s, table, y + r * cols + c0);
        });
      });
      return OkStatus();
  }
  return InvalidArgumentError(std::string(kOp) + ": unknown granularity " + std::to_string(static_cast<int>(g)));
}

}  // namespace fp8::kernels
