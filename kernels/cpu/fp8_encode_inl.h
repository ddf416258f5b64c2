// SPDX-License-Identifier: Apache-2.0
// Branch-free float → FP8 encoders, inlined into the quantize loops so they auto-vectorize
// (only integer/float selects, adds and shifts). They reproduce cuda_fp8.h's host conversion
// __nv_cvt_float_to_fp8 bit for bit; tests/kernels_cpu checks every bf16/fp16 pattern and a
// dense float32 sample against that header.
//
// Why the two paths agree with CUDA's round-to-nearest-even:
//  * normal range: adding (half-ULP − 1 + lsb) to the float bits and truncating is RNE on the
//    bit pattern; a carry into the exponent is the correct round-up to the next binade.
//  * FP8 subnormal range: the FP8 quantum is a fixed power of two q, so |v| + C with
//    C = 2^23·q rounds |v| to a multiple of q (the FPU's own RNE), and the FP8 code is simply
//    bits(|v| + C) − bits(C). A result of 2^M lands on the smallest normal, as it should.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/fp8_format.h"

namespace fp8::kernels::internal {

template <Fp8Format kFmt>
struct Fp8Traits;

template <>
struct Fp8Traits<Fp8Format::kE4M3> {
  static constexpr int kMantBits = 3;
  static constexpr int kBias = 7;
  static constexpr uint32_t kMinNormBits = 0x3C800000u;   // 2^-6
  static constexpr uint32_t kOverflowBits = 0x43E80000u;  // 464 = max + half ULP; ties → 448
  static constexpr uint32_t kMaxNorm = 0x7Eu;
  static constexpr uint32_t kNoSatOverflow = 0x7Fu;  // no Inf in E4M3fn: NaN
  static constexpr float kSubnormMagic = 16384.0f;   // 2^23 · 2^-9
  static constexpr float kMinSubnormal = 0x1p-9f;
};

template <>
struct Fp8Traits<Fp8Format::kE5M2> {
  static constexpr int kMantBits = 2;
  static constexpr int kBias = 15;
  static constexpr uint32_t kMinNormBits = 0x38800000u;  // 2^-14
  // 61440 = max + half ULP: a tie whose even neighbour is 65536, so it overflows (>=).
  static constexpr uint32_t kOverflowBits = 0x47700000u - 1u;
  static constexpr uint32_t kMaxNorm = 0x7Bu;
  static constexpr uint32_t kNoSatOverflow = 0x7Cu;  // Inf
  static constexpr float kSubnormMagic = 128.0f;     // 2^23 · 2^-16
  static constexpr float kMinSubnormal = 0x1p-16f;
};

template <Fp8Format kFmt, bool kSaturate>
inline uint8_t EncodeFp8(float x) {
  using T = Fp8Traits<kFmt>;
  constexpr int kShift = 23 - T::kMantBits;
  constexpr uint32_t kHalfMinusOne = (1u << (kShift - 1)) - 1u;
  constexpr uint32_t kRebias = uint32_t(127 - T::kBias) << T::kMantBits;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;

  const uint32_t normal = ((abs_bits + kHalfMinusOne + ((abs_bits >> kShift) & 1u)) >> kShift) -
                          kRebias;
  const float abs_val = std::bit_cast<float>(abs_bits);
  const uint32_t subnormal = std::bit_cast<uint32_t>(abs_val + T::kSubnormMagic) -
                             std::bit_cast<uint32_t>(T::kSubnormMagic);
  // abs_bits < 2^31, so signed compares are exact; SSE has signed 32-bit compares only (an
  // unsigned one costs extra instructions per vector).
  const int32_t abs_i = static_cast<int32_t>(abs_bits);
  uint32_t code = abs_i < static_cast<int32_t>(T::kMinNormBits) ? subnormal : normal;
  code = abs_i > static_cast<int32_t>(T::kOverflowBits) ? (kSaturate ? T::kMaxNorm : T::kNoSatOverflow) : code;
  code |= sign;
  // NaN: CUDA canonicalizes the input to +NaN first, so both formats give 0x7F.
  code = abs_i > 0x7F800000 ? 0x7Fu : code;
  return static_cast<uint8_t>(code);
}

// Arithmetic decode, equal bit for bit to Fp8DecodeTable (tested for all 256 codes) but built
// from shifts, an int→float conversion and selects, so decode loops vectorize (a table lookup
// is a gather, which SSE does not have). NaN codes give the canonical +NaN 0x7FFFFFFF.
template <Fp8Format kFmt>
inline float DecodeFp8(uint32_t code) {
  using T = Fp8Traits<kFmt>;
  constexpr int kShift = 23 - T::kMantBits;
  const uint32_t mag = code & 0x7Fu;
  const uint32_t sign = (code & 0x80u) << 24;
  // Exponent field 0: mantissa · min_subnormal (exact); otherwise re-bias the exponent.
  const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(mag)) * T::kMinSubnormal);
  const uint32_t normal = (mag << kShift) + (uint32_t(127 - T::kBias) << 23);
  uint32_t bits = (mag < (1u << T::kMantBits) ? subnormal : normal) | sign;
  if constexpr (kFmt == Fp8Format::kE5M2) {
    bits = mag == 0x7Cu ? (0x7F800000u | sign) : bits;  // ±Inf
    bits = mag > 0x7Cu ? 0x7FFFFFFFu : bits;
  } else {
    bits = mag == 0x7Fu ? 0x7FFFFFFFu : bits;
  }
  return std::bit_cast<float>(bits);
}

// decode(encode_satfinite(x)) without the byte in between, for FakeQuantize: the value is
// rounded on the FP32 grid directly (normal range: RNE on the bit pattern with the low
// mantissa bits cleared; subnormal range: the same magic add as EncodeFp8, then subtract it
// back, which is exact), clamped to ±max, NaN → +NaN 0x7FFFFFFF. Equal bit for bit to
// Fp8DecodeTable[EncodeFp8<kFmt, true>(x)] — tested on every bf16/fp16 pattern.
template <Fp8Format kFmt>
inline float RoundToFp8Grid(float x) {
  using T = Fp8Traits<kFmt>;
  constexpr int kShift = 23 - T::kMantBits;
  constexpr uint32_t kHalfMinusOne = (1u << (kShift - 1)) - 1u;
  constexpr uint32_t kMaxBits = kFmt == Fp8Format::kE4M3 ? 0x43E00000u : 0x47600000u;  // 448, 57344
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  const uint32_t normal = (abs_bits + kHalfMinusOne + ((abs_bits >> kShift) & 1u)) & ~((1u << kShift) - 1u);
  const float abs_val = std::bit_cast<float>(abs_bits);
  const uint32_t subnormal = std::bit_cast<uint32_t>((abs_val + T::kSubnormMagic) - T::kSubnormMagic);
  const int32_t abs_i = static_cast<int32_t>(abs_bits);  // < 2^31: signed compares are exact
  int32_t r = abs_i < static_cast<int32_t>(T::kMinNormBits) ? static_cast<int32_t>(subnormal) : static_cast<int32_t>(normal);
  r = std::min(r, static_cast<int32_t>(kMaxBits));  // Inf and every value that rounds past max
  uint32_t out = static_cast<uint32_t>(r) | (bits & 0x80000000u);
  out = abs_i > 0x7F800000 ? 0x7FFFFFFFu : out;
  return std::bit_cast<float>(out);
}

}  // namespace fp8::kernels::internal
