// SPDX-License-Identifier: Apache-2.0
// The sm_90 quantization kernels against the CPU reference (kernels/quantize.h): bytes and
// scales must be bit-identical, for bf16 and fp32 inputs, both FP8 formats, both scale formats
// and both scale layouts, on shapes with partial edge tiles.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <limits>
#include <tuple>

#include "kernels/cuda/sm90_fp8_dequantize.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/cuda/sm90_fp8_quantize_transpose.h"
#include "kernels/cuda/sm90_fp8_tensor_quantize.h"
#include "kernels/quantize.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace fp8::kernels::cuda {
namespace {

using testing::BitsEqual;
using testing::DeviceBuffer;

enum class Input { kBf16, kFp32 };

// One random input in both forms: device data of the tested type and the exact floats the CPU
// reference sees.
struct TestInput {
  std::vector<float> exact;
  std::unique_ptr<DeviceBuffer<uint16_t>> bf16;
  std::unique_ptr<DeviceBuffer<float>> fp32;

  TestInput(Input type, size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<float> x = testing::RandomFloats(n, rng);
    if (type == Input::kBf16) {
      std::vector<uint16_t> bits;
      testing::ToBf16(x, &bits, &exact);
      bf16 = std::make_unique<DeviceBuffer<uint16_t>>(bits);
    } else {
      exact = x;
      fp32 = std::make_unique<DeviceBuffer<float>>(x);
    }
  }
  const __nv_bfloat16* b() const { return reinterpret_cast<const __nv_bfloat16*>(bf16->get()); }
};

// Calls `fn(x)` with the typed device pointer of `in`.
template <typename Fn>
Status WithTyped(const TestInput& in, Fn&& fn) {
  return in.bf16 ? fn(in.b()) : fn(static_cast<const float*>(in.fp32->get()));
}

// [rows, groups] row-major → [groups, rows] (the MN-major layout).
std::vector<float> ToMnMajor(const std::vector<float>& s, int64_t rows, int64_t groups) {
  std::vector<float> t(s.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) t[g * rows + r] = s[r * groups + g];
  return t;
}

std::string Name(Input in, Fp8Format f, ScaleFormat sf) {
  return std::string(in == Input::kBf16 ? "bf16" : "fp32") + "/" + Fp8FormatName(f) + "/" +
         (sf == ScaleFormat::kUe8m0 ? "ue8m0" : "fp32scale");
}

class Sm90QuantizeTest
    : public ::testing::TestWithParam<std::tuple<Input, Fp8Format, ScaleFormat>> {
 protected:
  void SetUp() override {
    FP8_SKIP_WITHOUT_GPU();
    seed_ = testing::TestSeed();
    RecordProperty("seed", std::to_string(seed_));
  }
  Input input() const { return std::get<0>(GetParam()); }
  Fp8Format fmt() const { return std::get<1>(GetParam()); }
  ScaleFormat sf() const { return std::get<2>(GetParam()); }
  std::string Trace() const { return Name(input(), fmt(), sf()) + " seed=" + std::to_string(seed_); }
  uint64_t seed_ = 0;
};

TEST_P(Sm90QuantizeTest, Quantize1x128MatchesCpuInBothLayouts) {
  SCOPED_TRACE(Trace());
  // 1072 = 8·128 + 48: a partial last tile in every row. 19 x 9008: 71 groups a row (the last
  // 8-group tile column partial), rows not a multiple of the tiles' 8. 524296 rows: more 8-row
  // tiles than a grid's y dimension takes, so the launcher falls back to the memory-order kernel.
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{257, 1072}, {1024, 2048}, {19, 9008}, {524296, 16}}) {
    const int64_t groups = CeilDiv(cols, 128);
    TestInput in(input(), rows * cols, seed_ + rows);
    std::vector<uint8_t> q_ref(rows * cols);
    std::vector<float> s_ref(rows * groups);
    ASSERT_TRUE(Quantize1x128(in.exact.data(), rows, cols, fmt(), sf(), q_ref.data(), s_ref.data()).ok());
    for (Sm90ScaleLayout layout : {Sm90ScaleLayout::kRowMajor, Sm90ScaleLayout::kMnMajor}) {
      DeviceBuffer<uint8_t> q(rows * cols);
      DeviceBuffer<float> s(rows * groups);
      Status st = WithTyped(in, [&](auto* x) {
        return Sm90Fp8Quantize1x128(x, rows, cols, fmt(), sf(), layout, q.get(), s.get(), nullptr);
      });
      ASSERT_TRUE(st.ok()) << st.ToString();
      const bool mn = layout == Sm90ScaleLayout::kMnMajor;
      EXPECT_TRUE(BitsEqual(q_ref, q.ToHost(), "q"));
      EXPECT_TRUE(BitsEqual(mn ? ToMnMajor(s_ref, rows, groups) : s_ref, s.ToHost(),
                            mn ? "scale_inv (MN-major)" : "scale_inv"));
    }
  }
}

TEST_P(Sm90QuantizeTest, Quantize128x128MatchesCpuWithAndWithoutPaddedScaleRows) {
  SCOPED_TRACE(Trace());
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{300, 400}, {512, 1024}}) {
    const int64_t rb = CeilDiv(rows, 128), cb = CeilDiv(cols, 128);
    TestInput in(input(), rows * cols, seed_ + rows);
    std::vector<uint8_t> q_ref(rows * cols);
    std::vector<float> s_ref(rb * cb);
    ASSERT_TRUE(Quantize128x128(in.exact.data(), rows, cols, fmt(), sf(), q_ref.data(), s_ref.data()).ok());
    for (int64_t ld : {cb, Sm90BlockScaleLd(cols)}) {
      DeviceBuffer<uint8_t> q(rows * cols);
      DeviceBuffer<float> s(rb * ld);
      Status st = WithTyped(in, [&](auto* x) {
        return Sm90Fp8Quantize128x128(x, rows, cols, fmt(), sf(), q.get(), s.get(), ld, nullptr);
      });
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_TRUE(BitsEqual(q_ref, q.ToHost(), "q"));
      std::vector<float> s_got = s.ToHost(), s_dense(rb * cb);
      for (int64_t r = 0; r < rb; ++r)
        for (int64_t c = 0; c < cb; ++c) s_dense[r * cb + c] = s_got[r * ld + c];
      EXPECT_TRUE(BitsEqual(s_ref, s_dense, "scale_inv ld=" + std::to_string(ld)));
    }
  }
}

// 128x128 with the transposed output: qt and its scales bit for bit the CPU quantization of xᵀ,
// q (when asked for) that of x, and for bf16 the 1x128 tiles of x from the same pass;
// (272, 400): partial blocks in both directions.
TEST_P(Sm90QuantizeTest, Quantize128x128WithTransposeMatchesCpuOfTheTranspose) {
  SCOPED_TRACE(Trace());
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{272, 400}, {512, 1024}}) {
    const int64_t rb = CeilDiv(rows, 128), cb = CeilDiv(cols, 128);
    TestInput in(input(), rows * cols, seed_ + rows + 7);
    std::vector<float> xt(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) xt[c * rows + r] = in.exact[r * cols + c];
    std::vector<uint8_t> q_ref(rows * cols), qt_ref(rows * cols);
    std::vector<float> s_ref(rb * cb), st_ref(cb * rb);
    ASSERT_TRUE(Quantize128x128(in.exact.data(), rows, cols, fmt(), sf(), q_ref.data(), s_ref.data()).ok());
    ASSERT_TRUE(Quantize128x128(xt.data(), cols, rows, fmt(), sf(), qt_ref.data(), st_ref.data()).ok());
    for (bool with_q : {false, true}) {
      const int64_t ld = Sm90BlockScaleLd(cols), ld_t = Sm90BlockScaleLd(rows);
      DeviceBuffer<uint8_t> q(rows * cols), qt(rows * cols);
      DeviceBuffer<float> s(rb * ld), st(cb * ld_t);
      Status status = WithTyped(in, [&](auto* x) {
        return Sm90Fp8Quantize128x128WithTranspose(x, rows, cols, fmt(), sf(), with_q ? q.get() : nullptr, s.get(), ld, qt.get(),
                                                   st.get(), ld_t, nullptr);
      });
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_TRUE(BitsEqual(qt_ref, qt.ToHost(), "qt"));
      std::vector<float> st_got = st.ToHost(), st_dense(cb * rb);
      for (int64_t r = 0; r < cb; ++r)
        for (int64_t c = 0; c < rb; ++c) st_dense[r * rb + c] = st_got[r * ld_t + c];
      EXPECT_TRUE(BitsEqual(st_ref, st_dense, "scale_inv_t"));
      if (with_q) {
        EXPECT_TRUE(BitsEqual(q_ref, q.ToHost(), "q"));
        std::vector<float> s_got = s.ToHost(), s_dense(rb * cb);
        for (int64_t r = 0; r < rb; ++r)
          for (int64_t c = 0; c < cb; ++c) s_dense[r * cb + c] = s_got[r * ld + c];
        EXPECT_TRUE(BitsEqual(s_ref, s_dense, "scale_inv"));
      }
    }
    if (!in.bf16) continue;
    // bf16 activations: the 1x128 tiles (MN-major scales) and xᵀ's 128x128 blocks from one read.
    std::vector<uint8_t> q1_ref(rows * cols);
    std::vector<float> s1_ref(rows * cb);
    ASSERT_TRUE(Quantize1x128(in.exact.data(), rows, cols, fmt(), sf(), q1_ref.data(), s1_ref.data()).ok());
    const int64_t ld_t = Sm90BlockScaleLd(rows);
    DeviceBuffer<uint8_t> q1(rows * cols), qt(rows * cols);
    DeviceBuffer<float> s1(rows * cb), st(cb * ld_t);
    const Status status = Sm90Fp8Quantize1x128AndTransposed128x128(in.b(), rows, cols, fmt(), sf(), q1.get(), s1.get(), qt.get(), st.get(),
                                                                  ld_t, nullptr);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_TRUE(BitsEqual(q1_ref, q1.ToHost(), "q1"));
    EXPECT_TRUE(BitsEqual(ToMnMajor(s1_ref, rows, cb), s1.ToHost(), "scale1 (MN-major)"));
    EXPECT_TRUE(BitsEqual(qt_ref, qt.ToHost(), "qt (with q1)"));
  }
}

TEST_P(Sm90QuantizeTest, FusedTransposeMatchesCpu) {
  SCOPED_TRACE(Trace());
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{272, 400}, {512, 1024}}) {
    const int64_t cg = CeilDiv(cols, 128), rg = CeilDiv(rows, 128);
    TestInput in(input(), rows * cols, seed_ + rows);
    std::vector<uint8_t> q_ref(rows * cols), qt_ref(rows * cols);
    std::vector<float> s_ref(rows * cg), st_ref(cols * rg);
    ASSERT_TRUE(Quantize1x128WithTranspose(in.exact.data(), rows, cols, fmt(), sf(), q_ref.data(),
                                           s_ref.data(), qt_ref.data(), st_ref.data()).ok());
    for (Sm90ScaleLayout layout : {Sm90ScaleLayout::kRowMajor, Sm90ScaleLayout::kMnMajor}) {
      DeviceBuffer<uint8_t> q(rows * cols), qt(rows * cols);
      DeviceBuffer<float> s(rows * cg), st(cols * rg);
      Status status = WithTyped(in, [&](auto* x) {
        return Sm90Fp8Quantize1x128WithTranspose(x, rows, cols, fmt(), sf(), layout, q.get(), s.get(),
                                                 qt.get(), st.get(), nullptr);
      });
      ASSERT_TRUE(status.ok()) << status.ToString();
      const bool mn = layout == Sm90ScaleLayout::kMnMajor;
      EXPECT_TRUE(BitsEqual(q_ref, q.ToHost(), "q"));
      EXPECT_TRUE(BitsEqual(qt_ref, qt.ToHost(), "qt"));
      EXPECT_TRUE(BitsEqual(mn ? ToMnMajor(s_ref, rows, cg) : s_ref, s.ToHost(), "scale_inv"));
      EXPECT_TRUE(BitsEqual(mn ? ToMnMajor(st_ref, cols, rg) : st_ref, st.ToHost(), "scale_inv_t"));
    }
  }
}

// The bf16 transposing casts (the lean kernel of sm90_fp8_quantize_transpose.cuh) on a shape with
// partial tiles in both directions (528 = 4·128 + 16 rows, 656 = 5·128 + 16 columns), MN-major
// scales as the trainer takes them.
TEST_P(Sm90QuantizeTest, TransposingCastsMatchCpuOnPartialTiles) {
  if (input() != Input::kBf16) GTEST_SKIP() << "the lean transposing kernels are bf16 only";
  SCOPED_TRACE(Trace());
  const int64_t rows = 528, cols = 656, cg = CeilDiv(cols, 128), rg = CeilDiv(rows, 128);
  TestInput in(input(), rows * cols, seed_ + 11);
  std::vector<float> xt(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[c * rows + r] = in.exact[r * cols + c];
  std::vector<uint8_t> q_ref(rows * cols), qt_ref(rows * cols), qt128_ref(rows * cols);
  std::vector<float> s_ref(rows * cg), st_ref(cols * rg), st128_ref(cg * rg);
  ASSERT_TRUE(Quantize1x128WithTranspose(in.exact.data(), rows, cols, fmt(), sf(), q_ref.data(), s_ref.data(),
                                         qt_ref.data(), st_ref.data()).ok());
  ASSERT_TRUE(Quantize128x128(xt.data(), cols, rows, fmt(), sf(), qt128_ref.data(), st128_ref.data()).ok());
  const int64_t ld_t = Sm90BlockScaleLd(rows);
  DeviceBuffer<uint8_t> q(rows * cols), qt(rows * cols);
  DeviceBuffer<float> s(rows * cg), st(cols * rg);
  Status status = Sm90Fp8Quantize1x128WithTranspose(in.b(), rows, cols, fmt(), sf(), Sm90ScaleLayout::kMnMajor, q.get(), s.get(),
                                                    qt.get(), st.get(), nullptr);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_TRUE(BitsEqual(q_ref, q.ToHost(), "q"));
  EXPECT_TRUE(BitsEqual(qt_ref, qt.ToHost(), "qt"));
  EXPECT_TRUE(BitsEqual(ToMnMajor(s_ref, rows, cg), s.ToHost(), "scale_inv (MN-major)"));
  EXPECT_TRUE(BitsEqual(ToMnMajor(st_ref, cols, rg), st.ToHost(), "scale_inv_t (MN-major)"));

  DeviceBuffer<uint8_t> q1(rows * cols), qt128(rows * cols);
  DeviceBuffer<float> s1(rows * cg), st128(cg * ld_t);
  status = Sm90Fp8Quantize1x128AndTransposed128x128(in.b(), rows, cols, fmt(), sf(), q1.get(), s1.get(), qt128.get(), st128.get(),
                                                    ld_t, nullptr);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_TRUE(BitsEqual(q_ref, q1.ToHost(), "q1"));
  EXPECT_TRUE(BitsEqual(ToMnMajor(s_ref, rows, cg), s1.ToHost(), "scale1 (MN-major)"));
  EXPECT_TRUE(BitsEqual(qt128_ref, qt128.ToHost(), "qt (128x128)"));
  std::vector<float> st_got = st128.ToHost(), st_dense(cg * rg);
  for (int64_t j = 0; j < cg; ++j)
    for (int64_t i = 0; i < rg; ++i) st_dense[j * rg + i] = st_got[j * ld_t + i];
  EXPECT_TRUE(BitsEqual(st128_ref, st_dense, "scale_inv_t (128x128)"));
}

TEST_P(Sm90QuantizeTest, TensorCastAndAmaxMatchCpu) {
  if (sf() == ScaleFormat::kUe8m0) GTEST_SKIP() << "per-tensor cast takes its scale as given";
  SCOPED_TRACE(Trace());
  const int64_t n = 100003;  // not a multiple of the vector width: exercises the tail
  TestInput in(input(), n, seed_);
  const float amax_cpu = Amax(in.exact.data(), n);
  // A scale that saturates the largest values, as a stale delayed-scaling scale can.
  const float scale_inv = ScaleInvFromAmax(amax_cpu * 0.5f, fmt(), ScaleFormat::kFp32);
  std::vector<uint8_t> q_ref(n);
  const float amax_ref = QuantizeTensor(in.exact.data(), n, scale_inv, fmt(), q_ref.data());
  DeviceBuffer<float> d_scale(std::vector<float>{scale_inv});
  DeviceBuffer<float> d_amax(1), d_amax_only(1);
  DeviceBuffer<uint8_t> q(n);
  Status st = WithTyped(in, [&](auto* x) {
    return Sm90Fp8QuantizeTensor(x, n, d_scale.get(), fmt(), q.get(), d_amax.get(), nullptr);
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = WithTyped(in, [&](auto* x) { return Sm90Amax(x, n, d_amax_only.get(), nullptr); });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(BitsEqual(q_ref, q.ToHost(), "q"));
  EXPECT_TRUE(BitsEqual(std::vector<float>{amax_ref}, d_amax.ToHost(), "amax (fused)"));
  EXPECT_TRUE(BitsEqual(std::vector<float>{amax_cpu}, d_amax_only.ToHost(), "amax"));
}

INSTANTIATE_TEST_SUITE_P(
    AllInputsFormatsScales, Sm90QuantizeTest,
    ::testing::Combine(::testing::Values(Input::kBf16, Input::kFp32),
                       ::testing::Values(Fp8Format::kE4M3, Fp8Format::kE5M2),
                       ::testing::Values(ScaleFormat::kFp32, ScaleFormat::kUe8m0)),
    [](const auto& info) {
      std::string n = Name(std::get<0>(info.param), std::get<1>(info.param), std::get<2>(info.param));
      for (char& c : n) if (c == '/') c = '_';
      return n;
    });

// Non-finite and extreme inputs: NaN propagates into its tile's scale, ±Inf and huge values
// saturate, tiny values round into FP8 subnormals or to zero — as on the CPU.
TEST(Sm90QuantizeSpecialValues, MatchCpuBitForBit) {
  FP8_SKIP_WITHOUT_GPU();
  const int64_t rows = 4, cols = 256;
  std::vector<float> x(rows * cols);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 3e38f,
                            -3e38f, 1e-30f, -1e-30f, 0.0f, -0.0f, 448.0f, 464.0f, 57344.0f};
  std::mt19937_64 rng(testing::TestSeed());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng);
  // Row 0 group 0 holds a NaN; row 1 an Inf; row 2 huge values; row 3 tiny ones beside 1.0.
  x[5] = specials[0];
  x[cols + 7] = specials[1];
  x[cols + 130] = specials[2];
  x[2 * cols + 3] = specials[3];
  x[2 * cols + 200] = specials[4];
  for (int i = 0; i < 12; ++i) x[3 * cols + 10 + i] = specials[5 + (i % 7)] * (i < 7 ? 1.0f : 1e-6f);
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    SCOPED_TRACE(Fp8FormatName(f));
    std::vector<uint8_t> q_ref(x.size());
    std::vector<float> s_ref(rows * 2);
    ASSERT_TRUE(Quantize1x128(x.data(), rows, cols, f, ScaleFormat::kFp32, q_ref.data(), s_ref.data()).ok());
    DeviceBuffer<float> dx(x);
    DeviceBuffer<uint8_t> q(x.size());
    DeviceBuffer<float> s(rows * 2);
    Status st = Sm90Fp8Quantize1x128(dx.get(), rows, cols, f, ScaleFormat::kFp32,
                                     Sm90ScaleLayout::kRowMajor, q.get(), s.get(), nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(BitsEqual(q_ref, q.ToHost(), "q"));
    // NaN scales compare as NaN (payloads may differ), the rest bit for bit.
    std::vector<float> s_got = s.ToHost();
    for (size_t i = 0; i < s_ref.size(); ++i) {
      if (std::isnan(s_ref[i])) {
        EXPECT_TRUE(std::isnan(s_got[i])) << "scale " << i;
      } else {
        EXPECT_EQ(testing::Bits(s_ref[i]), testing::Bits(s_got[i])) << "scale " << i;
      }
    }
  }
}

// ---- dequantization ---------------------------------------------------------------------------

class Sm90DequantizeTest : public ::testing::TestWithParam<Fp8Format> {
 protected:
  void SetUp() override { FP8_SKIP_WITHOUT_GPU(); }
};

// Random FP8 bytes (NaN codes included) and random scales; fp32 output must equal the CPU's
// float(q) * scale_inv, bf16 output that value rounded to bf16.
TEST_P(Sm90DequantizeTest, AllTileShapesMatchCpu) {
  const Fp8Format f = GetParam();
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t rows = 272, cols = 400, g = CeilDiv(cols, 128), rb = CeilDiv(rows, 128);
  std::vector<uint8_t> q(rows * cols);
  for (auto& b : q) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> e(-20.0f, 5.0f);
  auto random_scales = [&](size_t n) {
    std::vector<float> s(n);
    for (auto& v : s) v = std::exp2(e(rng));
    return s;
  };
  DeviceBuffer<uint8_t> dq(q);
  auto compare = [&](const std::vector<float>& ref, auto&& run_f32, auto&& run_bf16, const char* what) {
    DeviceBuffer<float> out_f32(rows * cols);
    DeviceBuffer<uint16_t> out_bf16(rows * cols);
    Status st = run_f32(out_f32.get());
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = run_bf16(reinterpret_cast<__nv_bfloat16*>(out_bf16.get()));
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::vector<float> got = out_f32.ToHost();
    std::vector<uint16_t> got_b = out_bf16.ToHost();
    size_t bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const bool nan = std::isnan(ref[i]);
      if (nan ? !std::isnan(got[i]) : testing::Bits(ref[i]) != testing::Bits(got[i])) ++bad;
      const float gb = Bf16ToFloat(got_b[i]);
      if (nan ? !std::isnan(gb) : FloatToBf16(ref[i]) != got_b[i]) ++bad;
    }
    EXPECT_EQ(bad, 0u) << what;
  };
  {  // 1x128, both layouts
    std::vector<float> s = random_scales(rows * g), ref(rows * cols);
    ASSERT_TRUE(Dequantize1x128(q.data(), s.data(), rows, cols, f, ref.data()).ok());
    DeviceBuffer<float> ds(s), ds_mn(ToMnMajor(s, rows, g));
    for (auto [layout, ptr] : {std::pair{Sm90ScaleLayout::kRowMajor, ds.get()},
                               std::pair{Sm90ScaleLayout::kMnMajor, ds_mn.get()}}) {
      compare(ref,
              [&](float* o) { return Sm90Fp8Dequantize1x128(dq.get(), ptr, layout, rows, cols, f, o, nullptr); },
              [&](__nv_bfloat16* o) { return Sm90Fp8Dequantize1x128(dq.get(), ptr, layout, rows, cols, f, o, nullptr); },
              "1x128");
    }
  }
  {  // 128x128
    std::vector<float> s = random_scales(rb * g), ref(rows * cols);
    ASSERT_TRUE(Dequantize128x128(q.data(), s.data(), rows, cols, f, ref.data()).ok());
    DeviceBuffer<float> ds(s);
    compare(ref,
            [&](float* o) { return Sm90Fp8Dequantize128x128(dq.get(), ds.get(), g, rows, cols, f, o, nullptr); },
            [&](__nv_bfloat16* o) { return Sm90Fp8Dequantize128x128(dq.get(), ds.get(), g, rows, cols, f, o, nullptr); },
            "128x128");
  }
  {  // per tensor
    const float s = random_scales(1)[0];
    std::vector<float> ref(rows * cols);
    DequantizeTensor(q.data(), rows * cols, s, f, ref.data());
    DeviceBuffer<float> ds(std::vector<float>{s});
    compare(ref,
            [&](float* o) { return Sm90Fp8DequantizeTensor(dq.get(), rows * cols, ds.get(), f, o, nullptr); },
            [&](__nv_bfloat16* o) { return Sm90Fp8DequantizeTensor(dq.get(), rows * cols, ds.get(), f, o, nullptr); },
            "tensor");
  }
}

INSTANTIATE_TEST_SUITE_P(BothFormats, Sm90DequantizeTest,
                         ::testing::Values(Fp8Format::kE4M3, Fp8Format::kE5M2),
                         [](const auto& info) { return std::string(Fp8FormatName(info.param)); });

// ---- argument checks (no GPU needed: they run before any CUDA call) ---------------------------

TEST(Sm90QuantizeArgs, RejectsColsNotMultipleOf16NamingCols) {
  alignas(16) static float x[16];
  alignas(16) static uint8_t q[16];
  static float s[2];
  Status st = Sm90Fp8Quantize1x128(x, 1, 12, Fp8Format::kE4M3, ScaleFormat::kFp32,
                                   Sm90ScaleLayout::kRowMajor, q, s, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cols"), std::string::npos) << st.message();
  st = Sm90Fp8Quantize128x128(x, 0, 16, Fp8Format::kE4M3, ScaleFormat::kFp32, q, s, 1, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rows"), std::string::npos) << st.message();
}

TEST(Sm90QuantizeArgs, RejectsShortScaleLdAndUnalignedRowsForTranspose) {
  alignas(16) static float x[64 * 16];
  alignas(16) static uint8_t q[64 * 16], qt[64 * 16];
  static float s[64], st_[64];
  Status st = Sm90Fp8Quantize128x128(x, 16, 256, Fp8Format::kE4M3, ScaleFormat::kFp32, q, s, 1, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("scale_ld"), std::string::npos) << st.message();
  st = Sm90Fp8Quantize1x128WithTranspose(x, 20, 16, Fp8Format::kE4M3, ScaleFormat::kFp32,
                                         Sm90ScaleLayout::kRowMajor, q, s, qt, st_, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rows"), std::string::npos) << st.message();
  // 128x128 with the transposed output: rows of qt must be 16-byte aligned, its scale rows long enough.
  st = Sm90Fp8Quantize128x128WithTranspose(x, 20, 16, Fp8Format::kE4M3, ScaleFormat::kFp32, nullptr, nullptr, 0, qt, st_, 4, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rows must be a multiple of 16"), std::string::npos) << st.message();
  st = Sm90Fp8Quantize128x128WithTranspose(x, 16, 16, Fp8Format::kE4M3, ScaleFormat::kFp32, nullptr, nullptr, 0, qt, st_, 0, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("scale_ld_t"), std::string::npos) << st.message();
  st = Sm90Fp8Quantize128x128WithTranspose(x, 16, 16, Fp8Format::kE4M3, ScaleFormat::kFp32, q, s, 1, nullptr, nullptr, 1, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("transposed output"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace fp8::kernels::cuda
