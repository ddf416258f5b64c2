// SPDX-License-Identifier: Apache-2.0
// FP8 GEMMs against the float64 product of their dequantized inputs (DeepGEMM's calc_diff check
// plus an element-wise FP32-accumulation bound), and Sgemm against a naive double GEMM.
#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/quantize.h"
#include "tests/kernels_cpu/test_util.h"

namespace fp8::kernels {
namespace {

using testing::CalcDiff;
using testing::RandomMatrix;

// ref[i,j] = Σ_k a[i,k]·b[j,k] in double; absbound[i,j] = Σ_k |a||b| (for the FP32 error bound).
void ReferenceTN(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t n, int64_t k,
                 std::vector<double>& ref, std::vector<double>& abs_sum) {
  ref.assign(m * n, 0.0);
  abs_sum.assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, t = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double prod = double(a[i * k + p]) * b[j * k + p];
        s += prod;
        t += std::fabs(prod);
      }
      ref[i * n + j] = s;
      abs_sum[i * n + j] = t;
    }
}

// FP32 accumulation of k terms: |error| ≤ ~k·eps·Σ|ab| (generous, deterministic bound).
void ExpectCloseToReference(const std::vector<float>& c, const std::vector<double>& ref,
                            const std::vector<double>& abs_sum, int64_t k) {
  EXPECT_LT(CalcDiff(c, ref), 1e-3);
  const double eps = std::numeric_limits<float>::epsilon();
  int bad = 0;
  for (size_t i = 0; i < c.size(); ++i) bad += !(std::fabs(c[i] - ref[i]) <= (k + 2) * eps * abs_sum[i] + 1e-30);
  EXPECT_EQ(bad, 0);
}

TEST(GemmFp8, TensorwiseMatchesDequantizedProduct) {
  for (auto [fa, fb] : {std::pair{Fp8Format::kE4M3, Fp8Format::kE4M3}, std::pair{Fp8Format::kE5M2, Fp8Format::kE4M3}}) {
    const int64_t m = 67, n = 45, k = 200;
    const auto a = RandomMatrix(m, k, 1), b = RandomMatrix(n, k, 2);
    const float sa = ScaleInvFromAmax(Amax(a.data(), m * k), fa, ScaleFormat::kFp32);
    const float sb = ScaleInvFromAmax(Amax(b.data(), n * k), fb, ScaleFormat::kFp32);
    std::vector<uint8_t> qa(a.size()), qb(b.size());
    QuantizeTensor(a.data(), m * k, sa, fa, qa.data());
    QuantizeTensor(b.data(), n * k, sb, fb, qb.data());
    std::vector<float> da(a.size()), db(b.size()), c(m * n);
    DequantizeTensor(qa.data(), m * k, sa, fa, da.data());
    DequantizeTensor(qb.data(), n * k, sb, fb, db.data());
    ASSERT_TRUE(GemmFp8Tensorwise(qa.data(), fa, sa, qb.data(), fb, sb, m, n, k, c.data()).ok());
    std::vector<double> ref, abs_sum;
    ReferenceTN(da, db, m, n, k, ref, abs_sum);
    ExpectCloseToReference(c, ref, abs_sum, k);
    // And the product of the quantized inputs is close to the unquantized one (sanity of recipe).
    std::vector<double> exact, unused;
    ReferenceTN(a, b, m, n, k, exact, unused);
    EXPECT_LT(CalcDiff(c, exact), fa == Fp8Format::kE4M3 ? 2e-3 : 8e-3);
  }
}

TEST(GemmFp8, BlockwiseMatchesDequantizedProduct) {
  struct Case {
    int64_t m, n, k;
  };
  for (Case cs : {Case{130, 200, 384}, Case{1, 129, 128}, Case{64, 256, 256}})
    for (ScaleFormat sf : {ScaleFormat::kFp32, ScaleFormat::kUe8m0}) {
      SCOPED_TRACE(std::to_string(cs.m) + "x" + std::to_string(cs.n) + "x" + std::to_string(cs.k));
      const int64_t m = cs.m, n = cs.n, k = cs.k;
      const auto a = RandomMatrix(m, k, 3), b = RandomMatrix(n, k, 4, 0.02f);
      std::vector<uint8_t> qa(a.size()), qb(b.size());
      std::vector<float> sa(m * (k / 128)), sb(CeilDiv(n, 128) * (k / 128));
      ASSERT_TRUE(Quantize1x128(a.data(), m, k, Fp8Format::kE4M3, sf, qa.data(), sa.data()).ok());
      ASSERT_TRUE(Quantize128x128(b.data(), n, k, Fp8Format::kE4M3, sf, qb.data(), sb.data()).ok());
      std::vector<float> da(a.size()), db(b.size()), c(m * n, std::numeric_limits<float>::quiet_NaN());
      ASSERT_TRUE(Dequantize1x128(qa.data(), sa.data(), m, k, Fp8Format::kE4M3, da.data()).ok());
      ASSERT_TRUE(Dequantize128x128(qb.data(), sb.data(), n, k, Fp8Format::kE4M3, db.data()).ok());
      ASSERT_TRUE(GemmFp8Blockwise(qa.data(), Fp8Format::kE4M3, sa.data(), qb.data(), Fp8Format::kE4M3, sb.data(), m, n,
                                   k, c.data()).ok());
      std::vector<double> ref, abs_sum;
      ReferenceTN(da, db, m, n, k, ref, abs_sum);
      ExpectCloseToReference(c, ref, abs_sum, k);
    }
}

TEST(GemmFp8, BlockwiseRejectsKNotMultipleOf128) {
  std::vector<uint8_t> a(100), b(100);
  std::vector<float> s(4, 1.0f), c(1);
  const Status st = GemmFp8Blockwise(a.data(), Fp8Format::kE4M3, s.data(), b.data(), Fp8Format::kE4M3, s.data(), 1, 1,
                                     100, c.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("k=100"), std::string::npos) << st.message();
  EXPECT_EQ(GemmFp8Tensorwise(a.data(), Fp8Format::kE4M3, 1, b.data(), Fp8Format::kE4M3, 1, -1, 1, 1, c.data()).code(),
            StatusCode::kInvalidArgument);
}

// Naive C = alpha·op(A)·op(B) + beta·C in double, row-major with leading dimensions.
std::vector<double> NaiveSgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const std::vector<float>& a,
                               int64_t lda, const std::vector<float>& b, int64_t ldb, float beta,
                               const std::vector<float>& c, int64_t ldc, std::vector<double>& abs_sum) {
  std::vector<double> out(c.begin(), c.end());
  abs_sum.assign(c.size(), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, t = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        s += av * bv;
        t += std::fabs(av * bv);
      }
      const double old = c[i * ldc + j];
      out[i * ldc + j] = alpha * s + (beta == 0.0f ? 0.0 : beta * old);
      abs_sum[i * ldc + j] = std::fabs(alpha) * t + (beta == 0.0f ? 0.0 : std::fabs(beta * old));
    }
  return out;
}

void RunSgemmCases() {
  struct Case {
    int64_t m, n, k;
    float alpha, beta;
  };
  const Case cases[] = {{1, 1, 1, 1.0f, 0.0f},      {7, 13, 5, 0.5f, -1.5f},  {67, 129, 300, 1.0f, 1.0f},
                        {300, 7, 513, -2.0f, 0.0f}, {6, 16, 256, 1.0f, 0.0f}, {150, 170, 260, 0.25f, 0.75f},
                        {5, 3, 0, 1.0f, 2.0f}};
  for (const Case& cs : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(std::string(SgemmKernelName()) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " " +
                     std::to_string(cs.m) + "x" + std::to_string(cs.n) + "x" + std::to_string(cs.k));
        // Leading dimensions larger than the rows they hold: strides must be honoured.
        const int64_t lda = (ta ? cs.m : cs.k) + 3, ldb = (tb ? cs.k : cs.n) + 2, ldc = cs.n + 5;
        const auto a = RandomMatrix(ta ? cs.k : cs.m, lda, 11), b = RandomMatrix(tb ? cs.n : cs.k, ldb, 12);
        auto c = RandomMatrix(cs.m, ldc, 13);
        // beta == 0 must not read C: poison it with NaN.
        if (cs.beta == 0.0f) std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
        std::vector<double> abs_sum;
        const auto ref = NaiveSgemm(ta, tb, cs.m, cs.n, cs.k, cs.alpha, a, lda, b, ldb, cs.beta, c, ldc, abs_sum);
        Sgemm(ta, tb, cs.m, cs.n, cs.k, cs.alpha, a.data(), lda, b.data(), ldb, cs.beta, c.data(), ldc);
        const double eps = std::numeric_limits<float>::epsilon();
        int bad = 0;
        for (int64_t i = 0; i < cs.m; ++i)
          for (int64_t j = 0; j < cs.n; ++j) {
            const int64_t idx = i * ldc + j;
            bad += !(std::fabs(c[idx] - ref[idx]) <= (cs.k + 4) * eps * abs_sum[idx] + 1e-30);
          }
        EXPECT_EQ(bad, 0);
      }
}

TEST(Sgemm, MatchesNaiveReferenceWithDefaultKernel) {
  SetSgemmKernel(SgemmKernel::kAuto);
  RunSgemmCases();
}

TEST(Sgemm, MatchesNaiveReferenceWithPortableKernel) {
  SetSgemmKernel(SgemmKernel::kGeneric);
  EXPECT_STREQ(SgemmKernelName(), "generic-sse");
  RunSgemmCases();
  SetSgemmKernel(SgemmKernel::kAuto);
}

TEST(Sgemm, MatchesNaiveReferenceWithAvx2KernelWhereAvailable) {
  SetSgemmKernel(SgemmKernel::kAvx2);
  if (std::string(SgemmKernelName()) != "avx2-fma") {
    SetSgemmKernel(SgemmKernel::kAuto);
    GTEST_SKIP() << "CPU has no AVX2+FMA";
  }
  RunSgemmCases();
  SetSgemmKernel(SgemmKernel::kAuto);
}

TEST(Sgemm, ResultDoesNotDependOnHowCIsSplit) {
  // Threads get strips of C, so an element may sit in a full micro-tile in one split and in an
  // edge tile in another: both paths must round identically. Emulate other splits by computing
  // C in pieces through pointer offsets and compare bit for bit.
  for (SgemmKernel kern : {SgemmKernel::kGeneric, SgemmKernel::kAvx2}) {
    SetSgemmKernel(kern);
    const int64_t m = 97, n = 75, k = 300;
    const auto a = RandomMatrix(m, k, 41), b = RandomMatrix(n, k, 42);
    const auto c0 = RandomMatrix(m, n, 43);
    auto whole = c0;
    Sgemm(false, true, m, n, k, 0.7f, a.data(), k, b.data(), k, -0.3f, whole.data(), n);
    auto pieces = c0;
    for (int64_t i0 : {int64_t{0}, int64_t{37}}) {
      const int64_t rows = i0 == 0 ? 37 : m - 37;
      for (int64_t j0 : {int64_t{0}, int64_t{11}, int64_t{50}}) {
        const int64_t cols = j0 == 0 ? 11 : (j0 == 11 ? 39 : n - 50);
        Sgemm(false, true, rows, cols, k, 0.7f, a.data() + i0 * k, k, b.data() + j0 * k, k, -0.3f,
              pieces.data() + i0 * n + j0, n);
      }
    }
    EXPECT_EQ(whole, pieces) << SgemmKernelName();
  }
  SetSgemmKernel(SgemmKernel::kAuto);
}

TEST(Sgemm, LargeProductIsDeterministic) {
  // Runs on the thread pool; a second run must reproduce the first bit for bit.
  const int64_t m = 256, n = 320, k = 384;
  const auto a = RandomMatrix(m, k, 21), b = RandomMatrix(k, n, 22);
  std::vector<float> c1(m * n), c2(m * n);
  Sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c1.data(), n);
  Sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c2.data(), n);
  EXPECT_EQ(c1, c2);
}

}  // namespace
}  // namespace fp8::kernels
