// SPDX-License-Identifier: Apache-2.0
// The FP8 weight-gradient GEMMs add into the FP32 gradient in place (cuBLASLt beta = 1,
// CudaLinear::AccumulateWgrad): C = C0 + (A·sa)(B·sb)ᵀ for the tensorwise and the blockwise
// kind. Two checks: against a float64 reference on the dequantized bytes, within the FP8 tensor
// cores' accumulation error (≈1e-4 relative on an H200, the same with beta 0), and against C0 +
// the beta = 0 product of the same call, where only the epilogue's one FP32 addition differs.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/sm90_fp8_gemm_cublaslt.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/fp8_format.h"
#include "tests/worker_train_cuda/cuda_test_util.h"

namespace fp8::train::cuda {
namespace {

using kernels::Fp8Format;
namespace kc = kernels::cuda;

std::vector<uint8_t> RandomFp8(size_t n, uint32_t seed, Fp8Format fmt) {
  std::vector<float> f = Random(n, seed, 2.0f);
  std::vector<uint8_t> q(n);
  for (size_t i = 0; i < n; ++i) q[i] = kernels::FloatToFp8(f[i], fmt);
  return q;
}

// C0 + sa·sb·A·Bᵀ, A [m, k], B [n, k] row-major.
std::vector<float> Reference(const std::vector<float>& c0, const std::vector<uint8_t>& a, Fp8Format fa,
                             const std::vector<uint8_t>& b, Fp8Format fb, int64_t m, int64_t n, int64_t k,
                             double sa, double sb) {
  std::vector<float> c(c0.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += double(kernels::Fp8ToFloat(a[i * k + p], fa)) * kernels::Fp8ToFloat(b[j * k + p], fb);
      c[i * n + j] = static_cast<float>(c0[i * n + j] + sa * sb * acc);
    }
  return c;
}

constexpr double kVsFloat64 = 1e-3;  // FP8 MMA accumulation (measured ≈1.1e-4)
constexpr double kVsBetaZero = 1e-6;  // one FP32 rounding of C0 + product

std::vector<float> Plus(std::vector<float> a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

class Fp8WgradAccumulateTest : public ::testing::Test {
 protected:
  // wgrad shapes of a small layer: dW [out=256, in=384] = dyᵀ [256, m=512] · xᵀ [384, 512]ᵀ.
  static constexpr int64_t kM = 256, kN = 384, kK = 512;
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
    auto ctx = kc::Sm90CublasLtContext::Create();
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    ctx_ = std::move(ctx).value();
  }
  std::unique_ptr<kc::Sm90CublasLtContext> ctx_;
};

TEST_F(Fp8WgradAccumulateTest, TensorwiseBetaOneAddsIntoC) {
  const auto a = RandomFp8(kM * kK, 1, Fp8Format::kE5M2), b = RandomFp8(kN * kK, 2, Fp8Format::kE4M3);
  const std::vector<float> c0 = Random(kM * kN, 3, 50.0f);
  Dev<uint8_t> da(a), db(b);
  Dev<float> dc(c0), d0(std::vector<float>(kM * kN, 7.0f)) /* beta = 0 must overwrite this */,
      sa(std::vector<float>{0.5f}), sb(std::vector<float>{0.25f});
  auto gemm = [&](float* c, float beta) {
    return kc::Sm90GemmFp8TensorwiseCublasLt(*ctx_, da.get(), Fp8Format::kE5M2, sa.get(), db.get(), Fp8Format::kE4M3,
                                             sb.get(), kM, kN, kK, c, kc::Sm90GemmOut::kFp32, nullptr, beta);
  };
  ASSERT_OK(gemm(dc.get(), 1.0f));
  ASSERT_OK(gemm(d0.get(), 0.0f));
  const auto got = dc.Host(), product = d0.Host();
  const auto ref = Reference(c0, a, Fp8Format::kE5M2, b, Fp8Format::kE4M3, kM, kN, kK, 0.5, 0.25);
  const auto ref0 = Reference(std::vector<float>(c0.size(), 0.0f), a, Fp8Format::kE5M2, b, Fp8Format::kE4M3, kM, kN, kK, 0.5, 0.25);
  EXPECT_LT(RelErr(got.data(), ref.data(), ref.size()), kVsFloat64);
  EXPECT_LT(RelErr(product.data(), ref0.data(), ref0.size()), kVsFloat64);
  const auto sum = Plus(c0, product);
  EXPECT_LT(RelErr(got.data(), sum.data(), sum.size()), kVsBetaZero);
}

TEST_F(Fp8WgradAccumulateTest, BlockwiseBetaOneAddsIntoC) {
  const auto a = RandomFp8(kM * kK, 4, Fp8Format::kE4M3), b = RandomFp8(kN * kK, 5, Fp8Format::kE4M3);
  const std::vector<float> c0 = Random(kM * kN, 6, 50.0f);
  // Uniform scales (2 for A's 1x128 tiles, 0.5 for B's 128x128 blocks) in cuBLASLt's layouts:
  // A M-major [K/128, M], B [N/128, Sm90BlockScaleLd(K)].
  Dev<uint8_t> da(a), db(b);
  Dev<float> dc(c0), sa(std::vector<float>(kK / 128 * kM, 2.0f)),
      sb(std::vector<float>(kN / 128 * kc::Sm90BlockScaleLd(kK), 0.5f));
  Dev<float> d0(std::vector<float>(kM * kN, 7.0f));  // beta = 0 must overwrite this
  auto gemm = [&](float* c, float beta) {
    return kc::Sm90GemmFp8BlockwiseCublasLt(*ctx_, da.get(), Fp8Format::kE4M3, sa.get(), db.get(), Fp8Format::kE4M3,
                                            sb.get(), kM, kN, kK, c, kc::Sm90GemmOut::kFp32, nullptr, beta);
  };
  ASSERT_OK(gemm(dc.get(), 1.0f));
  ASSERT_OK(gemm(d0.get(), 0.0f));
  const auto got = dc.Host(), product = d0.Host();
  const auto ref = Reference(c0, a, Fp8Format::kE4M3, b, Fp8Format::kE4M3, kM, kN, kK, 2.0, 0.5);
  EXPECT_LT(RelErr(got.data(), ref.data(), ref.size()), kVsFloat64);
  const auto sum = Plus(c0, product);
  EXPECT_LT(RelErr(got.data(), sum.data(), sum.size()), kVsBetaZero);
}

}  // namespace
}  // namespace fp8::train::cuda
