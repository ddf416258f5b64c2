// SPDX-License-Identifier: Apache-2.0
// cuBLASLt GEMMs on sm_90 against the float64 product of the dequantized inputs (the CPU
// reference's own dequantization), by DeepSeek's calc_diff < 1e-3; and the full pipeline with
// the scales written by the GPU quantization kernels in the layouts cuBLASLt reads.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include "kernels/cuda/sm90_fp8_gemm_cublaslt.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/quantize.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace fp8::kernels::cuda {
namespace {

using testing::DeviceBuffer;

constexpr double kMaxCalcDiff = 1e-3;

// C[m, n] = Σ_k A[m, k] · B[n, k] in float64.
std::vector<double> ReferenceGemm(const std::vector<float>& a, const std::vector<float>& b,
                                  int64_t m, int64_t n, int64_t k) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += double(a[i * k + p]) * double(b[j * k + p]);
      c[i * n + j] = acc;
    }
  return c;
}

std::vector<double> FetchOutput(const void* d, int64_t count, Sm90GemmOut out) {
  std::vector<double> r(count);
  FP8_CHECK_CUDA(cudaDeviceSynchronize());
  if (out == Sm90GemmOut::kFp32) {
    std::vector<float> h(count);
    FP8_CHECK_CUDA(cudaMemcpy(h.data(), d, count * 4, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < count; ++i) r[i] = h[i];
  } else {
    std::vector<uint16_t> h(count);
    FP8_CHECK_CUDA(cudaMemcpy(h.data(), d, count * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < count; ++i) r[i] = Bf16ToFloat(h[i]);
  }
  return r;
}

bool AllFinite(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

std::vector<float> Gaussian(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

class Sm90GemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FP8_SKIP_WITHOUT_GPU();
    seed_ = testing::TestSeed();
    auto ctx = Sm90CublasLtContext::Create();
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    ctx_ = std::move(ctx).value();
  }
  uint64_t seed_ = 0;
  std::unique_ptr<Sm90CublasLtContext> ctx_;
};

// CPU-quantized operands (the ground truth's bytes and scales), scales rearranged on the host
// into cuBLASLt's layouts.
TEST_F(Sm90GemmTest, BlockwiseMatchesFloat64OfDequantizedInputs) {
  // (68, ...) checks an M that is not a multiple of 16.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{256, 384, 512}, {68, 256, 1024}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                 " seed=" + std::to_string(seed_));
    std::mt19937_64 rng(seed_ + m);
    std::vector<float> a = testing::RandomFloats(m * k, rng), b = Gaussian(n * k, rng);
    const int64_t kb = k / 128, nb = n / 128, ld = Sm90BlockScaleLd(k);
    std::vector<uint8_t> qa(m * k), qb(n * k);
    std::vector<float> sa(m * kb), sb(nb * kb), da(m * k), db(n * k);
    ASSERT_TRUE(Quantize1x128(a.data(), m, k, Fp8Format::kE4M3, ScaleFormat::kFp32, qa.data(), sa.data()).ok());
    ASSERT_TRUE(Quantize128x128(b.data(), n, k, Fp8Format::kE4M3, ScaleFormat::kFp32, qb.data(), sb.data()).ok());
    ASSERT_TRUE(Dequantize1x128(qa.data(), sa.data(), m, k, Fp8Format::kE4M3, da.data()).ok());
    ASSERT_TRUE(Dequantize128x128(qb.data(), sb.data(), n, k, Fp8Format::kE4M3, db.data()).ok());
    const std::vector<double> ref = ReferenceGemm(da, db, m, n, k);

    std::vector<float> sa_mn(kb * m), sb_ld(nb * ld, 0.0f);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < kb; ++j) sa_mn[j * m + i] = sa[i * kb + j];
    for (int64_t i = 0; i < nb; ++i)
      for (int64_t j = 0; j < kb; ++j) sb_ld[i * ld + j] = sb[i * kb + j];
    DeviceBuffer<uint8_t> dqa(qa), dqb(qb);
    DeviceBuffer<float> dsa(sa_mn), dsb(sb_ld);
    for (Sm90GemmOut out : {Sm90GemmOut::kBf16, Sm90GemmOut::kFp32}) {
      DeviceBuffer<float> c(m * n);  // fp32-sized; bf16 output uses the first half
      Status st = Sm90GemmFp8BlockwiseCublasLt(*ctx_, dqa.get(), Fp8Format::kE4M3, dsa.get(), dqb.get(),
                                               Fp8Format::kE4M3, dsb.get(), m, n, k, c.get(), out, nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      const std::vector<double> got = FetchOutput(c.get(), m * n, out);
      ASSERT_TRUE(AllFinite(got));
      EXPECT_LT(testing::CalcDiff(ref, got), kMaxCalcDiff) << (out == Sm90GemmOut::kBf16 ? "bf16" : "fp32");
    }
  }
}

// The production path: bf16 activations and weights quantized by the GPU kernels straight into
// cuBLASLt's scale layouts (MN-major 1x128, padded 128x128), then the blockwise GEMM.
TEST_F(Sm90GemmTest, GpuQuantizedPipelineMatchesFloat64) {
  const int64_t m = 384, n = 512, k = 640;  // K/128 = 5: padded scale rows (ld 8)
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  std::mt19937_64 rng(seed_);
  std::vector<uint16_t> a_bits, b_bits;
  std::vector<float> a, b;
  testing::ToBf16(testing::RandomFloats(m * k, rng), &a_bits, &a);
  testing::ToBf16(Gaussian(n * k, rng), &b_bits, &b);
  std::vector<uint8_t> qa(m * k), qb(n * k);
  std::vector<float> sa(m * (k / 128)), sb((n / 128) * (k / 128)), da(m * k), db(n * k);
  ASSERT_TRUE(Quantize1x128(a.data(), m, k, Fp8Format::kE4M3, ScaleFormat::kFp32, qa.data(), sa.data()).ok());
  ASSERT_TRUE(Quantize128x128(b.data(), n, k, Fp8Format::kE4M3, ScaleFormat::kFp32, qb.data(), sb.data()).ok());
  ASSERT_TRUE(Dequantize1x128(qa.data(), sa.data(), m, k, Fp8Format::kE4M3, da.data()).ok());
  ASSERT_TRUE(Dequantize128x128(qb.data(), sb.data(), n, k, Fp8Format::kE4M3, db.data()).ok());
  const std::vector<double> ref = ReferenceGemm(da, db, m, n, k);

  DeviceBuffer<uint16_t> dA(a_bits), dB(b_bits);
  DeviceBuffer<uint8_t> dqa(m * k), dqb(n * k);
  DeviceBuffer<float> dsa(m * (k / 128)), dsb((n / 128) * Sm90BlockScaleLd(k));
  DeviceBuffer<uint16_t> c(m * n);
  auto* A = reinterpret_cast<const __nv_bfloat16*>(dA.get());
  auto* B = reinterpret_cast<const __nv_bfloat16*>(dB.get());
  Status st = Sm90Fp8Quantize1x128(A, m, k, Fp8Format::kE4M3, ScaleFormat::kFp32,
                                   Sm90ScaleLayout::kMnMajor, dqa.get(), dsa.get(), nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = Sm90Fp8Quantize128x128(B, n, k, Fp8Format::kE4M3, ScaleFormat::kFp32, dqb.get(), dsb.get(),
                              Sm90BlockScaleLd(k), nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = Sm90GemmFp8BlockwiseCublasLt(*ctx_, dqa.get(), Fp8Format::kE4M3, dsa.get(), dqb.get(),
                                    Fp8Format::kE4M3, dsb.get(), m, n, k, c.get(), Sm90GemmOut::kBf16, nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::vector<double> got = FetchOutput(c.get(), m * n, Sm90GemmOut::kBf16);
  ASSERT_TRUE(AllFinite(got));
  EXPECT_LT(testing::CalcDiff(ref, got), kMaxCalcDiff);
}

TEST_F(Sm90GemmTest, TensorwiseMatchesFloat64OfDequantizedInputs) {
  const int64_t m = 200, n = 272, k = 320;
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  std::mt19937_64 rng(seed_);
  std::vector<float> a = Gaussian(m * k, rng), b = Gaussian(n * k, rng);
  for (auto [fa, fb] : {std::pair{Fp8Format::kE4M3, Fp8Format::kE4M3},
                        std::pair{Fp8Format::kE4M3, Fp8Format::kE5M2},
                        std::pair{Fp8Format::kE5M2, Fp8Format::kE4M3}}) {
    SCOPED_TRACE(std::string(Fp8FormatName(fa)) + " x " + Fp8FormatName(fb));
    const float sa = ScaleInvFromAmax(Amax(a.data(), m * k), fa, ScaleFormat::kFp32);
    const float sb = ScaleInvFromAmax(Amax(b.data(), n * k), fb, ScaleFormat::kFp32);
    std::vector<uint8_t> qa(m * k), qb(n * k);
    std::vector<float> da(m * k), db(n * k);
    QuantizeTensor(a.data(), m * k, sa, fa, qa.data());
    QuantizeTensor(b.data(), n * k, sb, fb, qb.data());
    DequantizeTensor(qa.data(), m * k, sa, fa, da.data());
    DequantizeTensor(qb.data(), n * k, sb, fb, db.data());
    const std::vector<double> ref = ReferenceGemm(da, db, m, n, k);
    DeviceBuffer<uint8_t> dqa(qa), dqb(qb);
    DeviceBuffer<float> dsa(std::vector<float>{sa}), dsb(std::vector<float>{sb});
    for (Sm90GemmOut out : {Sm90GemmOut::kBf16, Sm90GemmOut::kFp32}) {
      DeviceBuffer<float> c(m * n);
      Status st = Sm90GemmFp8TensorwiseCublasLt(*ctx_, dqa.get(), fa, dsa.get(), dqb.get(), fb, dsb.get(),
                                                m, n, k, c.get(), out, nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      const std::vector<double> got = FetchOutput(c.get(), m * n, out);
      ASSERT_TRUE(AllFinite(got));
      EXPECT_LT(testing::CalcDiff(ref, got), kMaxCalcDiff);
    }
  }
}

TEST_F(Sm90GemmTest, Bf16MatchesFloat64) {
  const int64_t m = 200, n = 264, k = 320;
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  std::mt19937_64 rng(seed_);
  std::vector<uint16_t> a_bits, b_bits;
  std::vector<float> a, b;
  testing::ToBf16(Gaussian(m * k, rng), &a_bits, &a);
  testing::ToBf16(Gaussian(n * k, rng), &b_bits, &b);
  const std::vector<double> ref = ReferenceGemm(a, b, m, n, k);
  DeviceBuffer<uint16_t> dA(a_bits), dB(b_bits);
  for (Sm90GemmOut out : {Sm90GemmOut::kBf16, Sm90GemmOut::kFp32}) {
    DeviceBuffer<float> c(m * n);
    Status st = Sm90GemmBf16CublasLt(*ctx_, reinterpret_cast<const __nv_bfloat16*>(dA.get()),
                                     reinterpret_cast<const __nv_bfloat16*>(dB.get()), m, n, k,
                                     c.get(), out, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    const std::vector<double> got = FetchOutput(c.get(), m * n, out);
    ASSERT_TRUE(AllFinite(got));
    EXPECT_LT(testing::CalcDiff(ref, got), kMaxCalcDiff);
  }
}

TEST_F(Sm90GemmTest, E5M2TimesE5M2IsUnimplemented) {
  DeviceBuffer<uint8_t> a(128 * 128), b(128 * 128);
  DeviceBuffer<float> s(1), c(128 * 128);
  Status st = Sm90GemmFp8TensorwiseCublasLt(*ctx_, a.get(), Fp8Format::kE5M2, s.get(), b.get(),
                                            Fp8Format::kE5M2, s.get(), 128, 128, 128, c.get(),
                                            Sm90GemmOut::kBf16, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.ToString();
}

// ---- shape rules (no GPU needed) --------------------------------------------------------------

void ExpectInvalidNaming(const Status& st, const std::string& dim) {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find(dim), std::string::npos) << st.message();
}

TEST(Sm90GemmShapes, BlockwiseRejectsPartialBlocksNamingTheDimension) {
  EXPECT_TRUE(Sm90ValidateGemmFp8BlockwiseShape(128, 7168, 16384).ok());
  ExpectInvalidNaming(Sm90ValidateGemmFp8BlockwiseShape(128, 256, 200), "k=200");
  ExpectInvalidNaming(Sm90ValidateGemmFp8BlockwiseShape(128, 100, 256), "n=100");
  ExpectInvalidNaming(Sm90ValidateGemmFp8BlockwiseShape(6, 128, 256), "m=6");
}

TEST(Sm90GemmShapes, TensorwiseAndBf16RejectMisalignedDims) {
  EXPECT_TRUE(Sm90ValidateGemmFp8TensorwiseShape(1, 16, 16).ok());
  ExpectInvalidNaming(Sm90ValidateGemmFp8TensorwiseShape(4, 24, 32), "n=24");
  ExpectInvalidNaming(Sm90ValidateGemmFp8TensorwiseShape(4, 32, 40), "k=40");
  ExpectInvalidNaming(Sm90ValidateGemmFp8TensorwiseShape(0, 32, 32), "m=0");
  EXPECT_TRUE(Sm90ValidateGemmBf16Shape(3, 8, 8).ok());
  ExpectInvalidNaming(Sm90ValidateGemmBf16Shape(3, 12, 8), "n=12");
}

}  // namespace
}  // namespace fp8::kernels::cuda
