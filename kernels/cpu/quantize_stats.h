// Fused quantize + round-trip statistics over one span of one scale, reading the source dtype
// (F32, BF16, F16) directly. For the calibration job (worker/calibrate/tensor_convert.cc), whose
// per-element work used to be four passes over the data (widen to FP32, tile amax, cast, a
// statistics pass with a decode-table gather); here it is an amax pass over the source and one
// fused pass that casts, rounds onto the FP8 grid (no gather) and sums the error.
//
// The bytes equal Quantize*'s CastSpan (x / scale_inv, a true IEEE division, then the
// saturating RNE encoder) bit for bit: tests/kernels_cpu/quantize_stats_test.cc checks every
// bf16 and fp16 pattern and a dense float32 sample. The functions are compiled twice (AVX2 and
// the portable x86-64-v2 baseline) and picked at run time; both are the same C++ with IEEE
// operations only and no FMA contraction, so they give the same bytes.
#pragma once

#include <cstdint>

#include "kernels/fp8_format.h"

namespace fp8::kernels {

enum class SourceType : uint8_t { kF32, kBf16, kF16 };

// Sums over the round trip x → q = fp8(x / s) → x̂ = decode(q) · s.
struct RoundTripSums {
  double sum_x2 = 0;      // Σ x²
  double sum_e2 = 0;      // Σ (x − x̂)²
  int64_t saturated = 0;  // |x| ≥ clip · s: the cast clipped (clip = max + half an ulp at max)
  int64_t flushed = 0;    // x ≠ 0 but x̂ = 0
  int64_t nonzero = 0;

  void Add(const RoundTripSums& o) {
    sum_x2 += o.sum_x2;
    sum_e2 += o.sum_e2;
    saturated += o.saturated;
    flushed += o.flushed;
    nonzero += o.nonzero;
  }
};

// max |x| of n source elements as FP32 bits, folded into `init`. Any NaN (bits > 0x7F800000)
// wins, as in AbsMaxBits; so a NaN tile gets a NaN scale.
uint32_t SourceAbsMaxBits(SourceType type, const void* src, int64_t n, uint32_t init = 0);

// q[i] = fp8(x[i] / scale_inv) (saturating, RNE) for n source elements, adding the round trip's
// sums to *sums. Float partial sums per 256 elements, then double.
void CastSpanWithStats(SourceType type, const void* src, int64_t n, float scale_inv, Fp8Format fmt,
                       uint8_t* q, RoundTripSums* sums);

// The clip threshold behind RoundTripSums::saturated: max + half an ulp at max.
constexpr float Fp8ClipThreshold(Fp8Format f) { return f == Fp8Format::kE4M3 ? 464.0f : 61440.0f; }

}  // namespace fp8::kernels
