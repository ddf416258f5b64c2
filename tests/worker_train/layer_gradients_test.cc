// SPDX-License-Identifier: Apache-2.0
// Every layer's backward against central finite differences in double precision, and the float
// instantiation (the one the trainer runs) against the double one.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "worker/train/layers.h"

namespace fp8::train {
namespace {

using Vec = std::vector<double>;

Vec Random(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (double& x : v) x = d(gen);
  return v;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic d(loss)/d(param) against (loss(p+h) - loss(p-h)) / 2h for every element of
// `param` (at most `max_checks`, strided).
void ExpectGradMatches(const char* what, Vec& param, const Vec& analytic, const std::function<double()>& loss,
                       double tol = 1e-6, size_t max_checks = 400) {
  ASSERT_EQ(param.size(), analytic.size()) << what;
  const double h = 1e-5;
  const size_t stride = std::max<size_t>(1, param.size() / max_checks);
  double max_err = 0;
  for (size_t i = 0; i < param.size(); i += stride) {
    const double orig = param[i];
    param[i] = orig + h;
    const double lp = loss();
    param[i] = orig - h;
    const double lm = loss();
    param[i] = orig;
    const double fd = (lp - lm) / (2 * h);
    const double err = std::abs(fd - analytic[i]) / std::max(1.0, std::abs(fd));
    max_err = std::max(max_err, err);
    EXPECT_LT(err, tol) << what << "[" << i << "]: analytic " << analytic[i] << " vs finite difference " << fd;
    if (err >= tol) return;  // one report is enough
  }
  ::testing::Test::RecordProperty(std::string(what) + "_max_rel_err", std::to_string(max_err));
}

template <typename To>
std::vector<To> Cast(const Vec& v) {
  return std::vector<To>(v.begin(), v.end());
}

void ExpectClose(const std::vector<float>& f, const Vec& d, double tol, const char* what) {
  ASSERT_EQ(f.size(), d.size());
  for (size_t i = 0; i < f.size(); ++i)
    ASSERT_NEAR(f[i], d[i], tol * std::max(1.0, std::abs(d[i]))) << what << "[" << i << "]";
}

TEST(LayerGradients, Linear) {
  const int64_t m = 6, k = 5, n = 7;
  Vec x = Random(m * k, 1), w = Random(n * k, 2), b = Random(n, 3), r = Random(m * n, 4);
  Vec y(m * n);
  auto loss = [&] {
    LinearForward<double>(x.data(), w.data(), b.data(), m, k, n, y.data());
    return Dot(y, r);
  };
  Vec dx(m * k), dw(n * k, 0.0), db(n, 0.0);
  LinearBackward<double>(r.data(), w.data(), r.data(), x.data(), r.data(), m, k, n, dx.data(), dw.data(), db.data());
  ExpectGradMatches("linear.x", x, dx, loss);
  ExpectGradMatches("linear.w", w, dw, loss);
  ExpectGradMatches("linear.b", b, db, loss);

  // The float path (kernels::Sgemm) computes the same function.
  std::vector<float> yf(m * n);
  LinearForward<float>(Cast<float>(x).data(), Cast<float>(w).data(), Cast<float>(b).data(), m, k, n, yf.data());
  loss();
  ExpectClose(yf, y, 1e-5, "linear float y");
  std::vector<float> dxf(m * k), dwf(n * k, 0.0f), dbf(n, 0.0f);
  auto rf = Cast<float>(r), wf = Cast<float>(w), xf = Cast<float>(x);
  LinearBackward<float>(rf.data(), wf.data(), rf.data(), xf.data(), rf.data(), m, k, n, dxf.data(), dwf.data(), dbf.data());
  ExpectClose(dxf, dx, 1e-5, "linear float dx");
  ExpectClose(dwf, dw, 1e-5, "linear float dw");
}

TEST(LayerGradients, LayerNorm) {
  const int64_t n = 5, c = 12;
  Vec x = Random(n * c, 5, 2.0), w = Random(c, 6), b = Random(c, 7), r = Random(n * c, 8);
  Vec out(n * c), mean(n), rstd(n);
  auto loss = [&] {
    LayerNormForward<double>(x.data(), w.data(), b.data(), n, c, out.data(), mean.data(), rstd.data());
    return Dot(out, r);
  };
  loss();
  Vec dx(n * c, 0.0), dw(c, 0.0), db(c, 0.0);
  LayerNormBackward<double>(r.data(), x.data(), w.data(), mean.data(), rstd.data(), n, c, dx.data(), dw.data(), db.data());
  ExpectGradMatches("layernorm.x", x, dx, loss);
  ExpectGradMatches("layernorm.w", w, dw, loss);
  ExpectGradMatches("layernorm.b", b, db, loss);

  std::vector<float> of(n * c), mf(n), rf(n);
  LayerNormForward<float>(Cast<float>(x).data(), Cast<float>(w).data(), Cast<float>(b).data(), n, c, of.data(), mf.data(), rf.data());
  loss();
  ExpectClose(of, out, 1e-5, "layernorm float out");
}

TEST(LayerGradients, Gelu) {
  const int64_t n = 64;
  Vec x = Random(n, 9, 2.5), r = Random(n, 10), y(n);
  auto loss = [&] {
    GeluForward<double>(x.data(), n, y.data());
    return Dot(y, r);
  };
  Vec dx(n);
  GeluBackward<double>(r.data(), x.data(), n, dx.data());
  ExpectGradMatches("gelu.x", x, dx, loss);

  std::vector<float> yf(n), dxf(n);
  GeluForward<float>(Cast<float>(x).data(), n, yf.data());
  GeluBackward<float>(Cast<float>(r).data(), Cast<float>(x).data(), n, dxf.data());
  loss();
  ExpectClose(yf, y, 2e-6, "gelu float y");
  ExpectClose(dxf, dx, 2e-6, "gelu float dx");
}

TEST(LayerGradients, CausalAttention) {
  const int64_t b = 2, t = 5, h = 2, c = 8;
  Vec qkv = Random(b * t * 3 * c, 11), r = Random(b * t * c, 12);
  Vec out(b * t * c), att(b * h * t * t);
  auto loss = [&] {
    AttentionForward<double>(qkv.data(), b, t, c, h, out.data(), att.data());
    return Dot(out, r);
  };
  loss();
  Vec dqkv(qkv.size());
  AttentionBackward<double>(r.data(), qkv.data(), att.data(), b, t, c, h, dqkv.data());
  ExpectGradMatches("attention.qkv", qkv, dqkv, loss);

  // Causality: output at position 0 depends only on position 0.
  Vec before = out;
  qkv[(0 * t + t - 1) * 3 * c + c] += 1.0;  // a key at the last position of batch 0
  loss();
  for (int64_t d = 0; d < c; ++d) EXPECT_EQ(out[d], before[d]);

  std::vector<float> of(out.size()), af(att.size());
  AttentionForward<float>(Cast<float>(qkv).data(), b, t, c, h, of.data(), af.data());
  ExpectClose(of, out, 1e-5, "attention float out");
}

TEST(LayerGradients, Embedding) {
  const int64_t v = 7, t = 4, c = 3, n = 8;  // 2 sequences of 4
  std::vector<int32_t> tokens = {1, 3, 3, 6, 0, 1, 5, 3};
  Vec wte = Random(v * c, 13), wpe = Random(t * c, 14), r = Random(n * c, 15), out(n * c);
  auto loss = [&] {
    EmbeddingForward<double>(tokens.data(), wte.data(), wpe.data(), n, t, c, out.data());
    return Dot(out, r);
  };
  Vec dwte(v * c, 0.0), dwpe(t * c, 0.0);
  EmbeddingBackward<double>(r.data(), tokens.data(), n, t, c, dwte.data(), dwpe.data());
  ExpectGradMatches("embedding.wte", wte, dwte, loss);
  ExpectGradMatches("embedding.wpe", wpe, dwpe, loss);
}

TEST(LayerGradients, CrossEntropy) {
  const int64_t n = 6, v = 9;
  Vec logits = Random(n * v, 16, 3.0);
  std::vector<int32_t> targets = {0, 8, 3, 3, 5, 1};
  auto loss = [&] {
    Vec work = logits;
    return CrossEntropyForward<double>(work.data(), targets.data(), n, v);
  };
  Vec probs = logits;
  const double l = CrossEntropyForward<double>(probs.data(), targets.data(), n, v);
  EXPECT_GT(l, 0);
  Vec dlogits(n * v);
  CrossEntropyBackward<double>(probs.data(), targets.data(), n, v, 1.0 / n, dlogits.data());
  ExpectGradMatches("cross_entropy.logits", logits, dlogits, loss);

  std::vector<float> lf = Cast<float>(logits);
  EXPECT_NEAR(CrossEntropyForward<float>(lf.data(), targets.data(), n, v), l, 1e-5);
}

}  // namespace
}  // namespace fp8::train
