// SPDX-License-Identifier: Apache-2.0
#include "worker/train/moe_router.h"

#include <algorithm>
#include <cmath>

#include "common/status.h"
#include "kernels/parallel.h"

namespace fp8::train::moe {

using kernels::ParallelFor;

namespace {

// The k best of `key` [E] (ties: the lower index), best first.
void TopK(const float* key, int64_t experts, int k, int32_t* out) {
  for (int j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < experts; ++e) {
      if (std::find(out, out + j, e) != out + j) continue;
      if (best < 0 || key[e] > key[best]) best = e;
    }
    out[j] = best;
  }
}

}  // namespace

void Route(MoeRouter router, const float* logits, const float* bias, int64_t n, int64_t experts, int k,
           bool norm_topk_prob, Routing* r) {
  FP8_CHECK(k >= 1 && k <= experts);
  r->tokens = n;
  r->experts = experts;
  r->k = k;
  r->expert.resize(static_cast<size_t>(n * k));
  r->weight.resize(static_cast<size_t>(n * k));
  r->score.resize(static_cast<size_t>(n * experts));
  ParallelFor(n, 16, [&](int64_t t0, int64_t t1) {
    std::vector<float> key(static_cast<size_t>(experts));
    for (int64_t t = t0; t < t1; ++t) {
      const float* z = logits + t * experts;
      float* s = r->score.data() + t * experts;
      if (router == MoeRouter::kSoftmaxTopK) {
        const float mx = *std::max_element(z, z + experts);
        double sum = 0;
        for (int64_t e = 0; e < experts; ++e) sum += std::exp(static_cast<double>(z[e] - mx));
        for (int64_t e = 0; e < experts; ++e) s[e] = static_cast<float>(std::exp(static_cast<double>(z[e] - mx)) / sum);
        std::copy_n(s, experts, key.data());
      } else {
        for (int64_t e = 0; e < experts; ++e) {
          s[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(z[e]))));
          key[static_cast<size_t>(e)] = s[e] + (bias ? bias[e] : 0.0f);
        }
      }
      int32_t* chosen = r->expert.data() + t * k;
      float* w = r->weight.data() + t * k;
      TopK(key.data(), experts, k, chosen);
      double sum = 0;
      for (int j = 0; j < k; ++j) sum += s[chosen[j]];
      for (int j = 0; j < k; ++j) w[j] = norm_topk_prob ? static_cast<float>(s[chosen[j]] / sum) : s[chosen[j]];
    }
  });
}

void RouteBackward(MoeRouter router, const Routing& r, const float* dweight, bool norm_topk_prob, float* dlogits) {
  const int64_t experts = r.experts, k = r.k;
  ParallelFor(r.tokens, 16, [&](int64_t t0, int64_t t1) {
    std::vector<double> ds(static_cast<size_t>(experts));
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t* chosen = r.expert.data() + t * k;
      const float* s = r.score.data() + t * experts;
      const float* dw = dweight + t * k;
      std::fill(ds.begin(), ds.end(), 0.0);
      if (norm_topk_prob) {
        // w_j = s_j / S: ds_j = (dw_j − Σ_i dw_i·w_i) / S.
        double sum = 0, dot = 0;
        for (int64_t j = 0; j < k; ++j) sum += s[chosen[j]];
        for (int64_t j = 0; j < k; ++j) dot += static_cast<double>(dw[j]) * (s[chosen[j]] / sum);
        for (int64_t j = 0; j < k; ++j) ds[static_cast<size_t>(chosen[j])] = (dw[j] - dot) / sum;
      } else {
        for (int64_t j = 0; j < k; ++j) ds[static_cast<size_t>(chosen[j])] = dw[j];
      }
      float* dz = dlogits + t * experts;
      if (router == MoeRouter::kSoftmaxTopK) {
        double dot = 0;
        for (int64_t e = 0; e < experts; ++e) dot += ds[static_cast<size_t>(e)] * s[e];
        for (int64_t e = 0; e < experts; ++e) dz[e] = static_cast<float>(s[e] * (ds[static_cast<size_t>(e)] - dot));
      } else {
        for (int64_t e = 0; e < experts; ++e)
          dz[e] = static_cast<float>(ds[static_cast<size_t>(e)] * s[e] * (1.0 - s[e]));
      }
    }
  });
}

std::vector<int64_t> ExpertCounts(const Routing& r) {
  std::vector<int64_t> counts(static_cast<size_t>(r.experts), 0);
  for (int32_t e : r.expert) ++counts[static_cast<size_t>(e)];
  return counts;
}

namespace {
// P_e: the mean score of each expert over the tokens, summed in token order.
std::vector<double> MeanScores(const Routing& r) {
  std::vector<double> p(static_cast<size_t>(r.experts), 0.0);
  for (int64_t t = 0; t < r.tokens; ++t)
    for (int64_t e = 0; e < r.experts; ++e) p[static_cast<size_t>(e)] += r.score[static_cast<size_t>(t * r.experts + e)];
  for (double& v : p) v /= static_cast<double>(std::max<int64_t>(1, r.tokens));
  return p;
}
}  // namespace

double AuxLoss(const Routing& r, double coef) {
  if (coef == 0 || r.tokens == 0) return 0;
  const std::vector<int64_t> counts = ExpertCounts(r);
  const std::vector<double> p = MeanScores(r);
  double sum = 0;
  for (int64_t e = 0; e < r.experts; ++e)
    sum += static_cast<double>(counts[static_cast<size_t>(e)]) / static_cast<double>(r.tokens) * p[static_cast<size_t>(e)];
  return coef * static_cast<double>(r.experts) * sum;
}

void AuxLossBackward(const Routing& r, double coef, float scale, float* dlogits) {
  if (coef == 0 || r.tokens == 0) return;
  const int64_t experts = r.experts;
  const std::vector<int64_t> counts = ExpertCounts(r);
  // d/dp_te = coef · E · f_e / n; then through each token's softmax.
  std::vector<double> g(static_cast<size_t>(experts));
  const double n = static_cast<double>(r.tokens);
  for (int64_t e = 0; e < experts; ++e)
    g[static_cast<size_t>(e)] = scale * coef * static_cast<double>(experts) * (static_cast<double>(counts[static_cast<size_t>(e)]) / n) / n;
  ParallelFor(r.tokens, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* s = r.score.data() + t * experts;
      double dot = 0;
      for (int64_t e = 0; e < experts; ++e) dot += g[static_cast<size_t>(e)] * s[e];
      float* dz = dlogits + t * experts;
      for (int64_t e = 0; e < experts; ++e) dz[e] += static_cast<float>(s[e] * (g[static_cast<size_t>(e)] - dot));
    }
  });
}

void UpdateRouterBias(const float* load, int64_t experts, double rate, float* bias) {
  double mean = 0;
  for (int64_t e = 0; e < experts; ++e) mean += load[e];
  mean /= static_cast<double>(experts);
  for (int64_t e = 0; e < experts; ++e) {
    const double d = mean - load[e];
    bias[e] += static_cast<float>(rate * ((d > 0) - (d < 0)));
  }
}

LoadBalance Balance(const float* load, int64_t experts) {
  double mean = 0, lo = INFINITY, hi = 0;
  for (int64_t e = 0; e < experts; ++e) {
    mean += load[e];
    lo = std::min<double>(lo, load[e]);
    hi = std::max<double>(hi, load[e]);
  }
  mean /= static_cast<double>(experts);
  if (!(mean > 0)) return {};
  double var = 0;
  for (int64_t e = 0; e < experts; ++e) var += (load[e] - mean) * (load[e] - mean);
  var /= static_cast<double>(experts);
  return {lo / mean, hi / mean, std::sqrt(var) / mean};
}

}  // namespace fp8::train::moe
