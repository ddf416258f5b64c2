// The calibration job's fused cast + statistics (kernels/cpu/quantize_stats.h) against the
// reference conversion: bytes equal FloatToFp8(x / s) for every bf16 and fp16 pattern and a
// dense float32 sample, for both formats and several scales; the sums equal a double-precision
// recomputation through the decode table. Whichever of the AVX2 / baseline builds the loader
// picked on this machine is the one tested (scripts/gpu/calibrate_cuda.sh runs this suite on an
// AVX2 host too).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quantize_stats.h"
#include "kernels/fp8_format.h"

namespace fp8::kernels {
namespace {

struct Case {
  SourceType type;
  std::vector<uint8_t> bytes;  // the source elements
  std::vector<float> values;   // the same, widened (the reference input)
};

Case Bf16Patterns() {
  Case c{SourceType::kBf16, {}, {}};
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    c.bytes.insert(c.bytes.end(), reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 2);
    c.values.push_back(std::bit_cast<float>(h << 16));
  }
  return c;
}

Case F16Patterns() {
  Case c{SourceType::kF16, {}, {}};
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    c.bytes.insert(c.bytes.end(), reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 2);
    c.values.push_back(HalfToFloat(v));
  }
  return c;
}

// Every float32 exponent and sign, with random mantissas, plus ties and values right at the
// format's rounding boundaries' neighbourhood (random bits cover them densely enough).
Case F32Sample() {
  Case c{SourceType::kF32, {}, {}};
  std::mt19937 rng(5);
  for (int i = 0; i < 400'000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    c.values.push_back(x);
  }
  c.bytes.resize(c.values.size() * 4);
  std::memcpy(c.bytes.data(), c.values.data(), c.bytes.size());
  return c;
}

// The reference: bytes through FloatToFp8, sums in double through the decode table.
RoundTripSums Reference(const std::vector<float>& x, float s, Fp8Format fmt, std::vector<uint8_t>* q) {
  RoundTripSums r;
  q->resize(x.size());
  const float limit = Fp8ClipThreshold(fmt) * s;
  for (size_t i = 0; i < x.size(); ++i) {
    (*q)[i] = FloatToFp8(x[i] / s, fmt, Saturation::kSatFinite);
    const float h = Fp8ToFloat((*q)[i], fmt) * s;
    r.sum_x2 += double(x[i]) * x[i];
    r.sum_e2 += double(x[i] - h) * (x[i] - h);
    r.saturated += std::fabs(x[i]) >= limit;
    r.flushed += x[i] != 0.0f && h == 0.0f;
    r.nonzero += x[i] != 0.0f;
  }
  return r;
}

// Bytes: every element, finite or not. Sums: only over finite inputs (the calibration job
// refuses a tensor with a NaN/Inf before it looks at the sums).
void CheckCase(const Case& c, Fp8Format fmt, float s) {
  const size_t esize = c.bytes.size() / c.values.size();
  std::vector<uint8_t> want;
  Reference(c.values, s, fmt, &want);
  std::vector<uint8_t> got(c.values.size());
  RoundTripSums ignored;
  // Odd span lengths, so chunk tails and the widening's remainders are exercised.
  for (size_t at = 0, len = 1; at < c.values.size(); at += len, len = len * 3 % 1021 + 1) {
    const size_t n = std::min(len, c.values.size() - at);
    CastSpanWithStats(c.type, c.bytes.data() + at * esize, static_cast<int64_t>(n), s, fmt, got.data() + at, &ignored);
  }
  int64_t mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && ++mismatches <= 5)
      ADD_FAILURE() << "x = " << c.values[i] << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(c.values[i])
                    << ") s = " << s << ": got 0x" << int(got[i]) << ", want 0x" << int(want[i]) << std::dec;
  }
  EXPECT_EQ(mismatches, 0);

  std::vector<uint8_t> finite_bytes;
  std::vector<float> finite;
  for (size_t i = 0; i < c.values.size(); ++i) {
    if (!std::isfinite(c.values[i])) continue;
    finite.push_back(c.values[i]);
    finite_bytes.insert(finite_bytes.end(), c.bytes.begin() + i * esize, c.bytes.begin() + (i + 1) * esize);
  }
  // Squares of the largest float32 values overflow FP32 partial sums; keep the sums' check to
  // values whose squares are representable (weights are far below that).
  {
    std::vector<uint8_t> b;
    std::vector<float> v;
    for (size_t i = 0; i < finite.size(); ++i) {
      if (std::fabs(finite[i]) > 1e15f || std::fabs(finite[i] / s) > 1e30f) continue;
      v.push_back(finite[i]);
      b.insert(b.end(), finite_bytes.begin() + i * esize, finite_bytes.begin() + (i + 1) * esize);
    }
    finite.swap(v);
    finite_bytes.swap(b);
  }
  std::vector<uint8_t> q_ref, q(finite.size());
  const RoundTripSums ref = Reference(finite, s, fmt, &q_ref);
  RoundTripSums sums;
  CastSpanWithStats(c.type, finite_bytes.data(), static_cast<int64_t>(finite.size()), s, fmt, q.data(), &sums);
  EXPECT_EQ(sums.saturated, ref.saturated);
  EXPECT_EQ(sums.flushed, ref.flushed);
  EXPECT_EQ(sums.nonzero, ref.nonzero);
  EXPECT_NEAR(sums.sum_x2, ref.sum_x2, 1e-5 * ref.sum_x2);
  EXPECT_NEAR(sums.sum_e2, ref.sum_e2, 1e-5 * ref.sum_e2);

  uint32_t amax_ref = 0;
  for (float v : c.values) amax_ref = std::max(amax_ref, std::bit_cast<uint32_t>(v) & 0x7FFFFFFFu);
  EXPECT_EQ(SourceAbsMaxBits(c.type, c.bytes.data(), static_cast<int64_t>(c.values.size())), amax_ref);
}

// Scales: 1, powers of two (ue8m0), typical weight scales, and ones that push values into the
// FP8 subnormal range or past the clip.
const float kScales[] = {1.0f, 0.0078125f, 3.7e-5f, 0.02f / 448.0f * 3.1f, 2.5f, 1e-30f, 7.0e3f};

TEST(QuantizeStats, Bf16EveryPatternMatchesTheReference) {
  const Case c = Bf16Patterns();
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2})
    for (float s : kScales) {
      SCOPED_TRACE(testing::Message() << Fp8FormatName(fmt) << " s=" << s);
      CheckCase(c, fmt, s);
    }
}

TEST(QuantizeStats, F16EveryPatternMatchesTheReference) {
  const Case c = F16Patterns();
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2})
    for (float s : kScales) {
      SCOPED_TRACE(testing::Message() << Fp8FormatName(fmt) << " s=" << s);
      CheckCase(c, fmt, s);
    }
}

TEST(QuantizeStats, F32SampleMatchesTheReference) {
  const Case c = F32Sample();
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2})
    for (float s : kScales) {
      SCOPED_TRACE(testing::Message() << Fp8FormatName(fmt) << " s=" << s);
      CheckCase(c, fmt, s);
    }
}

TEST(QuantizeStats, EmptySpanAddsNothing) {
  RoundTripSums sums;
  CastSpanWithStats(SourceType::kBf16, nullptr, 0, 1.0f, Fp8Format::kE4M3, nullptr, &sums);
  EXPECT_EQ(sums.nonzero, 0);
  EXPECT_EQ(sums.sum_x2, 0.0);
  EXPECT_EQ(SourceAbsMaxBits(SourceType::kF32, nullptr, 0, 7u), 7u);
}

}  // namespace
}  // namespace fp8::kernels
