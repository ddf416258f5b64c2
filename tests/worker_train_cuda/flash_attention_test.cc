// SPDX-License-Identifier: Apache-2.0
// The fused causal attention (worker/train/cuda/sm90_flash_attention.h) against a float64 CPU
// reference on random BF16 inputs: output, logsumexp, dq, dk, dv, for head dims 32/64/128 and
// sequence lengths that are and are not multiples of the 32/64/128-row tiles, in the two layouts
// the trainer and a plain caller use, for both forwards (wgmma and mma.sync; the backward runs on
// the wgmma forward's lse) and both dQ and both dK/dV kernels of the two-kernel backward; the two
// forwards, and the two dK/dV kernels, against each other on larger random inputs; and the
// backward's bitwise repeatability (its dq adds are ordered across blocks), which the trainer's
// resume test relies on. Grouped-query attention (kv_heads < heads, q and k/v in separate
// layouts) against the CPU GqaAttentionForward/Backward. Skips without a GPU.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/worker_train_cuda/cuda_test_util.h"
#include "worker/train/cuda/sm90_flash_attention.h"
#include "worker/train/llama_layers.h"

namespace fp8::train::cuda {
namespace {

// Reference over per-head dense arrays [B·H][T][hd] (double).
struct Reference {
  std::vector<double> y, lse, dq, dk, dv;
};

Reference CausalAttention(const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>& v, const std::vector<double>& dy, int64_t bh,
                          int64_t t, int64_t hd) {
  Reference r;
  const size_t n = static_cast<size_t>(bh * t * hd);
  r.y.assign(n, 0), r.dq.assign(n, 0), r.dk.assign(n, 0), r.dv.assign(n, 0);
  r.lse.assign(static_cast<size_t>(bh * t), 0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> p(static_cast<size_t>(t)), dp(static_cast<size_t>(t));
  for (int64_t h = 0; h < bh; ++h) {
    const size_t base = static_cast<size_t>(h * t * hd);
    auto at = [&](const std::vector<double>& x, int64_t row, int64_t d) { return x[base + row * hd + d]; };
    for (int64_t i = 0; i < t; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t d = 0; d < hd; ++d) s += at(q, i, d) * at(k, j, d);
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
      r.lse[static_cast<size_t>(h * t + i)] = mx + std::log(sum);
      double delta = 0;
      for (int64_t j = 0; j <= i; ++j) {
        p[j] /= sum;
        dp[j] = 0;
        for (int64_t d = 0; d < hd; ++d) {
          r.y[base + i * hd + d] += p[j] * at(v, j, d);
          dp[j] += at(dy, i, d) * at(v, j, d);
        }
        delta += p[j] * dp[j];
      }
      for (int64_t j = 0; j <= i; ++j) {
        const double ds = p[j] * (dp[j] - delta) * scale;
        for (int64_t d = 0; d < hd; ++d) {
          r.dv[base + j * hd + d] += p[j] * at(dy, i, d);
          r.dq[base + i * hd + d] += ds * at(k, j, d);
          r.dk[base + j * hd + d] += ds * at(q, i, d);
        }
      }
    }
  }
  return r;
}

// ‖a − ref‖ / ‖ref‖, with ‖ref‖ floored at 0.01 per element: at T = 1 the softmax is exactly 1,
// so dq and dk are exactly 0 and only rounding (of y in BF16, inside delta) is left to compare.
double RelErrD(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 0.01 * 0.01 * static_cast<double>(ref.size())));
}

struct Case {
  int64_t head_dim, seq;
  bool fused_qkv;  // q/k/v inside one [B, T, 3, H, hd] buffer and y as [B, T, H·hd] (the trainer)
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "hd" << c.head_dim << " T" << c.seq << (c.fused_qkv ? " fused qkv" : " head-major");
}

// The mma.sync kernels only, and the default with one wgmma backward kernel swapped for its
// mma.sync counterpart.
constexpr AttentionKernelChoice kMmaSync{false, false, false};
constexpr AttentionKernelChoice kMmaSyncDq{true, false, true};
constexpr AttentionKernelChoice kMmaSyncDkDv{true, true, false};

class FlashAttention : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttention, MatchesFloat64Reference) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  const int64_t b = 2, h = 3, t = c.seq, hd = c.head_dim, bh = b * h, n = bh * t * hd;
  // Dense per-head inputs; 1.5 spreads the softmax enough that it is neither flat nor one-hot.
  std::vector<float> qf = RoundBf16(Random(static_cast<size_t>(n), 1, 1.5f));
  std::vector<float> kf = RoundBf16(Random(static_cast<size_t>(n), 2, 1.5f));
  std::vector<float> vf = RoundBf16(Random(static_cast<size_t>(n), 3));
  std::vector<float> dyf = RoundBf16(Random(static_cast<size_t>(n), 4));

  // Device layouts: element (b, h, t, d) of q/k/v lives at qkv_layout-offset + {0, C, 2C} in the
  // fused case, or in three separate [B, H, T, hd] buffers otherwise.
  const int64_t cdim = h * hd;
  const HeadLayout ql = c.fused_qkv ? RowMajorHeads(t, hd, 3 * cdim) : HeadMajor(h, t, hd);
  const HeadLayout yl = c.fused_qkv ? RowMajorHeads(t, hd, cdim) : HeadMajor(h, t, hd);
  auto offset = [&](const HeadLayout& l, int64_t i) {  // i indexes the dense [B·H][T][hd] array
    const int64_t d = i % hd, row = (i / hd) % t, head = (i / (hd * t)) % h, batch = i / (hd * t * h);
    return batch * l.batch_stride + head * l.head_stride + row * l.row_stride + d;
  };
  std::vector<float> qkv_host(static_cast<size_t>(3 * n)), dy_host(static_cast<size_t>(n));
  const int64_t k_off = c.fused_qkv ? cdim : n, v_off = 2 * k_off;
  for (int64_t i = 0; i < n; ++i) {
    qkv_host[static_cast<size_t>(offset(ql, i))] = qf[static_cast<size_t>(i)];
    qkv_host[static_cast<size_t>(k_off + offset(ql, i))] = kf[static_cast<size_t>(i)];
    qkv_host[static_cast<size_t>(v_off + offset(ql, i))] = vf[static_cast<size_t>(i)];
    dy_host[static_cast<size_t>(offset(yl, i))] = dyf[static_cast<size_t>(i)];
  }
  Dev<bf16> qkv(ToBf16(qkv_host)), dy(ToBf16(dy_host)), y(static_cast<size_t>(n));
  Dev<bf16> dqkv(qkv_host.size()), dqkv_mma_dq(qkv_host.size()), dqkv_mma_dkdv(qkv_host.size());
  const AttentionDims dims{b, h, t, hd};
  Dev<float> lse(static_cast<size_t>(bh * t)), delta(static_cast<size_t>(FlashAttentionBackwardScratchFloats(dims)));
  // The mma.sync forward first, into its own y and lse; then the wgmma one (where it applies:
  // hd 64 and 128), whose y and lse the backwards below read.
  Dev<bf16> y_mma(static_cast<size_t>(n));
  Dev<float> lse_mma(static_cast<size_t>(bh * t));
  ASSERT_OK(FlashAttentionForward(dims, qkv.get(), qkv.get() + k_off, qkv.get() + v_off, ql, y_mma.get(), yl, lse_mma.get(),
                                  nullptr, kMmaSync));
  ASSERT_OK(FlashAttentionForward(dims, qkv.get(), qkv.get() + k_off, qkv.get() + v_off, ql, y.get(), yl, lse.get(), nullptr));
  ASSERT_OK(FlashAttentionBackward(dims, qkv.get(), qkv.get() + k_off, qkv.get() + v_off, ql, y.get(), dy.get(), yl, lse.get(),
                                   delta.get(), dqkv.get(), dqkv.get() + k_off, dqkv.get() + v_off, nullptr));
  // dq by the mma.sync dQ kernel; dk, dv by the mma.sync dK/dV kernel (at hd 32 all three runs
  // are the mma.sync kernels)
  ASSERT_OK(FlashAttentionBackward(dims, qkv.get(), qkv.get() + k_off, qkv.get() + v_off, ql, y.get(), dy.get(), yl, lse.get(),
                                   delta.get(), dqkv_mma_dq.get(), dqkv_mma_dq.get() + k_off, dqkv_mma_dq.get() + v_off, nullptr,
                                   kMmaSyncDq));
  ASSERT_OK(FlashAttentionBackward(dims, qkv.get(), qkv.get() + k_off, qkv.get() + v_off, ql, y.get(), dy.get(), yl, lse.get(),
                                   delta.get(), dqkv_mma_dkdv.get(), dqkv_mma_dkdv.get() + k_off, dqkv_mma_dkdv.get() + v_off,
                                   nullptr, kMmaSyncDkDv));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  auto to_d = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const Reference ref = CausalAttention(to_d(qf), to_d(kf), to_d(vf), to_d(dyf), bh, t, hd);
  const std::vector<float> y_dev = ToF32(y.Host()), dqkv_dev = ToF32(dqkv.Host()), lse_dev = lse.Host();
  auto gather = [&](const std::vector<float>& dev, const HeadLayout& l, int64_t base) {
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = dev[static_cast<size_t>(base + offset(l, i))];
    return out;
  };
  // BF16 outputs carry ~2^-9 relative rounding; P and dS are rounded to BF16 before their GEMMs.
  EXPECT_LT(RelErrD(gather(y_dev, yl, 0), ref.y), 1e-2) << "wgmma forward (mma.sync at hd 32)";
  EXPECT_LT(RelErrD(gather(ToF32(y_mma.Host()), yl, 0), ref.y), 1e-2) << "mma.sync forward";
  // default kernels, with the mma.sync dQ kernel, with the mma.sync dK/dV kernel
  for (const std::vector<float>& g : {dqkv_dev, ToF32(dqkv_mma_dq.Host()), ToF32(dqkv_mma_dkdv.Host())}) {
    EXPECT_LT(RelErrD(gather(g, ql, 0), ref.dq), 2e-2);
    EXPECT_LT(RelErrD(gather(g, ql, k_off), ref.dk), 2e-2);
    EXPECT_LT(RelErrD(gather(g, ql, v_off), ref.dv), 2e-2);
  }
  double lse_err = 0, lse_mma_err = 0;  // the kernels store log2 of the sum: convert to natural log
  const std::vector<float> lse_mma_dev = lse_mma.Host();
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    lse_err = std::max(lse_err, std::abs(lse_dev[i] * std::log(2.0) - ref.lse[i]));
    lse_mma_err = std::max(lse_mma_err, std::abs(lse_mma_dev[i] * std::log(2.0) - ref.lse[i]));
  }
  EXPECT_LT(lse_err, 1e-3);
  EXPECT_LT(lse_mma_err, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttention,
    ::testing::Values(Case{64, 1, true}, Case{64, 37, true}, Case{64, 64, true}, Case{64, 200, true},
                      Case{128, 37, true}, Case{128, 130, true}, Case{128, 257, false}, Case{32, 100, true},
                      Case{32, 64, false}, Case{64, 129, false}, Case{64, 300, true}, Case{128, 300, true},
                      Case{128, 520, true}, Case{64, 520, false}),
    [](const ::testing::TestParamInfo<Case>& i) {
      return "hd" + std::to_string(i.param.head_dim) + "_t" + std::to_string(i.param.seq) +
             (i.param.fused_qkv ? "_fused" : "_headmajor");
    });

// Two backward runs on the same inputs give the same bits, with the mma.sync or the wgmma dK/dV
// kernel, at a size where many key blocks of many heads run at once. No reference: the shapes
// above check values.
enum class Bwd { kMmaDkDv, kWgmmaDkDv };

class FlashAttentionRepeat : public ::testing::TestWithParam<std::tuple<int64_t, Bwd>> {};

TEST_P(FlashAttentionRepeat, BackwardIsBitwiseRepeatable) {
  SKIP_WITHOUT_GPU();
  const int64_t b = 4, h = 8, t = 520, hd = std::get<0>(GetParam()), cdim = h * hd, n = b * t * cdim;
  const Bwd kind = std::get<1>(GetParam());
  const AttentionKernelChoice choice = kind == Bwd::kWgmmaDkDv ? AttentionKernelChoice{} : kMmaSyncDkDv;
  const AttentionDims dims{b, h, t, hd};
  const HeadLayout ql = RowMajorHeads(t, hd, 3 * cdim), yl = RowMajorHeads(t, hd, cdim);
  Dev<bf16> qkv(ToBf16(Random(static_cast<size_t>(3 * n), 5, 1.5f))), dy(ToBf16(Random(static_cast<size_t>(n), 6)));
  Dev<bf16> y(static_cast<size_t>(n)), dqkv1(static_cast<size_t>(3 * n)), dqkv2(static_cast<size_t>(3 * n));
  Dev<float> lse(static_cast<size_t>(b * h * t)), scratch(static_cast<size_t>(FlashAttentionBackwardScratchFloats(dims)));
  ASSERT_OK(FlashAttentionForward(dims, qkv.get(), qkv.get() + cdim, qkv.get() + 2 * cdim, ql, y.get(), yl, lse.get(), nullptr));
  for (Dev<bf16>* out : {&dqkv1, &dqkv2})
    ASSERT_OK(FlashAttentionBackward(dims, qkv.get(), qkv.get() + cdim, qkv.get() + 2 * cdim, ql, y.get(), dy.get(), yl, lse.get(),
                                     scratch.get(), out->get(), out->get() + cdim, out->get() + 2 * cdim, nullptr, choice));
  const std::vector<bf16> a = dqkv1.Host(), c = dqkv2.Host();
  size_t differ = 0, nonzero = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    uint16_t x, z;
    std::memcpy(&x, &a[i], 2), std::memcpy(&z, &c[i], 2);
    differ += x != z;
    nonzero += x != 0;
  }
  EXPECT_EQ(differ, 0u);
  EXPECT_GT(nonzero, a.size() / 2);  // the gradients were written at all
}

INSTANTIATE_TEST_SUITE_P(HeadDims, FlashAttentionRepeat,
                         ::testing::Combine(::testing::Values(int64_t{64}, int64_t{128}),
                                            ::testing::Values(Bwd::kMmaDkDv, Bwd::kWgmmaDkDv)),
                         [](const ::testing::TestParamInfo<std::tuple<int64_t, Bwd>>& i) {
                           const Bwd k = std::get<1>(i.param);
                           return "hd" + std::to_string(std::get<0>(i.param)) +
                                  (k == Bwd::kWgmmaDkDv ? "_wgmma_dkdv" : "_mma_dkdv");
                         });

// The wgmma dK/dV kernel against the mma.sync one on fresh random inputs of the trainer's layout
// (B3 H4, T not a multiple of the 128-key or the query tile). Both round P and dS to BF16 and accumulate in FP32; they differ by the order of
// the sums in S, dP (and so by which P/dS values round the other way) and in dK, dV.
class FlashAttentionDkDv : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(FlashAttentionDkDv, WgmmaMatchesMma) {
  SKIP_WITHOUT_GPU();
  const int64_t b = 3, h = 4, hd = std::get<0>(GetParam()), t = std::get<1>(GetParam()), cdim = h * hd, n = b * t * cdim;
  const AttentionDims dims{b, h, t, hd};
  const HeadLayout ql = RowMajorHeads(t, hd, 3 * cdim), yl = RowMajorHeads(t, hd, cdim);
  Dev<bf16> qkv(ToBf16(Random(static_cast<size_t>(3 * n), 11 + static_cast<uint32_t>(hd + t), 1.5f)));
  Dev<bf16> dy(ToBf16(Random(static_cast<size_t>(n), 12 + static_cast<uint32_t>(t))));
  Dev<bf16> y(static_cast<size_t>(n)), ref(static_cast<size_t>(3 * n)), out(static_cast<size_t>(3 * n));
  Dev<float> lse(static_cast<size_t>(b * h * t)), scratch(static_cast<size_t>(FlashAttentionBackwardScratchFloats(dims)));
  const bf16 *q = qkv.get(), *k = q + cdim, *v = q + 2 * cdim;
  ASSERT_OK(FlashAttentionForward(dims, q, k, v, ql, y.get(), yl, lse.get(), nullptr));
  EXPECT_FALSE(FlashAttentionBackwardUsesWgmmaDkDv(dims, ql, yl, q, k, v, dy.get(), kMmaSyncDkDv));
  ASSERT_OK(FlashAttentionBackward(dims, q, k, v, ql, y.get(), dy.get(), yl, lse.get(), scratch.get(), ref.get(),
                                   ref.get() + cdim, ref.get() + 2 * cdim, nullptr, kMmaSyncDkDv));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> r = ToF32(ref.Host());
  ASSERT_TRUE(FlashAttentionBackwardUsesWgmmaDkDv(dims, ql, yl, q, k, v, dy.get()));
  {
    ASSERT_EQ(cudaMemset(out.get(), 0xFF, static_cast<size_t>(3 * n) * sizeof(bf16)), cudaSuccess);  // NaNs
    ASSERT_OK(FlashAttentionBackward(dims, q, k, v, ql, y.get(), dy.get(), yl, lse.get(), scratch.get(), out.get(),
                                     out.get() + cdim, out.get() + 2 * cdim, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> a = ToF32(out.Host());
    // dq, dk, dv: columns [0, C), [C, 2C), [2C, 3C) of each [B, T, 3C] row.
    for (int part = 0; part < 3; ++part) {
      double num = 0, den = 0;
      for (int64_t row = 0; row < b * t; ++row)
        for (int64_t c = 0; c < cdim; ++c) {
          const size_t i = static_cast<size_t>(row * 3 * cdim + part * cdim + c);
          ASSERT_TRUE(std::isfinite(a[i])) << "part " << part << " [" << i << "]";
          num += (a[i] - r[i]) * double(a[i] - r[i]), den += double(r[i]) * r[i];
        }
      const double rel = std::sqrt(num / den);
      std::printf("  hd%ld T%ld %s: rel. L2 vs mma.sync %.2e\n", static_cast<long>(hd), static_cast<long>(t),
                  part == 0 ? "dq" : part == 1 ? "dk" : "dv", rel);
      EXPECT_LT(rel, part == 0 ? 1e-6 : 4e-3) << (part == 0 ? "dq (same kernel in both runs)" : part == 1 ? "dk" : "dv");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionDkDv,
                         ::testing::Values(std::make_tuple(int64_t{64}, int64_t{1000}), std::make_tuple(int64_t{128}, int64_t{777})),
                         [](const ::testing::TestParamInfo<std::tuple<int64_t, int64_t>>& i) {
                           return "hd" + std::to_string(std::get<0>(i.param)) + "_t" + std::to_string(std::get<1>(i.param));
                         });

// The wgmma forward against the mma.sync one on fresh random inputs of the trainer's layout,
// several heads and batches, T not a multiple of the 128-query tile: both keep FP32 statistics
// and round P to BF16, so they differ only by where the key tiles split the rescaling.
class FlashAttentionForwards : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(FlashAttentionForwards, WgmmaMatchesMma) {
  SKIP_WITHOUT_GPU();
  const int64_t b = 3, h = 4, hd = std::get<0>(GetParam()), t = std::get<1>(GetParam()), cdim = h * hd, n = b * t * cdim;
  const AttentionDims dims{b, h, t, hd};
  const HeadLayout ql = RowMajorHeads(t, hd, 3 * cdim), yl = RowMajorHeads(t, hd, cdim);
  Dev<bf16> qkv(ToBf16(Random(static_cast<size_t>(3 * n), 7 + static_cast<uint32_t>(hd + t), 1.5f)));
  Dev<bf16> y_mma(static_cast<size_t>(n)), y_wgmma(static_cast<size_t>(n));
  Dev<float> lse_mma(static_cast<size_t>(b * h * t)), lse_wgmma(static_cast<size_t>(b * h * t));
  const bf16 *q = qkv.get(), *k = q + cdim, *v = q + 2 * cdim;
  EXPECT_FALSE(FlashAttentionForwardUsesWgmma(dims, ql, q, k, v, kMmaSync));
  ASSERT_OK(FlashAttentionForward(dims, q, k, v, ql, y_mma.get(), yl, lse_mma.get(), nullptr, kMmaSync));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> r = ToF32(y_mma.Host()), lr = lse_mma.Host();
  ASSERT_TRUE(FlashAttentionForwardUsesWgmma(dims, ql, q, k, v));
  {
    ASSERT_EQ(cudaMemset(y_wgmma.get(), 0xFF, static_cast<size_t>(n) * sizeof(bf16)), cudaSuccess);  // NaNs
    ASSERT_OK(FlashAttentionForward(dims, q, k, v, ql, y_wgmma.get(), yl, lse_wgmma.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> a = ToF32(y_wgmma.Host());
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(a[i])) << "y[" << i << "]";
      num += (a[i] - r[i]) * double(a[i] - r[i]), den += double(r[i]) * r[i];
    }
    EXPECT_LT(std::sqrt(num / den), 2e-3);
    const std::vector<float> la = lse_wgmma.Host();
    double lse_diff = 0;
    for (size_t i = 0; i < la.size(); ++i) lse_diff = std::max(lse_diff, double(std::abs(la[i] - lr[i])));
    EXPECT_LT(lse_diff, 2e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionForwards,
                         ::testing::Values(std::make_tuple(int64_t{64}, int64_t{1000}), std::make_tuple(int64_t{128}, int64_t{777}),
                                           std::make_tuple(int64_t{128}, int64_t{1024})),
                         [](const ::testing::TestParamInfo<std::tuple<int64_t, int64_t>>& i) {
                           return "hd" + std::to_string(std::get<0>(i.param)) + "_t" + std::to_string(std::get<1>(i.param));
                         });

TEST(FlashAttentionArgs, WgmmaForwardOnlyWhereItApplies) {
  // Pure host logic (no launch): head dims and the choice. Pointers only need to be aligned.
  alignas(16) static bf16 buf[8];
  const AttentionDims d64{1, 2, 16, 64}, d32{1, 2, 16, 32};
  const HeadLayout l64 = RowMajorHeads(16, 64, 3 * 128), l32 = RowMajorHeads(16, 32, 3 * 64);
  EXPECT_TRUE(FlashAttentionForwardUsesWgmma(d64, l64, buf, buf, buf));
  EXPECT_FALSE(FlashAttentionForwardUsesWgmma(d32, l32, buf, buf, buf));
  EXPECT_FALSE(FlashAttentionForwardUsesWgmma(d64, l64, buf + 1, buf, buf));  // not TMA-aligned
  EXPECT_FALSE(FlashAttentionForwardUsesWgmma(d64, l64, buf, buf, buf, kMmaSync));
}

TEST(FlashAttentionArgs, WgmmaDkDvOnlyWhereItApplies) {
  // Pure host logic (no launch): head dims and the choice.
  alignas(16) static bf16 buf[8];
  const AttentionDims d64{1, 2, 16, 64}, d128{1, 2, 16, 128}, d32{1, 2, 16, 32};
  const HeadLayout l64 = RowMajorHeads(16, 64, 3 * 128), y64 = RowMajorHeads(16, 64, 128);
  const HeadLayout l128 = RowMajorHeads(16, 128, 3 * 256), y128 = RowMajorHeads(16, 128, 256);
  const HeadLayout l32 = RowMajorHeads(16, 32, 3 * 64), y32 = RowMajorHeads(16, 32, 64);
  EXPECT_TRUE(FlashAttentionBackwardUsesWgmmaDkDv(d64, l64, y64, buf, buf, buf, buf));
  EXPECT_TRUE(FlashAttentionBackwardUsesWgmmaDkDv(d128, l128, y128, buf, buf, buf, buf));
  EXPECT_FALSE(FlashAttentionBackwardUsesWgmmaDkDv(d32, l32, y32, buf, buf, buf, buf));
  EXPECT_FALSE(FlashAttentionBackwardUsesWgmmaDkDv(d64, l64, y64, buf, buf, buf, buf, kMmaSyncDkDv));
  EXPECT_TRUE(FlashAttentionBackwardUsesWgmmaDkDv(d64, l64, y64, buf, buf, buf, buf, kMmaSyncDq));
  EXPECT_FALSE(FlashAttentionBackwardUsesWgmmaDq(d64, l64, y64, buf, buf, buf, buf, kMmaSyncDq));
}

TEST(FlashAttentionArgs, RejectsUnsupportedHeadDimAndMisalignedStrides) {
  const AttentionDims bad_hd{1, 1, 16, 48};
  const Status s = FlashAttentionForward(bad_hd, nullptr, nullptr, nullptr, HeadMajor(1, 16, 48), nullptr,
                                         HeadMajor(1, 16, 48), nullptr, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("head_dim"), std::string::npos) << s.message();
  const AttentionDims dims{1, 1, 16, 64};
  const HeadLayout odd{16 * 68, 0, 68 + 1};  // rows not 16-byte aligned
  const Status a = FlashAttentionForward(dims, nullptr, nullptr, nullptr, odd, nullptr, HeadMajor(1, 16, 64), nullptr, nullptr);
  EXPECT_FALSE(a.ok());
  EXPECT_NE(a.message().find("stride"), std::string::npos) << a.message();
}

// Grouped-query attention in the Llama layouts: q, y, dy [B·T, H·hd] rows, k, v [B·T, KV·hd],
// against the CPU reference (llama_layers.h) in float64, with the default kernels (the wgmma ones
// at head dims 64 and 128) and the mma.sync ones; the backward twice, bitwise.
struct GqaCase {
  int64_t heads, kv_heads, head_dim, seq;
};

class FlashAttentionGqa : public ::testing::TestWithParam<GqaCase> {};

TEST_P(FlashAttentionGqa, MatchesCpuReference) {
  SKIP_WITHOUT_GPU();
  const GqaCase c = GetParam();
  const int64_t b = 2, h = c.heads, kv = c.kv_heads, hd = c.head_dim, t = c.seq;
  const size_t nq = static_cast<size_t>(b * t * h * hd), nkv = static_cast<size_t>(b * t * kv * hd);
  const std::vector<float> qf = RoundBf16(Random(nq, 51, 1.5f)), kf = RoundBf16(Random(nkv, 52, 1.5f));
  const std::vector<float> vf = RoundBf16(Random(nkv, 53)), dyf = RoundBf16(Random(nq, 54));
  const AttentionDims dims{b, h, t, hd, kv};
  const HeadLayout ql = RowMajorHeads(t, hd, h * hd), kvl = RowMajorHeads(t, hd, kv * hd);
  Dev<bf16> q(ToBf16(qf)), k(ToBf16(kf)), v(ToBf16(vf)), dy(ToBf16(dyf));
  Dev<float> scratch(static_cast<size_t>(FlashAttentionBackwardScratchFloats(dims)));

  auto to_d = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  std::vector<double> ref_y(nq), att(static_cast<size_t>(b * h * t * t)), ref_dq(nq), ref_dk(nkv), ref_dv(nkv);
  const std::vector<double> qd = to_d(qf), kd = to_d(kf), vd = to_d(vf);
  GqaAttentionForward<double>(qd.data(), kd.data(), vd.data(), b, t, h, kv, hd, ref_y.data(), att.data());
  GqaAttentionBackward<double>(to_d(dyf).data(), qd.data(), kd.data(), vd.data(), att.data(), b, t, h, kv, hd,
                               ref_dq.data(), ref_dk.data(), ref_dv.data());

  for (const AttentionKernelChoice& choice : {AttentionKernelChoice{}, kMmaSync}) {
    const bool wgmma = choice.wgmma_forward;
    Dev<bf16> y(nq), dq(nq), dk(nkv), dv(nkv), dq2(nq), dk2(nkv), dv2(nkv);
    Dev<float> lse(static_cast<size_t>(b * h * t));
    ASSERT_OK(FlashAttentionForward(dims, q.get(), ql, k.get(), v.get(), kvl, y.get(), ql, lse.get(), nullptr, choice));
    ASSERT_OK(FlashAttentionBackward(dims, q.get(), ql, k.get(), v.get(), kvl, y.get(), dy.get(), ql, lse.get(),
                                     scratch.get(), dq.get(), dk.get(), dv.get(), nullptr, choice));
    ASSERT_OK(FlashAttentionBackward(dims, q.get(), ql, k.get(), v.get(), kvl, y.get(), dy.get(), ql, lse.get(),
                                     scratch.get(), dq2.get(), dk2.get(), dv2.get(), nullptr, choice));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LT(RelErrD(ToF32(y.Host()), ref_y), 1e-2) << (wgmma ? "default" : "mma.sync") << " forward";
    EXPECT_LT(RelErrD(ToF32(dq.Host()), ref_dq), 2e-2) << (wgmma ? "default" : "mma.sync") << " dq";
    EXPECT_LT(RelErrD(ToF32(dk.Host()), ref_dk), 2e-2) << (wgmma ? "default" : "mma.sync") << " dk";
    EXPECT_LT(RelErrD(ToF32(dv.Host()), ref_dv), 2e-2) << (wgmma ? "default" : "mma.sync") << " dv";
    for (auto [a, z] : {std::pair{&dq, &dq2}, std::pair{&dk, &dk2}, std::pair{&dv, &dv2}}) {
      const std::vector<bf16> x1 = a->Host(), x2 = z->Host();
      EXPECT_EQ(std::memcmp(x1.data(), x2.data(), x1.size() * sizeof(bf16)), 0) << "backward not bitwise repeatable";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Groups, FlashAttentionGqa,
    ::testing::Values(GqaCase{4, 1, 64, 130}, GqaCase{8, 2, 64, 130}, GqaCase{4, 4, 64, 130}, GqaCase{4, 1, 128, 130},
                      GqaCase{8, 2, 128, 200}, GqaCase{4, 4, 128, 130}, GqaCase{4, 1, 32, 100}, GqaCase{8, 2, 32, 100},
                      GqaCase{4, 4, 32, 100}, GqaCase{8, 2, 64, 300}),
    [](const ::testing::TestParamInfo<GqaCase>& i) {
      return "h" + std::to_string(i.param.heads) + "_kv" + std::to_string(i.param.kv_heads) + "_hd" +
             std::to_string(i.param.head_dim) + "_t" + std::to_string(i.param.seq);
    });

TEST(FlashAttentionArgs, RejectsKvHeadsThatDoNotDivideHeads) {
  alignas(16) static bf16 buf[8];
  const AttentionDims dims{1, 6, 16, 64, 4};
  const HeadLayout ql = RowMajorHeads(16, 64, 6 * 64), kvl = RowMajorHeads(16, 64, 4 * 64);
  const Status s = FlashAttentionForward(dims, buf, ql, buf, buf, kvl, buf, ql, nullptr, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("kv_heads"), std::string::npos) << s.message();
  // Grouped-query attention runs the wgmma kernels too (k/v tensor maps of their own head count).
  const AttentionDims gqa{1, 8, 16, 64, 2};
  EXPECT_TRUE(FlashAttentionForwardUsesWgmma(gqa, ql, buf, buf, buf));
  EXPECT_TRUE(FlashAttentionBackwardUsesWgmmaDkDv(gqa, ql, ql, buf, buf, buf, buf));
}

}  // namespace
}  // namespace fp8::train::cuda
