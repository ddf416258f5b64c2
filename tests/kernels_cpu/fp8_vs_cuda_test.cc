// SPDX-License-Identifier: Apache-2.0
// The CPU reference's conversions against CUDA's own host-side conversions in cuda_fp8.h /
// cuda_fp16.h / cuda_bf16.h (compiled here by the host compiler; they run on the CPU). This is
// what lets the GPU kernels be tested against the CPU reference bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/fp8_format.h"

namespace fp8::kernels {
namespace {

struct Mode {
  Fp8Format fmt;
  Saturation sat;
};
constexpr Mode kModes[] = {{Fp8Format::kE4M3, Saturation::kSatFinite},
                           {Fp8Format::kE4M3, Saturation::kNoSat},
                           {Fp8Format::kE5M2, Saturation::kSatFinite},
                           {Fp8Format::kE5M2, Saturation::kNoSat}};

uint8_t CudaEncode(float x, Mode m) {
  return __nv_cvt_float_to_fp8(x, m.sat == Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT,
                               m.fmt == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2);
}

float CudaDecode(uint8_t v, Fp8Format fmt) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(v, fmt == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2);
  return __half2float(__half(h));
}

// Counts mismatches and reports the first few, so one failure does not print 65536 lines.
class MismatchLog {
 public:
  void Check(uint32_t input_bits, Mode m, uint8_t expected, uint8_t actual) {
    if (expected == actual) return;
    if (++count_ <= 8) {
      ADD_FAILURE() << "input 0x" << std::hex << input_bits << " " << Fp8FormatName(m.fmt)
                    << (m.sat == Saturation::kSatFinite ? " satfinite" : " nosat") << ": cuda 0x"
                    << int(expected) << " ours 0x" << int(actual);
    }
  }
  int count() const { return count_; }

 private:
  int count_ = 0;
};

void CheckAllModes(float x, MismatchLog& log) {
  for (const Mode& m : kModes) log.Check(std::bit_cast<uint32_t>(x), m, CudaEncode(x, m), FloatToFp8(x, m.fmt, m.sat));
}

TEST(Fp8VsCuda, EveryBf16PatternEncodesLikeCuda) {
  MismatchLog log;
  for (uint32_t h = 0; h < 65536; ++h) CheckAllModes(std::bit_cast<float>(h << 16), log);
  EXPECT_EQ(log.count(), 0);
}

TEST(Fp8VsCuda, EveryFp16PatternEncodesLikeCuda) {
  MismatchLog log;
  for (uint32_t h = 0; h < 65536; ++h) {
    __half_raw raw;
    raw.x = static_cast<unsigned short>(h);
    CheckAllModes(__half2float(__half(raw)), log);
  }
  EXPECT_EQ(log.count(), 0);
}

TEST(Fp8VsCuda, DenseFloat32SampleEncodesLikeCuda) {
  MismatchLog log;
  std::mt19937_64 rng(20261129);
  // Uniform bit patterns: every exponent, subnormals, NaN payloads, infinities.
  for (int i = 0; i < 1'000'000; ++i) CheckAllModes(std::bit_cast<float>(static_cast<uint32_t>(rng())), log);
  // Concentrated where FP8 rounds: magnitudes 2^-20 .. 2^17 with random mantissas.
  std::uniform_int_distribution<uint32_t> exp_dist(127 - 20, 127 + 17);
  for (int i = 0; i < 1'000'000; ++i) {
    const uint32_t bits = (static_cast<uint32_t>(rng() & 1) << 31) | (exp_dist(rng) << 23) |
                          static_cast<uint32_t>(rng() & 0x7FFFFF);
    CheckAllModes(std::bit_cast<float>(bits), log);
  }
  // Every rounding boundary of both formats (midpoints between neighbouring codes, the
  // overflow thresholds) and the 4 floats on either side of each.
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int c = 0; c < 0x7F; ++c) {
      const double lo = CudaDecode(static_cast<uint8_t>(c), fmt);
      // Past the largest finite value, the "next code" is the one the format would have next.
      const double hi = fmt == Fp8Format::kE4M3 && c == 0x7E   ? 480.0
                        : fmt == Fp8Format::kE5M2 && c == 0x7B ? 65536.0
                                                               : CudaDecode(static_cast<uint8_t>(c + 1), fmt);
      if (!std::isfinite(hi)) continue;
      const float mid = static_cast<float>((lo + hi) / 2);
      for (float sign : {1.0f, -1.0f}) {
        const uint32_t mb = std::bit_cast<uint32_t>(sign * mid);
        for (int d = -4; d <= 4; ++d) CheckAllModes(std::bit_cast<float>(mb + d), log);
      }
    }
  }
  for (float x : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::signaling_NaN(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::lowest(), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), 448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 65504.0f}) {
    CheckAllModes(x, log);
  }
  EXPECT_EQ(log.count(), 0);
}

TEST(Fp8VsCuda, Every256ByteDecodesLikeCuda) {
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int b = 0; b < 256; ++b) {
      const float ours = Fp8ToFloat(static_cast<uint8_t>(b), fmt);
      const float cuda = CudaDecode(static_cast<uint8_t>(b), fmt);
      EXPECT_EQ(std::bit_cast<uint32_t>(ours), std::bit_cast<uint32_t>(cuda))
          << Fp8FormatName(fmt) << " byte 0x" << std::hex << b;
      EXPECT_EQ(std::bit_cast<uint32_t>(Fp8DecodeTable(fmt)[b]), std::bit_cast<uint32_t>(cuda));
    }
  }
  // The C++ wrapper classes agree too (they are what CUDA code usually calls).
  for (int b = 0; b < 256; ++b) {
    __nv_fp8_e4m3 e4;
    e4.__x = static_cast<__nv_fp8_storage_t>(b);
    __nv_fp8_e5m2 e5;
    e5.__x = static_cast<__nv_fp8_storage_t>(b);
    EXPECT_EQ(std::bit_cast<uint32_t>(static_cast<float>(e4)), std::bit_cast<uint32_t>(Fp8ToFloat(b, Fp8Format::kE4M3)));
    EXPECT_EQ(std::bit_cast<uint32_t>(static_cast<float>(e5)), std::bit_cast<uint32_t>(Fp8ToFloat(b, Fp8Format::kE5M2)));
  }
}

TEST(Fp8VsCuda, HalfAndBf16ConversionsMatchCuda) {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    __half_raw hr;
    hr.x = static_cast<unsigned short>(h);
    __nv_bfloat16_raw br;
    br.x = static_cast<unsigned short>(h);
    mismatches += std::bit_cast<uint32_t>(HalfToFloat(h)) != std::bit_cast<uint32_t>(__half2float(__half(hr)));
    mismatches += std::bit_cast<uint32_t>(Bf16ToFloat(h)) != std::bit_cast<uint32_t>(__bfloat162float(__nv_bfloat16(br)));
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    mismatches += FloatToHalf(x) != static_cast<__half_raw>(__float2half(x)).x;
    mismatches += FloatToBf16(x) != static_cast<__nv_bfloat16_raw>(__float2bfloat16(x)).x;
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace fp8::kernels
