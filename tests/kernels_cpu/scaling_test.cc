// SPDX-License-Identifier: Apache-2.0
#include "kernels/scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace fp8::kernels {
namespace {

TEST(ScaleInvFromAmax, Fp32IsAmaxOverMax) {
  EXPECT_EQ(ScaleInvFromAmax(448.0f, Fp8Format::kE4M3, ScaleFormat::kFp32), 1.0f);
  EXPECT_EQ(ScaleInvFromAmax(57344.0f, Fp8Format::kE5M2, ScaleFormat::kFp32), 1.0f);
  EXPECT_EQ(ScaleInvFromAmax(3.0f, Fp8Format::kE4M3, ScaleFormat::kFp32), 3.0f / 448.0f);
  // The floor keeps all-zero tiles finite and non-zero.
  EXPECT_EQ(ScaleInvFromAmax(0.0f, Fp8Format::kE4M3, ScaleFormat::kFp32), kAmaxFloor / 448.0f);
  EXPECT_EQ(ScaleInvFromAmax(1e-9f, Fp8Format::kE5M2, ScaleFormat::kFp32), kAmaxFloor / 57344.0f);
}

TEST(ScaleInvFromAmax, Ue8m0RoundsUpToAPowerOfTwo) {
  EXPECT_EQ(ScaleInvFromAmax(448.0f, Fp8Format::kE4M3, ScaleFormat::kUe8m0), 1.0f);  // exact stays
  EXPECT_EQ(ScaleInvFromAmax(449.0f, Fp8Format::kE4M3, ScaleFormat::kUe8m0), 2.0f);
  EXPECT_EQ(ScaleInvFromAmax(300.0f, Fp8Format::kE4M3, ScaleFormat::kUe8m0), 1.0f);
  EXPECT_EQ(ScaleInvFromAmax(224.0f, Fp8Format::kE4M3, ScaleFormat::kUe8m0), 0.5f);
  EXPECT_EQ(ScaleInvFromAmax(0.0f, Fp8Format::kE4M3, ScaleFormat::kUe8m0), std::ldexp(1.0f, -22));  // 1e-4/448 ≈ 2^-22.1
  for (float amax = 1e-3f; amax < 1e6f; amax *= 1.37f) {
    const float s = ScaleInvFromAmax(amax, Fp8Format::kE5M2, ScaleFormat::kUe8m0);
    int e = 0;
    ASSERT_EQ(std::frexp(s, &e), 0.5f);
    ASSERT_GE(s, amax / 57344.0f);
    ASSERT_LT(s / 2, amax / 57344.0f);
  }
}

TEST(ScaleInvFromAmax, NonFiniteAmaxPropagates) {
  EXPECT_TRUE(std::isnan(ScaleInvFromAmax(std::numeric_limits<float>::quiet_NaN(), Fp8Format::kE4M3, ScaleFormat::kFp32)));
  EXPECT_TRUE(std::isinf(ScaleInvFromAmax(std::numeric_limits<float>::infinity(), Fp8Format::kE4M3, ScaleFormat::kUe8m0)));
}

TEST(DelayedScaling, StartsAtOneAndUsesTheHistoryMax) {
  DelayedScaling ds({.history_len = 3, .margin = 0, .algo = AmaxAlgo::kMax, .fmt = Fp8Format::kE4M3});
  EXPECT_EQ(ds.scale_inv(), 1.0f);
  ds.Update(896.0f);
  EXPECT_EQ(ds.scale_inv(), 2.0f);
  ds.Update(44.8f);  // the max of the window still rules
  EXPECT_EQ(ds.scale_inv(), 2.0f);
  ds.Update(4.48f);
  EXPECT_EQ(ds.scale_inv(), 2.0f);
  ds.Update(4.48f);  // 896 falls out of the 3-entry window
  EXPECT_EQ(ds.scale_inv(), 44.8f / 448.0f);
  EXPECT_EQ(ds.history(), (std::vector<float>{44.8f, 4.48f, 4.48f}));
}

TEST(DelayedScaling, MostRecentAndMargin) {
  DelayedScaling ds({.history_len = 4, .margin = 2, .algo = AmaxAlgo::kMostRecent, .fmt = Fp8Format::kE5M2});
  ds.Update(57344.0f);
  EXPECT_EQ(ds.scale_inv(), 4.0f);  // 2^margin headroom
  ds.Update(-5734.4f);              // sign does not matter
  EXPECT_FLOAT_EQ(ds.scale_inv(), 0.4f);
}

TEST(DelayedScaling, Ue8m0ScalesArePowersOfTwo) {
  DelayedScaling ds({.history_len = 2, .margin = 0, .algo = AmaxAlgo::kMax, .fmt = Fp8Format::kE4M3,
                     .scale_format = ScaleFormat::kUe8m0});
  ds.Update(500.0f);
  EXPECT_EQ(ds.scale_inv(), 2.0f);
}

TEST(DelayedScaling, ZeroAndNonFiniteAmaxKeepTheScale) {
  DelayedScaling ds({.history_len = 2});
  ds.Update(0.0f);
  EXPECT_EQ(ds.scale_inv(), 1.0f);  // no information yet
  ds.Update(448.0f * 8);
  EXPECT_EQ(ds.scale_inv(), 8.0f);
  ds.Update(std::numeric_limits<float>::infinity());
  ds.Update(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(ds.scale_inv(), 8.0f);
  EXPECT_EQ(ds.history(), (std::vector<float>{0.0f, 448.0f * 8}));
}

TEST(DelayedScaling, RestoreContinuesFromACheckpoint) {
  DelayedScalingConfig cfg{.history_len = 3};
  DelayedScaling a(cfg), b(cfg);
  for (float v : {10.0f, 20.0f, 5.0f}) a.Update(v);
  b.Restore(a.history(), a.scale_inv());
  EXPECT_EQ(b.scale_inv(), a.scale_inv());
  a.Update(1.0f);
  b.Update(1.0f);
  EXPECT_EQ(b.scale_inv(), a.scale_inv());
  EXPECT_EQ(b.history(), a.history());
  // A longer saved history (a config change) keeps its newest entries.
  b.Restore({1, 2, 3, 4, 5}, 0.5f);
  EXPECT_EQ(b.history(), (std::vector<float>{3, 4, 5}));
}

}  // namespace
}  // namespace fp8::kernels
