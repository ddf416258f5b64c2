// SPDX-License-Identifier: Apache-2.0
// FP8/FP16/BF16 conversions against independent oracles (no CUDA needed): exact decode of the
// format definitions, brute-force nearest-value search with ties to even, and the compiler's
// own _Float16 conversions.
#include "kernels/fp8_format.h"

#include "kernels/cpu/fp8_encode_inl.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace fp8::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Fp8Format, DecodesKnownCodes) {
  EXPECT_EQ(Fp8ToFloat(0x00, Fp8Format::kE4M3), 0.0f);
  EXPECT_TRUE(std::signbit(Fp8ToFloat(0x80, Fp8Format::kE4M3)));
  EXPECT_EQ(Fp8ToFloat(0x38, Fp8Format::kE4M3), 1.0f);
  EXPECT_EQ(Fp8ToFloat(0x7E, Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(Fp8ToFloat(0xFE, Fp8Format::kE4M3), -448.0f);
  EXPECT_EQ(Fp8ToFloat(0x01, Fp8Format::kE4M3), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(Fp8ToFloat(0x08, Fp8Format::kE4M3), std::ldexp(1.0f, -6));  // min normal
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0x7F, Fp8Format::kE4M3)));
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0xFF, Fp8Format::kE4M3)));

  EXPECT_EQ(Fp8ToFloat(0x3C, Fp8Format::kE5M2), 1.0f);
  EXPECT_EQ(Fp8ToFloat(0x7B, Fp8Format::kE5M2), 57344.0f);
  EXPECT_EQ(Fp8ToFloat(0x7C, Fp8Format::kE5M2), kInf);
  EXPECT_EQ(Fp8ToFloat(0xFC, Fp8Format::kE5M2), -kInf);
  EXPECT_EQ(Fp8ToFloat(0x01, Fp8Format::kE5M2), std::ldexp(1.0f, -16));
  for (int b : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(std::isnan(Fp8ToFloat(b, Fp8Format::kE5M2)));
  EXPECT_EQ(Fp8Max(Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(Fp8Max(Fp8Format::kE5M2), 57344.0f);
}

TEST(Fp8Format, EveryFiniteCodeRoundTrips) {
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int b = 0; b < 256; ++b) {
      const float v = Fp8ToFloat(static_cast<uint8_t>(b), fmt);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(FloatToFp8(v, fmt, Saturation::kSatFinite), b) << Fp8FormatName(fmt) << " " << b;
      EXPECT_EQ(FloatToFp8(v, fmt, Saturation::kNoSat), b) << Fp8FormatName(fmt) << " " << b;
    }
  }
}

TEST(Fp8Format, ArithmeticDecodeEqualsTheTable) {
  // The vectorized loops decode with shifts and selects instead of the table.
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(std::bit_cast<uint32_t>(internal::DecodeFp8<Fp8Format::kE4M3>(b)),
              std::bit_cast<uint32_t>(Fp8DecodeTable(Fp8Format::kE4M3)[b])) << b;
    EXPECT_EQ(std::bit_cast<uint32_t>(internal::DecodeFp8<Fp8Format::kE5M2>(b)),
              std::bit_cast<uint32_t>(Fp8DecodeTable(Fp8Format::kE5M2)[b])) << b;
  }
}

template <Fp8Format kFmt>
int CountGridMismatches(float x) {
  const float via_byte = Fp8ToFloat(FloatToFp8(x, kFmt), kFmt);
  return std::bit_cast<uint32_t>(internal::RoundToFp8Grid<kFmt>(x)) != std::bit_cast<uint32_t>(via_byte);
}

TEST(Fp8Format, RoundToGridEqualsEncodeThenDecode) {
  // FakeQuantize's shortcut must be indistinguishable from the byte round trip.
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float from_bf16 = std::bit_cast<float>(h << 16);
    const float from_half = HalfToFloat(static_cast<uint16_t>(h));
    mismatches += CountGridMismatches<Fp8Format::kE4M3>(from_bf16) + CountGridMismatches<Fp8Format::kE5M2>(from_bf16);
    mismatches += CountGridMismatches<Fp8Format::kE4M3>(from_half) + CountGridMismatches<Fp8Format::kE5M2>(from_half);
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    mismatches += CountGridMismatches<Fp8Format::kE4M3>(x) + CountGridMismatches<Fp8Format::kE5M2>(x);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Fp8Format, SpecialValuesFollowCudaRules) {
  const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
  const Saturation sat = Saturation::kSatFinite, nosat = Saturation::kNoSat;
  // NaN → 0x7F in both formats, whatever its sign.
  for (float nan : {kNaN, -kNaN}) {
    for (Saturation s : {sat, nosat}) {
      EXPECT_EQ(FloatToFp8(nan, e4, s), 0x7F);
      EXPECT_EQ(FloatToFp8(nan, e5, s), 0x7F);
    }
  }
  // Infinity and overflow: clamp with satfinite; NaN (E4M3) / Inf (E5M2) without.
  for (float big : {kInf, 1e30f, 465.0f}) {
    EXPECT_EQ(FloatToFp8(big, e4, sat), 0x7E);
    EXPECT_EQ(FloatToFp8(-big, e4, sat), 0xFE);
    EXPECT_EQ(FloatToFp8(big, e4, nosat), 0x7F);
    EXPECT_EQ(FloatToFp8(-big, e4, nosat), 0xFF);
  }
  for (float big : {kInf, 1e30f, 61440.0f}) {
    EXPECT_EQ(FloatToFp8(big, e5, sat), 0x7B);
    EXPECT_EQ(FloatToFp8(-big, e5, sat), 0xFB);
    EXPECT_EQ(FloatToFp8(big, e5, nosat), 0x7C);
    EXPECT_EQ(FloatToFp8(-big, e5, nosat), 0xFC);
  }
  // Ties at the top round to the even code 448 / overflow past 57344 (its even neighbour is 2^16).
  EXPECT_EQ(FloatToFp8(464.0f, e4, nosat), 0x7E);
  EXPECT_EQ(FloatToFp8(std::nextafter(61440.0f, 0.0f), e5, nosat), 0x7B);
  // Signed zero and underflow.
  EXPECT_EQ(FloatToFp8(-0.0f, e4), 0x80);
  EXPECT_EQ(FloatToFp8(std::ldexp(1.0f, -10), e4), 0x00);  // exactly half the min subnormal: tie → 0
  EXPECT_EQ(FloatToFp8(std::nextafter(std::ldexp(1.0f, -10), 1.0f), e4), 0x01);
  EXPECT_EQ(FloatToFp8(-std::ldexp(1.0f, -17), e5), 0x80);
}

// The nearest representable value by exhaustive search in double, ties to the even code.
uint8_t BruteForceNearest(double x, Fp8Format fmt) {
  const double max = Fp8Max(fmt);
  const double ax = std::fabs(x);
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 0x80; ++c) {
    const double v = Fp8ToFloat(static_cast<uint8_t>(c), fmt);
    if (!std::isfinite(v)) continue;
    const double err = std::fabs(v - ax);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  // Beyond max + half an ULP the format has no nearest finite value: satfinite clamps.
  if (ax >= max) best = fmt == Fp8Format::kE4M3 ? 0x7E : 0x7B;
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8Format, RandomValuesRoundToNearestEven) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> exponent(-20.0, 17.0);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int i = 0; i < 20000; ++i) {
      const float x = static_cast<float>((i & 1 ? -1 : 1) * mantissa(rng) * std::exp2(std::floor(exponent(rng))));
      ASSERT_EQ(FloatToFp8(x, fmt), BruteForceNearest(x, fmt)) << Fp8FormatName(fmt) << " x=" << x;
    }
    // Exact midpoints between neighbouring codes go to the even one.
    for (int c = 0; c < 0x7F; ++c) {
      const double lo = Fp8ToFloat(static_cast<uint8_t>(c), fmt);
      const double hi = Fp8ToFloat(static_cast<uint8_t>(c + 1), fmt);
      if (!std::isfinite(hi)) continue;
      const float mid = static_cast<float>((lo + hi) / 2);
      EXPECT_EQ(FloatToFp8(mid, fmt), (c & 1) ? c + 1 : c) << Fp8FormatName(fmt) << " mid " << mid;
    }
  }
}

TEST(Fp8Format, HalfMatchesCompilerFloat16) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const _Float16 f16 = std::bit_cast<_Float16>(static_cast<uint16_t>(h));
    const float ours = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(static_cast<float>(f16))) {
      EXPECT_EQ(std::bit_cast<uint32_t>(ours), 0x7FFFFFFFu);  // canonical NaN, like CUDA
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(ours), std::bit_cast<uint32_t>(static_cast<float>(f16))) << h;
    }
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) {
      ASSERT_EQ(FloatToHalf(x), 0x7FFF);
    } else {
      ASSERT_EQ(FloatToHalf(x), std::bit_cast<uint16_t>(static_cast<_Float16>(x))) << x;
    }
  }
}

TEST(Fp8Format, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_EQ(FloatToBf16(kNaN), 0x7FFF);
  EXPECT_EQ(FloatToBf16(-kInf), 0xFF80);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to Inf
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = Bf16ToFloat(static_cast<uint16_t>(h));
    EXPECT_EQ(std::bit_cast<uint32_t>(v), h << 16);
    if (!std::isnan(v)) {
      EXPECT_EQ(FloatToBf16(v), h);
    }
  }
}

}  // namespace
}  // namespace fp8::kernels
