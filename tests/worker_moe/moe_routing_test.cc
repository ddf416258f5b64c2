// SPDX-License-Identifier: Apache-2.0
// The MoE routers and the permute / combine as tables: which experts, which weights, which rows
// an expert keeps under a capacity, and the backwards against finite differences and adjoints.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "worker/train/moe_dispatch.h"
#include "worker/train/moe_router.h"

namespace fp8::train::moe {
namespace {

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

struct RouteCase {
  const char* name;
  MoeRouter router;
  bool norm;
  int k;
  std::vector<float> logits, bias;  // one token
  std::vector<int32_t> experts;
  std::vector<double> weights;
};

void PrintTo(const RouteCase& c, std::ostream* os) { *os << c.name; }

class RouteTable : public ::testing::TestWithParam<RouteCase> {};

TEST_P(RouteTable, ChoosesTheExpertsAndWeights) {
  const RouteCase& c = GetParam();
  Routing r;
  const int64_t e = static_cast<int64_t>(c.logits.size());
  Route(c.router, c.logits.data(), c.bias.empty() ? nullptr : c.bias.data(), 1, e, c.k, c.norm, &r);
  EXPECT_EQ(r.expert, c.experts);
  ASSERT_EQ(r.weight.size(), c.weights.size());
  for (size_t j = 0; j < c.weights.size(); ++j) EXPECT_NEAR(r.weight[j], c.weights[j], 1e-6) << j;
}

const double kZ = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0);
const double kP1 = std::exp(3.0) / kZ, kP2 = std::exp(2.0) / kZ;

INSTANTIATE_TEST_SUITE_P(
    Routers, RouteTable,
    ::testing::Values(
        RouteCase{"SoftmaxTop2", MoeRouter::kSoftmaxTopK, false, 2, {1, 3, 2, 0}, {}, {1, 2}, {kP1, kP2}},
        RouteCase{"SoftmaxTop2Renormalised", MoeRouter::kSoftmaxTopK, true, 2, {1, 3, 2, 0}, {}, {1, 2},
                  {kP1 / (kP1 + kP2), kP2 / (kP1 + kP2)}},
        RouteCase{"SoftmaxTop1Renormalised", MoeRouter::kSoftmaxTopK, true, 1, {1, 3, 2, 0}, {}, {1}, {1.0}},
        // Equal scores go to the lower expert id.
        RouteCase{"TiesToTheLowerId", MoeRouter::kSoftmaxTopK, false, 2, {0, 0, 0, 0}, {}, {0, 1}, {0.25, 0.25}},
        // The bias chooses expert 0 over 2 and 1, but the weight is its score alone.
        RouteCase{"SigmoidBiasChoosesNotWeighs", MoeRouter::kSigmoidBias, true, 2, {0, 1, 0.5, 2}, {10, 0, 0, 0},
                  {0, 3}, {0.5 / (0.5 + Sigmoid(2)), Sigmoid(2) / (0.5 + Sigmoid(2))}},
        RouteCase{"SigmoidNoBiasUnnormalised", MoeRouter::kSigmoidBias, false, 2, {0, 1, 0.5, 2}, {}, {3, 1},
                  {Sigmoid(2), Sigmoid(1)}},
        RouteCase{"SigmoidNegativeBiasAvoids", MoeRouter::kSigmoidBias, false, 1, {0, 1, 0.5, 2}, {0, 0, 0, -1},
                  {1}, {Sigmoid(1)}}),
    [](const auto& info) { return std::string(info.param.name); });

// Logits whose order is clear (gaps of at least 0.2), so small steps keep the choice.
std::vector<float> SpreadLogits(int64_t n, int64_t e) {
  std::vector<float> z(static_cast<size_t>(n * e));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < e; ++i) z[static_cast<size_t>(t * e + i)] = 0.2f * static_cast<float>((i * 2 + t) % e) - 0.4f;
  return z;
}

// L = Σ c_tj · w_tj for fixed c: RouteBackward's dlogits against central differences.
TEST(RouteBackward, MatchesFiniteDifferencesForBothRoutersWithAndWithoutRenormalising) {
  const int64_t n = 3, e = 5;
  const int k = 2;
  const std::vector<float> bias = {0.01f, -0.01f, 0.0f, 0.005f, 0.0f};
  for (MoeRouter router : {MoeRouter::kSoftmaxTopK, MoeRouter::kSigmoidBias}) {
    for (bool norm : {false, true}) {
      SCOPED_TRACE(std::string(MoeRouterName(router)) + (norm ? " norm" : " plain"));
      std::vector<float> z = SpreadLogits(n, e);
      std::vector<float> c(static_cast<size_t>(n * k));
      for (size_t i = 0; i < c.size(); ++i) c[i] = 0.3f + 0.7f * static_cast<float>(i % 3) - 0.5f * static_cast<float>(i % 2);
      auto loss = [&](const std::vector<float>& logits) {
        Routing r;
        Route(router, logits.data(), bias.data(), n, e, k, norm, &r);
        double l = 0;
        for (size_t i = 0; i < c.size(); ++i) l += static_cast<double>(c[i]) * r.weight[i];
        return l;
      };
      Routing r;
      Route(router, z.data(), bias.data(), n, e, k, norm, &r);
      std::vector<float> dz(static_cast<size_t>(n * e));
      RouteBackward(router, r, c.data(), norm, dz.data());
      for (size_t i = 0; i < z.size(); ++i) {
        const float eps = 1e-3f;
        std::vector<float> zp = z, zm = z;
        zp[i] += eps;
        zm[i] -= eps;
        const double fd = (loss(zp) - loss(zm)) / (2.0 * eps);
        EXPECT_NEAR(dz[i], fd, 2e-4) << "logit " << i;
      }
    }
  }
}

TEST(AuxLoss, IsCoefTimesExpertsTimesSumOfFractionTimesMeanProbability) {
  // Two tokens, two experts, top-1: p = (0.75, 0.25) and (0.5, 0.5), both choose expert 0
  // (the second by the tie rule): f = (1, 0), P = (0.625, 0.375) → 0.1 · 2 · 0.625.
  const std::vector<float> z = {std::log(3.0f), 0.0f, 0.0f, 0.0f};
  Routing r;
  Route(MoeRouter::kSoftmaxTopK, z.data(), nullptr, 2, 2, 1, false, &r);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 0}));
  EXPECT_NEAR(AuxLoss(r, 0.1), 0.1 * 2 * 0.625, 1e-7);
  EXPECT_EQ(AuxLoss(r, 0.0), 0.0);
  // Balanced routing with uniform probabilities gives coef · k, the loss's minimum.
  const std::vector<float> uniform(4 * 4, 0.0f);
  Route(MoeRouter::kSoftmaxTopK, uniform.data(), nullptr, 4, 4, 2, false, &r);
  r.expert = {0, 1, 2, 3, 0, 1, 2, 3};
  EXPECT_NEAR(AuxLoss(r, 1.0), 2.0, 1e-6);
}

TEST(AuxLoss, GradientMatchesFiniteDifferencesWithTheCountsHeld) {
  const int64_t n = 4, e = 3;
  const std::vector<float> z = SpreadLogits(n, e);
  Routing r;
  Route(MoeRouter::kSoftmaxTopK, z.data(), nullptr, n, e, 2, true, &r);
  std::vector<float> dz(static_cast<size_t>(n * e), 0.0f);
  AuxLossBackward(r, 0.3, 2.0f, dz.data());  // scale 2: twice the gradient
  for (size_t i = 0; i < z.size(); ++i) {
    const float eps = 1e-3f;
    std::vector<float> zp = z, zm = z;
    zp[i] += eps;
    zm[i] -= eps;
    Routing rp, rm;
    Route(MoeRouter::kSoftmaxTopK, zp.data(), nullptr, n, e, 2, true, &rp);
    Route(MoeRouter::kSoftmaxTopK, zm.data(), nullptr, n, e, 2, true, &rm);
    ASSERT_EQ(rp.expert, r.expert);
    ASSERT_EQ(rm.expert, r.expert);
    EXPECT_NEAR(dz[i], 2.0 * (AuxLoss(rp, 0.3) - AuxLoss(rm, 0.3)) / (2.0 * eps), 1e-4) << i;
  }
}

TEST(ExpertCapacity, IsTheCeilingOfFactorTimesAssignmentsPerExpert) {
  EXPECT_EQ(ExpertCapacity(0, 10, 2, 4), 0);  // dropless
  EXPECT_EQ(ExpertCapacity(1.0, 10, 2, 4), 5);
  EXPECT_EQ(ExpertCapacity(1.25, 10, 2, 4), 7);
  EXPECT_EQ(ExpertCapacity(0.01, 10, 2, 4), 1);  // never below one row
}

Routing FixedRouting(std::vector<int32_t> experts, int64_t e, int64_t k) {
  Routing r;
  r.k = k;
  r.experts = e;
  r.tokens = static_cast<int64_t>(experts.size()) / k;
  r.expert = std::move(experts);
  r.weight.assign(r.expert.size(), 0.5f);
  return r;
}

TEST(BuildDispatch, SortsByExpertInTokenOrderAndDropsPastCapacity) {
  // 4 tokens, top-2 of 3 experts.
  const Routing r = FixedRouting({0, 1, 0, 2, 0, 1, 1, 0}, 3, 2);
  const Dispatch all = BuildDispatch(r, 0);
  EXPECT_EQ(all.offsets, (std::vector<int64_t>{0, 4, 7, 8}));
  EXPECT_EQ(all.token, (std::vector<int32_t>{0, 1, 2, 3, 0, 2, 3, 1}));
  EXPECT_EQ(all.row, (std::vector<int64_t>{0, 4, 1, 7, 2, 5, 6, 3}));
  EXPECT_EQ(all.dropped, 0);
  // Capacity 2: expert 0 keeps tokens 0 and 1, expert 1 tokens 0 and 2; token 3 loses both.
  const Dispatch capped = BuildDispatch(r, 2);
  EXPECT_EQ(capped.offsets, (std::vector<int64_t>{0, 2, 4, 5}));
  EXPECT_EQ(capped.token, (std::vector<int32_t>{0, 1, 0, 2, 1}));
  EXPECT_EQ(capped.row, (std::vector<int64_t>{0, 2, 1, 4, -1, 3, -1, -1}));
  EXPECT_EQ(capped.dropped, 3);
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.7f * static_cast<float>(i) + 0.3f);
  return v;
}

TEST(PermuteAndCombine, ComputeTheWeightedSumAndTheirBackwardsAreTheirAdjoints) {
  const int64_t c = 3;
  Routing r = FixedRouting({0, 1, 0, 2, 0, 1, 1, 0}, 3, 2);
  r.weight = {0.7f, 0.3f, 0.6f, 0.4f, 0.9f, 0.1f, 0.5f, 0.5f};
  for (int64_t capacity : {0, 2}) {
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    const Dispatch d = BuildDispatch(r, capacity);
    const std::vector<float> x = Ramp(static_cast<size_t>(4 * c), 1.0f);
    std::vector<float> xp(static_cast<size_t>(d.rows() * c));
    PermuteRows(x.data(), d, c, xp.data());
    // Experts that return their input: the combine is Σ over kept choices of w · x.
    std::vector<float> y(x.size(), 0.0f);
    Combine(xp.data(), d, r.weight.data(), c, y.data());
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t i = 0; i < c; ++i) {
        double want = 0;
        for (int64_t j = 0; j < 2; ++j)
          if (d.row[static_cast<size_t>(t * 2 + j)] >= 0) want += r.weight[static_cast<size_t>(t * 2 + j)] * x[static_cast<size_t>(t * c + i)];
        EXPECT_NEAR(y[static_cast<size_t>(t * c + i)], want, 1e-6);
      }
    // <Permute(x), g> = <x, PermuteBackward(g)>
    const std::vector<float> g = Ramp(xp.size(), 0.5f);
    std::vector<float> dx(x.size(), 0.0f);
    PermuteRowsBackward(g.data(), d, c, false, dx.data());
    EXPECT_NEAR(Dot(xp, g), Dot(x, dx), 1e-5);
    // <Combine(out), dy> = <out, dout>, and dweight_tj = <dy_t, out_row>.
    const std::vector<float> out = Ramp(xp.size(), 2.0f), dy = Ramp(x.size(), 0.25f);
    std::vector<float> yc(x.size(), 0.0f), dout(out.size()), dw(r.weight.size());
    Combine(out.data(), d, r.weight.data(), c, yc.data());
    CombineBackward(dy.data(), out.data(), d, r.weight.data(), c, dout.data(), dw.data());
    EXPECT_NEAR(Dot(yc, dy), Dot(out, dout), 1e-5);
    for (int64_t tj = 0; tj < 8; ++tj) {
      const int64_t row = d.row[static_cast<size_t>(tj)];
      double want = 0;
      if (row >= 0)
        for (int64_t i = 0; i < c; ++i) want += dy[static_cast<size_t>(tj / 2 * c + i)] * out[static_cast<size_t>(row * c + i)];
      EXPECT_NEAR(dw[static_cast<size_t>(tj)], want, 1e-6) << tj;
    }
  }
}

TEST(UpdateRouterBias, MovesUnderloadedExpertsUpAndOverloadedDownByTheRate) {
  const std::vector<float> load = {4, 2, 3, 3};
  std::vector<float> bias = {0, 0, 0.5f, 0};
  UpdateRouterBias(load.data(), 4, 0.1, bias.data());
  EXPECT_FLOAT_EQ(bias[0], -0.1f);
  EXPECT_FLOAT_EQ(bias[1], 0.1f);
  EXPECT_FLOAT_EQ(bias[2], 0.5f);  // at the mean: unchanged
  EXPECT_FLOAT_EQ(bias[3], 0.0f);
}

TEST(Balance, IsMinMaxOverMeanAndTheCoefficientOfVariation) {
  const std::vector<float> even = {2, 2, 2, 2}, skewed = {0, 4}, none = {0, 0};
  LoadBalance b = Balance(even.data(), 4);
  EXPECT_EQ(b.min, 1.0);
  EXPECT_EQ(b.max, 1.0);
  EXPECT_EQ(b.cv, 0.0);
  b = Balance(skewed.data(), 2);
  EXPECT_EQ(b.min, 0.0);
  EXPECT_EQ(b.max, 2.0);
  EXPECT_DOUBLE_EQ(b.cv, 1.0);
  b = Balance(none.data(), 2);
  EXPECT_EQ(b.max, 0.0);
}

TEST(ExpertCounts, CountEveryChoice) {
  const Routing r = FixedRouting({0, 1, 0, 2, 0, 1, 1, 0}, 3, 2);
  EXPECT_EQ(ExpertCounts(r), (std::vector<int64_t>{4, 3, 1}));
}

}  // namespace
}  // namespace fp8::train::moe
