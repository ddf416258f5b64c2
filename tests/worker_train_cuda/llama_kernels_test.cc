// SPDX-License-Identifier: Apache-2.0
// The Llama family's device kernels (worker/train/cuda/llama_kernels.h) against the CPU
// reference (worker/train/llama_layers.h) in float64 on the same BF16-rounded inputs: RMSNorm
// forward and backward (and the fused residual add, bitwise equal to the add then the norm),
// Qwen3's per-head RMSNorm inside a wider row, rotary embedding with plain and llama3-scaled
// frequencies, and the SwiGLU gate, at sizes that do and do not fill whole blocks / 8-element
// vectors. Skips without a GPU.
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "tests/worker_train_cuda/cuda_test_util.h"
#include "worker/train/cuda/llama_kernels.h"
#include "worker/train/llama_layers.h"

namespace fp8::train::cuda {
namespace {

std::vector<double> ToD(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// ‖a − ref‖ / ‖ref‖ against a float64 reference.
double RelErrD(const std::vector<float>& a, const std::vector<double>& ref) {
  std::vector<float> r(ref.begin(), ref.end());
  return RelErr(a.data(), r.data(), r.size());
}

template <typename T>
bool BitwiseEqual(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

std::vector<float> NearOne(size_t n, uint32_t seed) {
  std::vector<float> w = Random(n, seed, 0.2f);
  for (float& x : w) x += 1.0f;
  return w;
}

class RmsNorm : public ::testing::TestWithParam<int64_t> {};

TEST_P(RmsNorm, ForwardBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 37, c = GetParam();
  const float eps = 1e-5f;
  const size_t nc = static_cast<size_t>(n * c);
  const std::vector<float> x = Random(nc, 1, 2.0f), w = NearOne(static_cast<size_t>(c), 2);
  const std::vector<float> dout = RoundBf16(Random(nc, 3)), dx0 = Random(nc, 4, 0.1f), dw0 = Random(static_cast<size_t>(c), 5);
  Dev<float> dx_(x), dw_(w), drstd(static_cast<size_t>(n)), ddx(dx0), ddw(dw0);
  Dev<float> scratch(static_cast<size_t>(ColumnScratchFloats(n, c)));
  Dev<bf16> dout_(ToBf16(dout)), out(nc), dx_bf16(nc);
  ASSERT_OK(RmsNormForward(dx_.get(), dw_.get(), n, c, eps, out.get(), drstd.get(), nullptr));
  ASSERT_OK(RmsNormBackward(dout_.get(), dx_.get(), dw_.get(), drstd.get(), n, c, ddx.get(), dx_bf16.get(), ddw.get(),
                            scratch.get(), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<double> ref_out(nc), ref_rstd(static_cast<size_t>(n)), ref_dx(nc), ref_dw(static_cast<size_t>(c), 0.0);
  const std::vector<double> xd = ToD(x), wd = ToD(w);
  ::fp8::train::RmsNormForward<double>(xd.data(), wd.data(), n, c, eps, ref_out.data(), ref_rstd.data());
  ::fp8::train::RmsNormBackward<double>(ToD(dout).data(), xd.data(), wd.data(), ref_rstd.data(), n, c, false, ref_dx.data(),
                          ref_dw.data());
  for (size_t i = 0; i < nc; ++i) ref_dx[i] += dx0[i];
  for (size_t j = 0; j < ref_dw.size(); ++j) ref_dw[j] += dw0[j];
  EXPECT_LT(RelErrD(ToF32(out.Host()), ref_out), 1e-2);  // BF16 output
  EXPECT_LT(RelErrD(drstd.Host(), ref_rstd), 1e-5);
  const std::vector<float> dx = ddx.Host();
  EXPECT_LT(RelErrD(dx, ref_dx), 1e-4);
  EXPECT_LT(RelErrD(ddw.Host(), ref_dw), 1e-4);
  EXPECT_TRUE(BitwiseEqual(RoundBf16(dx), ToF32(dx_bf16.Host()))) << "dx_bf16 is the updated dx rounded";
}

// The fused residual add + norm writes the same bits as the add on the host and then
// RmsNormForward on its result.
TEST_P(RmsNorm, ResidualAddFusedEqualsTwoSteps) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 37, c = GetParam();
  const size_t nc = static_cast<size_t>(n * c);
  const std::vector<float> res = Random(nc, 11, 2.0f), w = NearOne(static_cast<size_t>(c), 12);
  const std::vector<bf16> y = ToBf16(Random(nc, 13));
  Dev<float> dres(res), dw(w), out(nc), rstd(static_cast<size_t>(n)), rstd2(static_cast<size_t>(n));
  Dev<bf16> dy(y), ln(nc), ln2(nc);
  ASSERT_OK(ResidualAddRmsNorm(dres.get(), dy.get(), n, c, out.get(), dw.get(), 1e-6f, ln.get(), rstd.get(), nullptr));
  ASSERT_OK(RmsNormForward(out.get(), dw.get(), n, c, 1e-6f, ln2.get(), rstd2.get(), nullptr));
  std::vector<float> sum(nc);
  for (size_t i = 0; i < nc; ++i) sum[i] = res[i] + __bfloat162float(y[i]);
  EXPECT_TRUE(BitwiseEqual(out.Host(), sum));
  EXPECT_TRUE(BitwiseEqual(ToF32(ln.Host()), ToF32(ln2.Host())));
  EXPECT_TRUE(BitwiseEqual(rstd.Host(), rstd2.Host()));
}

INSTANTIATE_TEST_SUITE_P(Widths, RmsNorm, ::testing::Values(64, 100, 2048, 3072, 8192));

// Per-head norm on `heads` heads of rows whose pitch leaves other columns (as q inside a wider
// projection output): those must stay untouched.
class HeadRmsNorm : public ::testing::TestWithParam<int64_t> {};

TEST_P(HeadRmsNorm, ForwardBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 19, heads = 3, hd = GetParam(), ld = (heads + 2) * hd, nh = n * heads;
  const size_t total = static_cast<size_t>(n * ld), dense = static_cast<size_t>(nh * hd);
  const std::vector<float> x = RoundBf16(Random(total, 21, 1.5f)), dout = RoundBf16(Random(total, 22));
  const std::vector<float> w = NearOne(static_cast<size_t>(hd), 23), dw0 = Random(static_cast<size_t>(hd), 24);
  Dev<bf16> dx(ToBf16(x)), x_in(total), ddout(ToBf16(dout));
  Dev<float> dw_(w), rstd(static_cast<size_t>(nh)), ddw(dw0), scratch(static_cast<size_t>(ColumnScratchFloats(nh, hd)));
  ASSERT_OK(HeadRmsNormForward(dx.get(), n, heads, hd, ld, dw_.get(), 1e-6f, x_in.get(), rstd.get(), nullptr));
  ASSERT_OK(HeadRmsNormBackward(ddout.get(), x_in.get(), n, heads, hd, ld, dw_.get(), rstd.get(), ddw.get(),
                                scratch.get(), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  auto dense_of = [&](const std::vector<float>& rows) {  // the heads' columns, [n·heads, hd]
    std::vector<double> d(dense);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < heads * hd; ++j) d[static_cast<size_t>(r * heads * hd + j)] = rows[static_cast<size_t>(r * ld + j)];
    return d;
  };
  const std::vector<double> xd = dense_of(x), wd = ToD(w);
  std::vector<double> ref_y(dense), ref_rstd(static_cast<size_t>(nh)), ref_dx(dense), ref_dw(static_cast<size_t>(hd), 0.0);
  ::fp8::train::RmsNormForward<double>(xd.data(), wd.data(), nh, hd, 1e-6, ref_y.data(), ref_rstd.data());
  ::fp8::train::RmsNormBackward<double>(dense_of(dout).data(), xd.data(), wd.data(), ref_rstd.data(), nh, hd, false, ref_dx.data(),
                          ref_dw.data());
  for (size_t j = 0; j < ref_dw.size(); ++j) ref_dw[j] += dw0[j];
  const std::vector<float> y = ToF32(dx.Host()), g = ToF32(ddout.Host());
  auto dense_f = [&](const std::vector<float>& rows) {
    const std::vector<double> d = dense_of(rows);
    return std::vector<float>(d.begin(), d.end());
  };
  EXPECT_LT(RelErrD(dense_f(y), ref_y), 1e-2);
  EXPECT_LT(RelErrD(rstd.Host(), ref_rstd), 1e-5);
  EXPECT_LT(RelErrD(dense_f(g), ref_dx), 1e-2);
  EXPECT_LT(RelErrD(ddw.Host(), ref_dw), 1e-4);
  EXPECT_TRUE(BitwiseEqual(dense_f(ToF32(x_in.Host())), dense_f(x))) << "x_in: the unnormalised heads";
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = heads * hd; j < ld; ++j) {
      const size_t i = static_cast<size_t>(r * ld + j);
      ASSERT_EQ(y[i], x[i]) << "column " << j << " past the heads";
      ASSERT_EQ(g[i], dout[i]) << "gradient column " << j << " past the heads";
    }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, HeadRmsNorm, ::testing::Values(64, 128));

// Rows of 3 heads inside a pitch with one more head's columns, which RoPE must leave alone.
class Rope : public ::testing::TestWithParam<bool> {};

TEST_P(Rope, ForwardBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  ModelConfig cfg;
  cfg.head_dim = 64;
  cfg.seq_len = 40;
  cfg.rope_theta = 500000.0;
  if (GetParam()) cfg.rope_scaling = RopeScaling{true, 32.0, 1.0, 4.0, 8192};  // Llama-3.2
  const RopeTables tab = MakeRopeTables(cfg);
  const int64_t t = cfg.seq_len, hd = cfg.head_dim, heads = 3, ld = (heads + 1) * hd, n = 2 * t;
  const size_t total = static_cast<size_t>(n * ld), dense = static_cast<size_t>(n * heads * hd);
  const std::vector<float> x = RoundBf16(Random(total, 31)), dy = RoundBf16(Random(total, 32));
  Dev<float> cos(std::vector<float>(tab.cos.begin(), tab.cos.end())), sin(std::vector<float>(tab.sin.begin(), tab.sin.end()));
  Dev<bf16> dx(ToBf16(x)), ddy(ToBf16(dy));
  ASSERT_OK(RopeForward(dx.get(), n, t, heads, hd, ld, cos.get(), sin.get(), nullptr));
  ASSERT_OK(RopeBackward(ddy.get(), n, t, heads, hd, ld, cos.get(), sin.get(), nullptr));
  auto dense_of = [&](const std::vector<float>& rows) {
    std::vector<double> d(dense);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < heads * hd; ++j) d[static_cast<size_t>(r * heads * hd + j)] = rows[static_cast<size_t>(r * ld + j)];
    return d;
  };
  std::vector<double> ref_x = dense_of(x), ref_dy = dense_of(dy);
  ::fp8::train::RopeForward<double>(tab, n, heads, ref_x.data());
  ::fp8::train::RopeBackward<double>(tab, n, heads, ref_dy.data());
  const std::vector<float> xr = ToF32(dx.Host()), dyr = ToF32(ddy.Host());
  auto dense_f = [&](const std::vector<float>& rows) {
    const std::vector<double> d = dense_of(rows);
    return std::vector<float>(d.begin(), d.end());
  };
  EXPECT_LT(RelErrD(dense_f(xr), ref_x), 1e-2);
  EXPECT_LT(RelErrD(dense_f(dyr), ref_dy), 1e-2);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = heads * hd; j < ld; ++j) {
      const size_t i = static_cast<size_t>(r * ld + j);
      ASSERT_EQ(xr[i], x[i]);
      ASSERT_EQ(dyr[i], dy[i]);
    }
}

INSTANTIATE_TEST_SUITE_P(Scaling, Rope, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "llama3" : "plain"; });

// 8-element vector path (n % 8 == 0) and the scalar one.
class SwiGlu : public ::testing::TestWithParam<int64_t> {};

TEST_P(SwiGlu, ForwardBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = GetParam();
  const size_t un = static_cast<size_t>(n);
  const std::vector<float> gate = RoundBf16(Random(un, 41, 2.0f)), up = RoundBf16(Random(un, 42)),
                           dout = RoundBf16(Random(un, 43));
  Dev<bf16> dg(ToBf16(gate)), du(ToBf16(up)), ddo(ToBf16(dout)), out(un), dgate(un), dup(un);
  ASSERT_OK(SwiGluForward(dg.get(), du.get(), n, out.get(), nullptr));
  ASSERT_OK(SwiGluBackward(ddo.get(), dg.get(), du.get(), n, dgate.get(), dup.get(), nullptr));
  std::vector<double> ref_out(un), ref_dg(un), ref_du(un);
  const std::vector<double> g = ToD(gate), u = ToD(up);
  ::fp8::train::SwiGluForward<double>(g.data(), u.data(), n, ref_out.data());
  ::fp8::train::SwiGluBackward<double>(ToD(dout).data(), g.data(), u.data(), n, ref_dg.data(), ref_du.data());
  EXPECT_LT(RelErrD(ToF32(out.Host()), ref_out), 1e-2);
  EXPECT_LT(RelErrD(ToF32(dgate.Host()), ref_dg), 1e-2);
  EXPECT_LT(RelErrD(ToF32(dup.Host()), ref_du), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Sizes, SwiGlu, ::testing::Values(4104, 1001));

}  // namespace
}  // namespace fp8::train::cuda
