// SPDX-License-Identifier: Apache-2.0
// The quantize and dequantize kernels' spans run in an AVX2 build or the baseline build of the same code,
// whichever the loader picks for this CPU (kernels/cpu/quantize.cc). Whichever it is must give
// FloatToFp8's bytes: QuantizeTensor (the per-tensor cast with a given scale, the same cast
// Quantize1x128 / Quantize128x128 use) on every bf16 and fp16 pattern and a dense float32
// sample, both formats, several scales. scripts/gpu/calibrate_cuda.sh also runs this suite on
// an AVX2 host. Dequantization: every code, both formats, the same scales, against the table.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/fp8_format.h"
#include "kernels/quantize.h"

namespace fp8::kernels {
namespace {

std::vector<float> EveryBf16AndFp16Pattern() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 65536; ++h) {
    v.push_back(std::bit_cast<float>(h << 16));
    v.push_back(HalfToFloat(static_cast<uint16_t>(h)));
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 200'000; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  return v;
}

// 1, powers of two (ue8m0), typical weight scales, and ones that push values into the FP8
// subnormal range or past the clip.
const float kScales[] = {1.0f, 0.0078125f, 3.7e-5f, 0.02f / 448.0f * 3.1f, 2.5f, 1e-30f, 7.0e3f};

TEST(QuantizeIsa, CastEqualsFloatToFp8OnEveryPattern) {
  const std::vector<float> x = EveryBf16AndFp16Pattern();
  std::vector<uint8_t> q(x.size());
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (float s : kScales) {
      QuantizeTensor(x.data(), static_cast<int64_t>(x.size()), s, fmt, q.data());
      int64_t mismatches = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const uint8_t want = FloatToFp8(x[i] / s, fmt, Saturation::kSatFinite);
        if (q[i] != want && ++mismatches <= 5)
          ADD_FAILURE() << Fp8FormatName(fmt) << " x bits 0x" << std::hex << std::bit_cast<uint32_t>(x[i])
                        << " s = " << s << ": got 0x" << int(q[i]) << ", want 0x" << int(want) << std::dec;
      }
      EXPECT_EQ(mismatches, 0) << Fp8FormatName(fmt) << " s = " << s;
    }
  }
}

TEST(QuantizeIsa, DequantizeEqualsTheDecodeTableForEveryCode) {
  std::vector<uint8_t> q;
  for (int rep = 0; rep < 5; ++rep)  // several vectors' worth, so the vector loop body runs
    for (int c = 0; c < 256; ++c) q.push_back(static_cast<uint8_t>(c));
  std::vector<float> x(q.size());
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (float s : kScales) {
      DequantizeTensor(q.data(), static_cast<int64_t>(q.size()), s, fmt, x.data());
      for (size_t i = 0; i < q.size(); ++i) {
        const float want = Fp8ToFloat(q[i], fmt) * s;
        ASSERT_EQ(std::bit_cast<uint32_t>(x[i]), std::bit_cast<uint32_t>(want))
            << Fp8FormatName(fmt) << " code 0x" << std::hex << int(q[i]) << std::dec << " s = " << s;
      }
    }
  }
}

}  // namespace
}  // namespace fp8::kernels
