// SPDX-License-Identifier: Apache-2.0
// The optimizer steps that also write the next forward's weight operands (adamw_cast.h,
// AdamWStepTensor with a BF16 copy) against the plain AdamW step followed by the separate cast
// the forward would run: bit for bit, on fresh random weights, gradients and moments, with tail
// blocks, both scale formats and both decay settings. And the mask's skip marker: AdamWStep
// leaves those parameters alone.
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/fp8_format.h"
#include "tests/worker_train_cuda/cuda_test_util.h"
#include "worker/train/cuda/adamw_cast.h"

namespace fp8::train::cuda {
namespace {

using kernels::Fp8Format;
using kernels::ScaleFormat;
namespace kc = kernels::cuda;

template <typename T>
bool BitwiseEqual(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

AdamWArgs Args(int step, float clip) {
  return {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f - std::pow(0.9f, static_cast<float>(step)),
          1.0f - std::pow(0.95f, static_cast<float>(step)), clip};
}

// Moments as after a few steps: m signed, v positive.
struct AdamState {
  std::vector<float> w, g, m, v;
  AdamState(size_t n, uint32_t seed) : w(Random(n, seed, 0.05f)), g(Random(n, seed + 1, 0.01f)), m(Random(n, seed + 2, 1e-3f)), v(Random(n, seed + 3, 1e-3f)) {
    for (float& x : v) x = x * x;
  }
};

struct CastCase {
  int64_t rows, cols;
  ScaleFormat sf;
  bool decay;
};

class AdamWCast128x128 : public ::testing::TestWithParam<CastCase> {};

TEST_P(AdamWCast128x128, MatchesAdamWThenCastBitwise) {
  SKIP_WITHOUT_GPU();
  const CastCase c = GetParam();
  const size_t n = static_cast<size_t>(c.rows * c.cols);
  const int64_t ld = kc::Sm90BlockScaleLd(c.cols), ld_t = kc::Sm90BlockScaleLd(c.rows);
  const size_t ns = static_cast<size_t>((c.rows + 127) / 128 * ld), ns_t = static_cast<size_t>((c.cols + 127) / 128 * ld_t);
  const AdamState st(n, 17);
  const AdamWArgs a = Args(3, 0.7f);
  // Outputs start from the same poison in both paths: padding must match too.
  const std::vector<uint8_t> q0(n, 0xA5);
  const std::vector<float> s0(std::max(ns, ns_t), -3.0f);

  Dev<float> w1(st.w), g1(st.g), m1(st.m), v1(st.v), s1(std::vector<float>(s0.begin(), s0.begin() + ns)),
      st1(std::vector<float>(s0.begin(), s0.begin() + ns_t));
  Dev<uint8_t> q1(q0), qt1(q0);
  ASSERT_OK(AdamWStepTensor(w1.get(), g1.get(), m1.get(), v1.get(), static_cast<int64_t>(n), c.decay, a, nullptr, nullptr));
  ASSERT_OK(kc::Sm90Fp8Quantize128x128WithTranspose(w1.get(), c.rows, c.cols, Fp8Format::kE4M3, c.sf, q1.get(), s1.get(), ld, qt1.get(),
                                                    st1.get(), ld_t, nullptr));

  Dev<float> w2(st.w), g2(st.g), m2(st.m), v2(st.v), s2(std::vector<float>(s0.begin(), s0.begin() + ns)),
      st2(std::vector<float>(s0.begin(), s0.begin() + ns_t));
  Dev<uint8_t> q2(q0), qt2(q0);
  ASSERT_OK(AdamWStepCast128x128(w2.get(), g2.get(), m2.get(), v2.get(), c.rows, c.cols, c.decay, a, Fp8Format::kE4M3, c.sf, q2.get(),
                                 s2.get(), ld, qt2.get(), st2.get(), ld_t, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  EXPECT_FALSE(BitwiseEqual(w1.Host(), st.w)) << "the step did not move W";
  EXPECT_TRUE(BitwiseEqual(w1.Host(), w2.Host())) << "W";
  EXPECT_TRUE(BitwiseEqual(m1.Host(), m2.Host())) << "m";
  EXPECT_TRUE(BitwiseEqual(v1.Host(), v2.Host())) << "v";
  EXPECT_TRUE(BitwiseEqual(q1.Host(), q2.Host())) << "W cast";
  EXPECT_TRUE(BitwiseEqual(qt1.Host(), qt2.Host())) << "Wᵀ cast";
  EXPECT_TRUE(BitwiseEqual(s1.Host(), s2.Host())) << "W scales";
  EXPECT_TRUE(BitwiseEqual(st1.Host(), st2.Host())) << "Wᵀ scales";
}

INSTANTIATE_TEST_SUITE_P(Shapes, AdamWCast128x128,
                         ::testing::Values(CastCase{384, 256, ScaleFormat::kFp32, true},
                                           CastCase{400, 272, ScaleFormat::kFp32, false},  // tail blocks both ways
                                           CastCase{272, 400, ScaleFormat::kUe8m0, true}));

TEST(AdamWCast128x128Args, RefusesShapesTheCastRefuses) {
  SKIP_WITHOUT_GPU();
  Dev<float> f(16 * 24), s(64);
  Dev<uint8_t> q(16 * 24);
  const AdamWArgs a = Args(1, 1.0f);
  // rows not a multiple of 16 (Wᵀ's 16-byte rows)
  const Status st = AdamWStepCast128x128(f.get(), f.get(), f.get(), f.get(), 8, 48, true, a, Fp8Format::kE4M3, ScaleFormat::kFp32,
                                         q.get(), s.get(), 4, q.get(), s.get(), 4, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rows"), std::string::npos) << st.message();
}

// AdamWStepTensor's BF16 copy is AdamWStep + CastF32ToBf16 of the result, and AdamWStep skips
// the parameters marked kAdamWSkip (another step owns them) while stepping the rest.
TEST(AdamWBf16Copy, MatchesAdamWThenCastAndSkipsMarked) {
  SKIP_WITHOUT_GPU();
  for (const int64_t n : {int64_t{4096}, int64_t{1001}}) {  // vectorized and scalar kernels
    const AdamState st(static_cast<size_t>(n), 29);
    const AdamWArgs a = Args(2, 1.0f);
    std::vector<uint8_t> mask(static_cast<size_t>(n), kAdamWDecay);
    Dev<float> w1(st.w), g1(st.g), m1(st.m), v1(st.v);
    Dev<uint8_t> d1(mask);
    Dev<bf16> c1(static_cast<size_t>(n));
    ASSERT_OK(AdamWStep(w1.get(), g1.get(), m1.get(), v1.get(), d1.get(), n, a, nullptr));
    ASSERT_OK(CastF32ToBf16(w1.get(), n, c1.get(), nullptr));
    Dev<float> w2(st.w), g2(st.g), m2(st.m), v2(st.v);
    Dev<bf16> c2(static_cast<size_t>(n));
    ASSERT_OK(AdamWStepTensor(w2.get(), g2.get(), m2.get(), v2.get(), n, true, a, c2.get(), nullptr));
    EXPECT_TRUE(BitwiseEqual(w1.Host(), w2.Host())) << n;
    EXPECT_TRUE(BitwiseEqual(m1.Host(), m2.Host())) << n;
    EXPECT_TRUE(BitwiseEqual(v1.Host(), v2.Host())) << n;
    EXPECT_TRUE(BitwiseEqual(c1.Host(), c2.Host())) << n;

    // Skip a range that starts and ends inside 4-parameter vectors.
    for (int64_t i = 5; i < n - 7; ++i) mask[static_cast<size_t>(i)] = kAdamWSkip;
    Dev<float> w3(st.w), g3(st.g), m3(st.m), v3(st.v);
    Dev<uint8_t> d3(mask);
    ASSERT_OK(AdamWStep(w3.get(), g3.get(), m3.get(), v3.get(), d3.get(), n, a, nullptr));
    const std::vector<float> w3h = w3.Host(), w1h = w1.Host(), m3h = m3.Host(), m1h = m1.Host();
    for (int64_t i = 0; i < n; ++i) {
      const bool skipped = mask[static_cast<size_t>(i)] == kAdamWSkip;
      const float want_w = skipped ? st.w[static_cast<size_t>(i)] : w1h[static_cast<size_t>(i)];
      const float want_m = skipped ? st.m[static_cast<size_t>(i)] : m1h[static_cast<size_t>(i)];
      ASSERT_EQ(w3h[static_cast<size_t>(i)], want_w) << "n " << n << " i " << i;
      ASSERT_EQ(m3h[static_cast<size_t>(i)], want_m) << "n " << n << " i " << i;
    }
  }
}

}  // namespace
}  // namespace fp8::train::cuda
