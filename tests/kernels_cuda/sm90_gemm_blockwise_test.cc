// SPDX-License-Identifier: Apache-2.0
// The own sm_90a blockwise FP8 GEMM (Sm90GemmFp8Blockwise) against the CPU reference
// (kernels/gemm.h GemmFp8Blockwise, FP32 promotion per K block) and against the cuBLASLt
// blockwise path, by DeepSeek's calc_diff < 1e-3, on fresh random inputs; every block tile
// tile; M not a multiple of 128; each (N, K) of issue #3; split-K bitwise reproducible.
// Outputs start poisoned (NaN), so an unwritten element fails, and rows past M must stay
// untouched.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include "kernels/cuda/sm90_fp8_gemm_blockwise.h"
#include "kernels/cuda/sm90_fp8_gemm_cublaslt.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/gemm.h"
#include "kernels/quantize.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace fp8::kernels::cuda {
namespace {

using testing::DeviceBuffer;

constexpr double kMaxCalcDiff = 1e-3;
constexpr Sm90BlockwiseGemmTile kAllTiles[] = {
    Sm90BlockwiseGemmTile::kAuto,          Sm90BlockwiseGemmTile::kN128ScalesTma6Stages,
    Sm90BlockwiseGemmTile::kN64ScalesTma,  Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints,
    Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints, Sm90BlockwiseGemmTile::kN128SplitK4,
    Sm90BlockwiseGemmTile::kN128SplitK8,   Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma,
    Sm90BlockwiseGemmTile::kM256N128MulticastA};
constexpr Sm90BlockwiseGemmTile kSplitKTiles[] = {
    Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints, Sm90BlockwiseGemmTile::kN128SplitK4,
    Sm90BlockwiseGemmTile::kN128SplitK8, Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma};

std::string TileName(Sm90BlockwiseGemmTile tile) {
  switch (tile) {
    case Sm90BlockwiseGemmTile::kAuto: return "auto";
    case Sm90BlockwiseGemmTile::kN128ScalesTma6Stages: return "N128-scales-TMA-6-stages";
    case Sm90BlockwiseGemmTile::kN64ScalesTma: return "N64-scales-TMA";
    case Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints: return "N64-scales-TMA-L2-hints";
    case Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints: return "N128-split-K-2-scales-TMA-L2-hints";
    case Sm90BlockwiseGemmTile::kN128SplitK4: return "N128-split-K-4";
    case Sm90BlockwiseGemmTile::kN128SplitK8: return "N128-split-K-8";
    case Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma: return "N64-split-K-2-scales-TMA";
    case Sm90BlockwiseGemmTile::kM256N128MulticastA: return "M256-N128-multicast-A";
  }
  return "?";
}

// Operands of one GEMM on the host, in the CPU reference's layouts: A [M, K] and B [N, K] E4M3,
// a_scale [M, K/128] and b_scale [N/128, K/128] row-major.
struct Operands {
  int64_t m, n, k;
  std::vector<uint8_t> a, b;
  std::vector<float> a_scale, b_scale;
};

// Small shapes: real quantization of random floats (CPU reference quantizer). Large shapes:
// random E4M3 bytes (NaN codes excluded) and random power-of-two-ish scales — generating and
// quantizing ~10^8 floats on the host would dominate the test's time.
Operands MakeOperands(int64_t m, int64_t n, int64_t k, std::mt19937_64& rng) {
  Operands op{m, n, k, std::vector<uint8_t>(m * k), std::vector<uint8_t>(n * k),
              std::vector<float>(m * (k / 128)), std::vector<float>((n / 128) * (k / 128))};
  if (n * k <= (1 << 20)) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> a = testing::RandomFloats(m * k, rng), b(n * k);
    for (auto& x : b) x = normal(rng);
    FP8_CHECK_OK(Quantize1x128(a.data(), m, k, Fp8Format::kE4M3, ScaleFormat::kFp32, op.a.data(), op.a_scale.data()));
    FP8_CHECK_OK(Quantize128x128(b.data(), n, k, Fp8Format::kE4M3, ScaleFormat::kFp32, op.b.data(), op.b_scale.data()));
    return op;
  }
  auto fill_bytes = [&](std::vector<uint8_t>& v) {
    for (size_t i = 0; i < v.size(); i += 8) {
      uint64_t r = rng();
      for (size_t j = i; j < std::min(v.size(), i + 8); ++j, r >>= 8) {
        const uint8_t byte = static_cast<uint8_t>(r);
        v[j] = (byte & 0x7F) == 0x7F ? byte ^ 0x01 : byte;  // 0x7F/0xFF are E4M3 NaN
      }
    }
  };
  fill_bytes(op.a);
  fill_bytes(op.b);
  std::uniform_real_distribution<float> e(-12.0f, -4.0f);
  for (auto& s : op.a_scale) s = std::exp2(e(rng));
  for (auto& s : op.b_scale) s = std::exp2(e(rng));
  return op;
}

// The operands on the device, scales in the layouts both GPU GEMMs read (M-major A scales,
// B scale rows padded to Sm90BlockScaleLd(K)).
// `scale_offset` floats in (1: scale arrays not 16-byte aligned, so the launcher reads them with
// __ldg instead of copying them through the pipeline).
struct DeviceOperands {
  explicit DeviceOperands(const Operands& op, int64_t scale_offset = 0)
      : a(op.a), b(op.b), a_scale(op.m * (op.k / 128) + scale_offset),
        b_scale((op.n / 128) * Sm90BlockScaleLd(op.k) + scale_offset), offset(scale_offset) {
    const int64_t kb = op.k / 128, ld = Sm90BlockScaleLd(op.k);
    std::vector<float> sa_mn(op.m * kb), sb_ld((op.n / 128) * ld, 0.0f);
    for (int64_t i = 0; i < op.m; ++i)
      for (int64_t j = 0; j < kb; ++j) sa_mn[j * op.m + i] = op.a_scale[i * kb + j];
    for (int64_t i = 0; i < op.n / 128; ++i)
      for (int64_t j = 0; j < kb; ++j) sb_ld[i * ld + j] = op.b_scale[i * kb + j];
    FP8_CHECK_CUDA(cudaMemcpy(a_scales(), sa_mn.data(), sa_mn.size() * 4, cudaMemcpyHostToDevice));
    FP8_CHECK_CUDA(cudaMemcpy(b_scales(), sb_ld.data(), sb_ld.size() * 4, cudaMemcpyHostToDevice));
  }
  float* a_scales() const { return a_scale.get() + offset; }
  float* b_scales() const { return b_scale.get() + offset; }
  DeviceBuffer<uint8_t> a, b;
  DeviceBuffer<float> a_scale, b_scale;
  int64_t offset;
};

// CPU reference for rows [r0, r1) only (the big shapes check a head and the tail tile).
std::vector<double> CpuReferenceRows(const Operands& op, int64_t r0, int64_t r1) {
  const int64_t kb = op.k / 128;
  std::vector<float> c((r1 - r0) * op.n);
  FP8_CHECK_OK(GemmFp8Blockwise(op.a.data() + r0 * op.k, Fp8Format::kE4M3, op.a_scale.data() + r0 * kb,
                                op.b.data(), Fp8Format::kE4M3, op.b_scale.data(), r1 - r0, op.n, op.k, c.data()));
  return std::vector<double>(c.begin(), c.end());
}

std::vector<double> Bf16Rows(const std::vector<uint16_t>& d, int64_t n, int64_t r0, int64_t r1) {
  std::vector<double> out;
  out.reserve((r1 - r0) * n);
  for (int64_t i = r0 * n; i < r1 * n; ++i) out.push_back(Bf16ToFloat(d[i]));
  return out;
}

::testing::AssertionResult AllFinite(const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) return ::testing::AssertionFailure() << "element " << i << " is " << v[i];
  return ::testing::AssertionSuccess();
}

// Runs the own kernel into a D with 64 extra poisoned rows; checks those stay poisoned.
std::vector<uint16_t> RunOwn(const DeviceOperands& dev, int64_t m, int64_t n, int64_t k, Sm90BlockwiseGemmTile tile) {
  DeviceBuffer<uint16_t> d((m + 64) * n);
  const Status st = Sm90GemmFp8Blockwise(dev.a.get(), dev.a_scales(), dev.b.get(), dev.b_scales(), m, n, k,
                                         reinterpret_cast<__nv_bfloat16*>(d.get()), nullptr, tile);
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<uint16_t> out = d.ToHost();
  FP8_CHECK_CUDA(cudaGetLastError());
  size_t touched = 0;
  for (int64_t i = m * n; i < (m + 64) * n; ++i) touched += out[i] != 0xFFFF;
  EXPECT_EQ(touched, 0u) << "elements written past row M";
  out.resize(m * n);
  return out;
}

size_t DifferingElements(const std::vector<uint16_t>& x, const std::vector<uint16_t>& y) {
  size_t differing = 0;
  for (size_t i = 0; i < x.size(); ++i) differing += x[i] != y[i];
  return differing;
}

class Sm90GemmBlockwiseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FP8_SKIP_WITHOUT_GPU();
    seed_ = testing::TestSeed();
  }
  uint64_t seed_ = 0;
};

// Full outputs against the CPU reference: several K-block counts (1, odd and even: the double
// buffer's tails), M below, at and past one 128-row tile, more tiles than SMs (CTAs that run
// several tiles, also with a single K block: the epilogue-overlap variants' tile hand-over).
// Split-K: K ranges of unequal length (9 K blocks over 2, 4, 8 CTAs; 3 over 2), more clusters
// than fit at once (1100 x 2304), and fewer K blocks than the split (the kN128 fallback).
TEST_F(Sm90GemmBlockwiseTest, MatchesCpuReferenceOnSmallShapes) {
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 128}, {256, 384, 512},
                         {200, 256, 640}, {130, 512, 1152}, {17, 2048, 256}, {1100, 2304, 384},
                         {520, 4608, 128}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                 " seed=" + std::to_string(seed_));
    std::mt19937_64 rng(seed_ + m * 31 + n);
    const Operands op = MakeOperands(m, n, k, rng);
    const DeviceOperands dev(op);
    const std::vector<double> ref = CpuReferenceRows(op, 0, m);
    for (Sm90BlockwiseGemmTile tile : kAllTiles) {
      SCOPED_TRACE(TileName(tile));
      const std::vector<double> got = Bf16Rows(RunOwn(dev, m, n, k, tile), n, 0, m);
      ASSERT_TRUE(AllFinite(got));
      EXPECT_LT(testing::CalcDiff(ref, got), kMaxCalcDiff);
    }
  }
}

// Issue #3's (N, K) with M = 200 (a partial second row tile): the whole output against the
// cuBLASLt blockwise GEMM on the same device buffers, and the first 8 rows and the partial tail
// tile against the CPU reference.
TEST_F(Sm90GemmBlockwiseTest, MatchesCublasLtAndCpuOnIssueShapes) {
  auto ctx = Sm90CublasLtContext::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const int64_t m = 200;
  for (auto [n, k] : {std::pair<int64_t, int64_t>{7168, 16384}, {4096, 7168}, {7168, 2048}, {24576, 1536}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                 " seed=" + std::to_string(seed_));
    std::mt19937_64 rng(seed_ + n + k);
    const Operands op = MakeOperands(m, n, k, rng);
    const DeviceOperands dev(op);
    DeviceBuffer<uint16_t> c(m * n);
    const Status st = Sm90GemmFp8BlockwiseCublasLt(**ctx, dev.a.get(), Fp8Format::kE4M3, dev.a_scale.get(), dev.b.get(),
                                                   Fp8Format::kE4M3, dev.b_scale.get(), m, n, k, c.get(),
                                                   Sm90GemmOut::kBf16, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    const std::vector<double> cublas = Bf16Rows(c.ToHost(), n, 0, m);
    ASSERT_TRUE(AllFinite(cublas));
    std::vector<double> ref = CpuReferenceRows(op, 0, 8);
    const std::vector<double> tail = CpuReferenceRows(op, 128, m);
    ref.insert(ref.end(), tail.begin(), tail.end());
    for (Sm90BlockwiseGemmTile tile : kAllTiles) {
      SCOPED_TRACE(TileName(tile));
      const std::vector<uint16_t> d = RunOwn(dev, m, n, k, tile);
      const std::vector<double> got = Bf16Rows(d, n, 0, m);
      ASSERT_TRUE(AllFinite(got));
      EXPECT_LT(testing::CalcDiff(cublas, got), kMaxCalcDiff) << "vs cuBLASLt";
      std::vector<double> rows = Bf16Rows(d, n, 0, 8);
      const std::vector<double> tail_rows = Bf16Rows(d, n, 128, m);
      rows.insert(rows.end(), tail_rows.begin(), tail_rows.end());
      EXPECT_LT(testing::CalcDiff(ref, rows), kMaxCalcDiff) << "vs CPU reference";
    }
  }
}

// Split-K sums the CTAs' partials in rank order, so two runs give the same bits (an order
// that depended on timing would differ between runs in the last bits); and they agree with
// the unsplit 128x128 tile. M = 128 on issue #3's shapes where kAuto splits K.
TEST_F(Sm90GemmBlockwiseTest, SplitKIsBitwiseReproducible) {
  const int64_t m = 128;
  for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 7168}, {7168, 2048}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " seed=" + std::to_string(seed_));
    std::mt19937_64 rng(seed_ + 7 * n + k);
    const Operands op = MakeOperands(m, n, k, rng);
    const DeviceOperands dev(op);
    const std::vector<double> unsplit = Bf16Rows(RunOwn(dev, m, n, k, Sm90BlockwiseGemmTile::kN128ScalesTma6Stages), n, 0, m);
    for (Sm90BlockwiseGemmTile tile : kSplitKTiles) {
      SCOPED_TRACE(TileName(tile));
      const std::vector<uint16_t> first = RunOwn(dev, m, n, k, tile);
      const std::vector<uint16_t> second = RunOwn(dev, m, n, k, tile);
      EXPECT_EQ(DifferingElements(first, second), 0u) << "elements that differ between two runs";
      const std::vector<double> got = Bf16Rows(first, n, 0, m);
      ASSERT_TRUE(AllFinite(got));
      EXPECT_LT(testing::CalcDiff(unsplit, got), kMaxCalcDiff) << "vs the unsplit tile";
    }
  }
}

// The scales-through-TMA kernels read the same scale floats (from shared memory instead of
// global) and promote in the same order as their __ldg twins, which the launcher runs when the
// scale arrays are not 16-byte aligned: same bits. Shapes: M = 1 and M % 128 != 0 (clipped last
// tile: a short A-scale copy, rows past M), several tiles per CTA (1100 x 2304, the scale ring
// wrapping across tiles), odd and single K-block counts, K-block counts not a multiple of 4
// (B-scale groups), split-K with unequal K ranges, and an issue shape. M % 4 != 0 (M = 1, 130)
// takes the __ldg path on both sides: still equal.
TEST_F(Sm90GemmBlockwiseTest, ScalesTmaTilesAreBitwiseEqualToLdgScales) {
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 384}, {4, 128, 128}, {200, 384, 1152},
                         {130, 512, 640}, {1100, 2304, 384}, {128, 4096, 7168}, {516, 1024, 2432}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                 " seed=" + std::to_string(seed_));
    std::mt19937_64 rng(seed_ + 13 * m + 5 * n + k);
    const Operands op = MakeOperands(m, n, k, rng);
    const DeviceOperands aligned(op), misaligned(op, 1);
    for (Sm90BlockwiseGemmTile tile : kAllTiles) {
      SCOPED_TRACE(TileName(tile));
      const std::vector<uint16_t> want = RunOwn(misaligned, m, n, k, tile);
      const std::vector<uint16_t> got = RunOwn(aligned, m, n, k, tile);
      EXPECT_EQ(DifferingElements(want, got), 0u) << "elements that differ from the __ldg scales";
      ASSERT_TRUE(AllFinite(Bf16Rows(got, n, 0, m)));
    }
  }
}

// The production pipeline: bf16 inputs quantized by the GPU kernels straight into the scale
// layouts the GEMM reads (MN-major 1x128, padded 128x128).
TEST_F(Sm90GemmBlockwiseTest, GpuQuantizedPipelineMatchesCpuReference) {
  const int64_t m = 300, n = 640, k = 896;
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  std::mt19937_64 rng(seed_);
  std::vector<uint16_t> a_bits, b_bits;
  std::vector<float> a, b;
  testing::ToBf16(testing::RandomFloats(m * k, rng), &a_bits, &a);
  testing::ToBf16(testing::RandomFloats(n * k, rng), &b_bits, &b);
  Operands op{m, n, k, std::vector<uint8_t>(m * k), std::vector<uint8_t>(n * k),
              std::vector<float>(m * (k / 128)), std::vector<float>((n / 128) * (k / 128))};
  ASSERT_TRUE(Quantize1x128(a.data(), m, k, Fp8Format::kE4M3, ScaleFormat::kFp32, op.a.data(), op.a_scale.data()).ok());
  ASSERT_TRUE(Quantize128x128(b.data(), n, k, Fp8Format::kE4M3, ScaleFormat::kFp32, op.b.data(), op.b_scale.data()).ok());
  const std::vector<double> ref = CpuReferenceRows(op, 0, m);

  DeviceBuffer<uint16_t> dA(a_bits), dB(b_bits);
  DeviceBuffer<uint8_t> qa(m * k), qb(n * k);
  DeviceBuffer<float> sa(m * (k / 128)), sb((n / 128) * Sm90BlockScaleLd(k));
  DeviceBuffer<uint16_t> d(m * n);
  ASSERT_TRUE(Sm90Fp8Quantize1x128(reinterpret_cast<const __nv_bfloat16*>(dA.get()), m, k, Fp8Format::kE4M3,
                                   ScaleFormat::kFp32, Sm90ScaleLayout::kMnMajor, qa.get(), sa.get(), nullptr).ok());
  ASSERT_TRUE(Sm90Fp8Quantize128x128(reinterpret_cast<const __nv_bfloat16*>(dB.get()), n, k, Fp8Format::kE4M3,
                                     ScaleFormat::kFp32, qb.get(), sb.get(), Sm90BlockScaleLd(k), nullptr).ok());
  const Status st = Sm90GemmFp8Blockwise(qa.get(), sa.get(), qb.get(), sb.get(), m, n, k,
                                         reinterpret_cast<__nv_bfloat16*>(d.get()), nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::vector<double> got = Bf16Rows(d.ToHost(), n, 0, m);
  ASSERT_TRUE(AllFinite(got));
  EXPECT_LT(testing::CalcDiff(ref, got), kMaxCalcDiff);
}

// ---- argument rules (no GPU needed: checked before any CUDA call) ------------------------------

void ExpectInvalidNaming(const Status& st, const std::string& what) {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
}

TEST(Sm90GemmBlockwiseShapes, AnyMButWholeBlocksOfNAndK) {
  EXPECT_TRUE(Sm90ValidateGemmFp8BlockwiseOwnShape(1, 128, 128).ok());
  EXPECT_TRUE(Sm90ValidateGemmFp8BlockwiseOwnShape(4097, 24576, 1536).ok());
  ExpectInvalidNaming(Sm90ValidateGemmFp8BlockwiseOwnShape(0, 128, 128), "m=0");
  ExpectInvalidNaming(Sm90ValidateGemmFp8BlockwiseOwnShape(128, 200, 128), "n=200");
  ExpectInvalidNaming(Sm90ValidateGemmFp8BlockwiseOwnShape(128, 128, 100), "k=100");
  ExpectInvalidNaming(Sm90ValidateGemmFp8BlockwiseOwnShape(128, 0, 128), "n=0");
}

TEST(Sm90GemmBlockwiseShapes, RejectsNullAndMisalignedPointersBeforeLaunching) {
  // Never dereferenced: the checks run before any CUDA call.
  auto* p = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
  auto* s = reinterpret_cast<float*>(uintptr_t{1} << 20);
  auto* d = reinterpret_cast<__nv_bfloat16*>(uintptr_t{1} << 20);
  ExpectInvalidNaming(Sm90GemmFp8Blockwise(nullptr, s, p, s, 128, 128, 128, d, nullptr), "null");
  ExpectInvalidNaming(Sm90GemmFp8Blockwise(p + 8, s, p, s, 128, 128, 128, d, nullptr), "16-byte aligned");
  ExpectInvalidNaming(Sm90GemmFp8Blockwise(p, s, p, s, 128, 130, 128, d, nullptr), "n=130");
}

}  // namespace
}  // namespace fp8::kernels::cuda
