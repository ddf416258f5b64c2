// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "kernels/parallel.h"
#include "kernels/quantize.h"
#include "kernels/stats.h"
#include "tests/kernels_cpu/test_util.h"

namespace fp8::kernels {
namespace {

TEST(QuantStats, KnownValues) {
  const std::vector<float> x = {3.0f, -4.0f, 1e-9f, 0.0f};
  const std::vector<float> xh = {3.0f, -4.0f, 0.0f, 0.0f};  // 1e-9 flushed
  const std::vector<float> s = {0.25f, 2.0f, 1.0f};
  const QuantStats st = ComputeQuantStats(x.data(), xh.data(), 4, 1, s.data(), 3);
  EXPECT_EQ(st.amax, 4.0);
  EXPECT_DOUBLE_EQ(st.frac_saturated, 0.25);
  EXPECT_DOUBLE_EQ(st.frac_flushed, 1.0 / 3.0);
  EXPECT_NEAR(st.rel_error, 1e-9 / 5.0, 1e-15);
  EXPECT_NEAR(st.snr_db, 10 * std::log10(25.0 / 1e-18), 1e-6);
  EXPECT_EQ(st.scale_inv_min, 0.25);
  EXPECT_EQ(st.scale_inv_max, 2.0);
}

TEST(QuantStats, ExactRoundTripAndAllZero) {
  const std::vector<float> x = {1.0f, 2.0f}, zeros = {0.0f, 0.0f};
  EXPECT_TRUE(std::isinf(ComputeQuantStats(x.data(), x.data(), 2, 0, nullptr, 0).snr_db));
  const QuantStats z = ComputeQuantStats(zeros.data(), zeros.data(), 2, 0, nullptr, 0);
  EXPECT_EQ(z.rel_error, 0.0);
  EXPECT_EQ(z.frac_flushed, 0.0);
}

TEST(QuantStats, RoundTripOfRealQuantization) {
  const int64_t rows = 64, cols = 256;
  auto x = testing::RandomMatrix(rows, cols, 3);
  std::vector<float> y(x.size()), s(rows * 2);
  ASSERT_TRUE(FakeQuantize(x.data(), rows, cols, Granularity::k1x128, Fp8Format::kE4M3, ScaleFormat::kFp32, 0, y.data(),
                           s.data()).ok());
  EXPECT_EQ(CountSaturated(x.data(), rows, cols, Granularity::k1x128, Fp8Format::kE4M3, s.data()), 0);
  const QuantStats st = ComputeQuantStats(x.data(), y.data(), rows * cols, 0, s.data(), rows * 2);
  // E4M3 keeps 3 mantissa bits: relative error ≤ 2^-4 per element, ~30 dB SNR in practice.
  EXPECT_LT(st.rel_error, 0.0625);
  EXPECT_GT(st.snr_db, 25.0);
  EXPECT_GT(st.scale_inv_max, st.scale_inv_min);
  // A per-tensor scale that is too small saturates exactly the elements that round past 448
  // (464 is the tie that still rounds down to 448).
  const float tensor_s = 0.001f;
  int64_t expected = 0;
  for (float v : x) expected += std::fabs(v / tensor_s) > 464.0f;
  EXPECT_GT(expected, 0);
  EXPECT_EQ(CountSaturated(x.data(), rows, cols, Granularity::kTensor, Fp8Format::kE4M3, &tensor_s), expected);
}

TEST(ParallelFor, CoversTheRangeExactlyOnce) {
  EXPECT_GE(NumThreads(), 1);
  for (int64_t n : {0, 1, 2, 7, 1000, 100003}) {
    for (int64_t min_chunk : {1, 3, 4096}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      ParallelFor(n, min_chunk, [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LT(b, e);
        ASSERT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ParallelFor, NestedAndConcurrentCallsComplete) {
  std::atomic<int64_t> total{0};
  ParallelFor(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      ParallelFor(100, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });  // runs inline
    }
  });
  EXPECT_EQ(total.load(), 800);
  std::atomic<int64_t> total2{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) ParallelFor(1000, 10, [&](int64_t b, int64_t e) { total2 += e - b; });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total2.load(), 4 * 50 * 1000);
}

}  // namespace
}  // namespace fp8::kernels
