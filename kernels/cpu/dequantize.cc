// SPDX-License-Identifier: Apache-2.0
// Dequantize kernels and FakeQuantize, CPU reference (docs/design.md §6). Dequantization is
// x = decode(q) · scale_inv; FakeQuantize walks the same tiles as the quantizers and rounds on
// the FP32 grid directly, bit-identical to Quantize* followed by Dequantize*.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cpu/tile_walkers_inl.h"
#include "kernels/quantize.h"

namespace fp8::kernels {

using namespace internal;  // NOLINT: the walkers and span loops of this part

namespace {

// x = decode(q) · scale_inv over a span, compiled for AVX2 and for the x86-64-v2 baseline and
// picked at load time (as the casts in quantize.cc): an integer decode and one IEEE multiply,
// so both builds give the same floats; tests/kernels_cpu/quantize_isa_test.cc checks every code.
[[gnu::target_clones("avx2", "default")]]
void DequantSpanE4M3(const uint8_t* q, int64_t n, float scale_inv, float* x) {
  internal::DequantSpan<Fp8Format::kE4M3>(q, n, scale_inv, x);
}
[[gnu::target_clones("avx2", "default")]]
void DequantSpanE5M2(const uint8_t* q, int64_t n, float scale_inv, float* x) {
  internal::DequantSpan<Fp8Format::kE5M2>(q, n, scale_inv, x);
}
template <Fp8Format kFmt>
inline void DequantSpanAnyIsa(const uint8_t* q, int64_t n, float scale_inv, float* x) {
  if constexpr (kFmt == Fp8Format::kE4M3) {
    DequantSpanE4M3(q, n, scale_inv, x);
  } else {
    DequantSpanE5M2(q, n, scale_inv, x);
  }
}

Status CheckDequantizeArgs(const char* op, const uint8_t* q, const float* scale_inv,
                           int64_t rows, int64_t cols, const float* x) {
  FP8_RETURN_IF_ERROR(CheckShape(op, rows, cols));
  FP8_RETURN_IF_ERROR(CheckPointer(op, "q", q, rows * cols));
  FP8_RETURN_IF_ERROR(CheckPointer(op, "scale_inv", scale_inv, rows * cols));
  return CheckPointer(op, "x", x, rows * cols);
}

}  // namespace

namespace {
// Tiles of kTile columns; row r's tile t is scaled by scale_inv[(r / rows_per_scale) * tiles + t]
// (1x128: a scale row per row; 128x128: one per kTile rows).
void DequantizeColumnTiles(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                           int64_t rows_per_scale, Fp8Format fmt, float* x) {
  const int64_t tiles = CeilDiv(cols, kTile);
  WithFormat(fmt, [&]<Fp8Format F>() {
    ParallelFor(rows, MinRowsPerChunk(cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t c0 = t * kTile;
          DequantSpanAnyIsa<F>(q + r * cols + c0, std::min(kTile, cols - c0),
                               scale_inv[(r / rows_per_scale) * tiles + t], x + r * cols + c0);
        }
      }
    });
  });
}
}  // namespace

Status Dequantize1x128(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                       Fp8Format fmt, float* x) {
  FP8_RETURN_IF_ERROR(CheckDequantizeArgs("Dequantize1x128", q, scale_inv, rows, cols, x));
  DequantizeColumnTiles(q, scale_inv, rows, cols, 1, fmt, x);
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
  DequantizeColumnTiles(q, scale_inv, rows, cols, kTile, fmt, x);
  return OkStatus();
}

void DequantizeTensor(const uint8_t* q, int64_t n, float scale_inv, Fp8Format fmt, float* x) {
  WithFormat(fmt, [&]<Fp8Format F>() {
    ParallelFor(n, kMinElementsPerChunk, [&](int64_t b, int64_t e) {
      DequantSpanAnyIsa<F>(q + b, e - b, scale_inv, x + b);
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
