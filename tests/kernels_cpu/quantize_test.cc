// SPDX-License-Identifier: Apache-2.0
// Quantize / dequantize against an independent scalar reference (tile amax in double, scale,
// element-wise cast) with asserted error bounds, for every granularity, format and scale format,
// on shapes with partial edge tiles.
#include "kernels/quantize.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/kernels_cpu/test_util.h"

namespace fp8::kernels {
namespace {

using testing::RandomMatrix;
using testing::Transpose;

struct Shape {
  int64_t rows, cols;
};
// Full tiles, partial tiles on either side, tiny and degenerate shapes.
constexpr Shape kShapes[] = {{1, 1}, {3, 130}, {128, 128}, {129, 257}, {200, 64}, {256, 384}, {0, 5}, {7, 0}};
constexpr Granularity kTiled[] = {Granularity::k1x128, Granularity::k128x1, Granularity::k128x128};
constexpr Fp8Format kFormats[] = {Fp8Format::kE4M3, Fp8Format::kE5M2};
constexpr ScaleFormat kScaleFormats[] = {ScaleFormat::kFp32, ScaleFormat::kUe8m0};

std::string Name(Granularity g) {
  switch (g) {
    case Granularity::kTensor: return "tensor";
    case Granularity::k1x128: return "1x128";
    case Granularity::k128x1: return "128x1";
    case Granularity::k128x128: return "128x128";
  }
  return "?";
}

int64_t NumScales(Granularity g, int64_t rows, int64_t cols) {
  switch (g) {
    case Granularity::kTensor: return 1;
    case Granularity::k1x128: return rows * CeilDiv(cols, kTile);
    case Granularity::k128x1: return CeilDiv(rows, kTile) * cols;
    case Granularity::k128x128: return CeilDiv(rows, kTile) * CeilDiv(cols, kTile);
  }
  return 0;
}

int64_t ScaleIndex(Granularity g, int64_t r, int64_t c, int64_t cols) {
  switch (g) {
    case Granularity::kTensor: return 0;
    case Granularity::k1x128: return r * CeilDiv(cols, kTile) + c / kTile;
    case Granularity::k128x1: return (r / kTile) * cols + c;
    case Granularity::k128x128: return (r / kTile) * CeilDiv(cols, kTile) + c / kTile;
  }
  return 0;
}

// Independent scale rule: max(amax, 1e-4) / fp8_max in FP32; ue8m0 = next power of two ≥ that.
float ReferenceScaleInv(double amax, Fp8Format fmt, ScaleFormat sf) {
  const float v = std::max(static_cast<float>(amax), 1e-4f) / Fp8Max(fmt);
  if (sf == ScaleFormat::kFp32) return v;
  double p = 1.0;
  while (p < v) p *= 2.0;
  while (p / 2.0 >= v) p /= 2.0;
  return static_cast<float>(p);
}

std::vector<float> ReferenceScales(const std::vector<float>& x, int64_t rows, int64_t cols, Granularity g,
                                   Fp8Format fmt, ScaleFormat sf) {
  std::vector<double> amax(static_cast<size_t>(NumScales(g, rows, cols)), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double& a = amax[ScaleIndex(g, r, c, cols)];
      a = std::max(a, std::fabs(static_cast<double>(x[r * cols + c])));
    }
  std::vector<float> s(amax.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = ReferenceScaleInv(amax[i], fmt, sf);
  return s;
}

Status QuantizeTiled(Granularity g, const std::vector<float>& x, int64_t rows, int64_t cols, Fp8Format fmt,
                     ScaleFormat sf, std::vector<uint8_t>& q, std::vector<float>& s) {
  q.assign(x.size(), 0xAA);
  s.assign(static_cast<size_t>(NumScales(g, rows, cols)), -1.0f);
  switch (g) {
    case Granularity::k1x128: return Quantize1x128(x.data(), rows, cols, fmt, sf, q.data(), s.data());
    case Granularity::k128x1: return Quantize128x1(x.data(), rows, cols, fmt, sf, q.data(), s.data());
    case Granularity::k128x128: return Quantize128x128(x.data(), rows, cols, fmt, sf, q.data(), s.data());
    case Granularity::kTensor: break;
  }
  return InvalidArgumentError("not tiled");
}

Status DequantizeTiled(Granularity g, const std::vector<uint8_t>& q, const std::vector<float>& s, int64_t rows,
                       int64_t cols, Fp8Format fmt, std::vector<float>& y) {
  y.assign(q.size(), std::numeric_limits<float>::quiet_NaN());
  switch (g) {
    case Granularity::k1x128: return Dequantize1x128(q.data(), s.data(), rows, cols, fmt, y.data());
    case Granularity::k128x1: return Dequantize128x1(q.data(), s.data(), rows, cols, fmt, y.data());
    case Granularity::k128x128: return Dequantize128x128(q.data(), s.data(), rows, cols, fmt, y.data());
    case Granularity::kTensor: break;
  }
  return InvalidArgumentError("not tiled");
}

// Worst-case round-trip error of one element: half an ULP relative in the normal range (3 or 2
// mantissa bits), half the smallest subnormal (times the scale) below it.
double ErrorBound(double x, float s, Fp8Format fmt) {
  const double rel = fmt == Fp8Format::kE4M3 ? std::ldexp(1.0, -4) : std::ldexp(1.0, -3);
  const double abs = fmt == Fp8Format::kE4M3 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17);
  return std::max(rel * std::fabs(x), abs * s) * (1.0 + 1e-6);
}

TEST(Quantize, MatchesReferenceForEveryGranularityFormatAndShape) {
  uint32_t seed = 100;
  for (Granularity g : kTiled)
    for (Fp8Format fmt : kFormats)
      for (ScaleFormat sf : kScaleFormats)
        for (Shape sh : kShapes) {
          SCOPED_TRACE(Name(g) + " " + Fp8FormatName(fmt) + (sf == ScaleFormat::kUe8m0 ? " ue8m0 " : " fp32 ") +
                       std::to_string(sh.rows) + "x" + std::to_string(sh.cols));
          const auto x = RandomMatrix(sh.rows, sh.cols, ++seed);
          std::vector<uint8_t> q;
          std::vector<float> s, y;
          ASSERT_TRUE(QuantizeTiled(g, x, sh.rows, sh.cols, fmt, sf, q, s).ok());
          const auto s_ref = ReferenceScales(x, sh.rows, sh.cols, g, fmt, sf);
          for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(s[i], s_ref[i]) << "scale " << i;
          ASSERT_TRUE(DequantizeTiled(g, q, s, sh.rows, sh.cols, fmt, y).ok());
          int bad_q = 0, bad_y = 0;
          for (int64_t r = 0; r < sh.rows; ++r)
            for (int64_t c = 0; c < sh.cols; ++c) {
              const int64_t i = r * sh.cols + c;
              const float si = s_ref[ScaleIndex(g, r, c, sh.cols)];
              bad_q += q[i] != FloatToFp8(x[i] / si, fmt);
              bad_y += !(std::fabs(double(y[i]) - x[i]) <= ErrorBound(x[i], si, fmt));
            }
          EXPECT_EQ(bad_q, 0);
          EXPECT_EQ(bad_y, 0);
        }
}

TEST(Quantize, AllZeroTilesGiveFiniteScalesAndZeros) {
  const int64_t rows = 130, cols = 300;
  auto x = RandomMatrix(rows, cols, 5);
  // Zero the first 128x128 block, and the tail tile of row 129 (a partial 1x44 tile).
  for (int64_t r = 0; r < 128; ++r)
    for (int64_t c = 0; c < 128; ++c) x[r * cols + c] = 0.0f;
  for (int64_t c = 256; c < cols; ++c) x[129 * cols + c] = -0.0f;
  for (Granularity g : kTiled)
    for (Fp8Format fmt : kFormats)
      for (ScaleFormat sf : kScaleFormats) {
        SCOPED_TRACE(Name(g) + " " + Fp8FormatName(fmt));
        std::vector<uint8_t> q;
        std::vector<float> s, y;
        ASSERT_TRUE(QuantizeTiled(g, x, rows, cols, fmt, sf, q, s).ok());
        for (float v : s) ASSERT_TRUE(std::isfinite(v) && v > 0.0f) << v;
        EXPECT_EQ(s[0], ReferenceScaleInv(kAmaxFloor, fmt, sf));  // every layout's first tile is all zero
        ASSERT_TRUE(DequantizeTiled(g, q, s, rows, cols, fmt, y).ok());
        std::vector<float> fake(x.size());
        ASSERT_TRUE(FakeQuantize(x.data(), rows, cols, g, fmt, sf, 0.0f, fake.data(), nullptr).ok());
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_FALSE(std::isnan(y[i]));
          if (x[i] == 0.0f) {
            ASSERT_EQ(y[i], 0.0f);
            ASSERT_EQ(fake[i], 0.0f);
            ASSERT_EQ(q[i] & 0x7F, 0);
          }
        }
      }
}

TEST(Quantize, Ue8m0ScalesAreExactPowersOfTwo) {
  const auto x = RandomMatrix(257, 300, 9, 3.7f);
  for (Granularity g : kTiled)
    for (Fp8Format fmt : kFormats) {
      std::vector<uint8_t> q;
      std::vector<float> s;
      ASSERT_TRUE(QuantizeTiled(g, x, 257, 300, fmt, ScaleFormat::kUe8m0, q, s).ok());
      for (float v : s) {
        int e = 0;
        ASSERT_EQ(std::frexp(v, &e), 0.5f) << v;  // mantissa exactly 1.0
      }
      // A power-of-two scale never pushes the tile's amax past the format's max.
      for (int64_t r = 0; r < 257; ++r)
        for (int64_t c = 0; c < 300; ++c) {
          const float si = s[ScaleIndex(g, r, c, 300)];
          ASSERT_LE(std::fabs(x[r * 300 + c] / si), Fp8Max(fmt));
        }
    }
}

TEST(Quantize, FakeQuantizeIsBitIdenticalToQuantizeThenDequantize) {
  for (Shape sh : {Shape{129, 257}, Shape{256, 384}, Shape{5, 3}})
    for (Granularity g : kTiled)
      for (Fp8Format fmt : kFormats)
        for (ScaleFormat sf : kScaleFormats) {
          const auto x = RandomMatrix(sh.rows, sh.cols, 77);
          std::vector<uint8_t> q;
          std::vector<float> s, y;
          ASSERT_TRUE(QuantizeTiled(g, x, sh.rows, sh.cols, fmt, sf, q, s).ok());
          ASSERT_TRUE(DequantizeTiled(g, q, s, sh.rows, sh.cols, fmt, y).ok());
          std::vector<float> fake(x.size()), fake_s(s.size());
          ASSERT_TRUE(FakeQuantize(x.data(), sh.rows, sh.cols, g, fmt, sf, 0.0f, fake.data(), fake_s.data()).ok());
          for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(fake[i]), std::bit_cast<uint32_t>(y[i])) << i;
          EXPECT_EQ(fake_s, s);
        }
  // Tensor granularity: QuantizeTensor + DequantizeTensor with the caller's scale.
  const auto x = RandomMatrix(33, 65, 78, 50.0f);
  for (Fp8Format fmt : kFormats) {
    const float s = 0.37f;
    std::vector<uint8_t> q(x.size());
    std::vector<float> y(x.size()), fake(x.size());
    QuantizeTensor(x.data(), static_cast<int64_t>(x.size()), s, fmt, q.data());
    DequantizeTensor(q.data(), static_cast<int64_t>(q.size()), s, fmt, y.data());
    float s_out = 0;
    ASSERT_TRUE(FakeQuantize(x.data(), 33, 65, Granularity::kTensor, fmt, ScaleFormat::kFp32, s, fake.data(), &s_out).ok());
    EXPECT_EQ(s_out, s);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(fake[i]), std::bit_cast<uint32_t>(y[i]));
  }
}

TEST(Quantize, FusedTransposeIsIdenticalToSeparateQuantizations) {
  for (Shape sh : {Shape{129, 257}, Shape{256, 128}, Shape{1, 300}, Shape{300, 1}})
    for (Fp8Format fmt : kFormats)
      for (ScaleFormat sf : kScaleFormats) {
        const int64_t rows = sh.rows, cols = sh.cols;
        const auto x = RandomMatrix(rows, cols, 31);
        const auto xt = Transpose(x, rows, cols);
        std::vector<uint8_t> q(x.size()), qt(x.size()), q_ref(x.size()), qt_ref(x.size());
        std::vector<float> s(rows * CeilDiv(cols, kTile)), st(cols * CeilDiv(rows, kTile));
        std::vector<float> s_ref(s.size()), st_ref(st.size());
        ASSERT_TRUE(Quantize1x128WithTranspose(x.data(), rows, cols, fmt, sf, q.data(), s.data(), qt.data(), st.data()).ok());
        ASSERT_TRUE(Quantize1x128(x.data(), rows, cols, fmt, sf, q_ref.data(), s_ref.data()).ok());
        ASSERT_TRUE(Quantize1x128(xt.data(), cols, rows, fmt, sf, qt_ref.data(), st_ref.data()).ok());
        EXPECT_EQ(q, q_ref);
        EXPECT_EQ(s, s_ref);
        EXPECT_EQ(qt, qt_ref);
        EXPECT_EQ(st, st_ref);
        // And Xᵀ's 1x128 tiles are X's 128x1 tiles.
        std::vector<uint8_t> q_col(x.size());
        std::vector<float> s_col(CeilDiv(rows, kTile) * cols);
        ASSERT_TRUE(Quantize128x1(x.data(), rows, cols, fmt, sf, q_col.data(), s_col.data()).ok());
        EXPECT_EQ(Transpose(std::vector<float>(q_col.begin(), q_col.end()), rows, cols),
                  std::vector<float>(qt.begin(), qt.end()));
      }
}

TEST(Quantize, TensorCastReturnsAmaxAndSaturates) {
  auto x = RandomMatrix(1, 100000, 4, 10.0f);
  x[123] = -1e6f;  // far beyond max · scale_inv: must clamp, not become NaN
  const float s = 0.5f;
  for (Fp8Format fmt : kFormats) {
    std::vector<uint8_t> q(x.size());
    const float amax = QuantizeTensor(x.data(), static_cast<int64_t>(x.size()), s, fmt, q.data());
    EXPECT_EQ(amax, 1e6f);
    EXPECT_EQ(Amax(x.data(), static_cast<int64_t>(x.size())), 1e6f);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(q[i], FloatToFp8(x[i] / s, fmt)) << i;
    EXPECT_EQ(Fp8ToFloat(q[123], fmt), -Fp8Max(fmt));
  }
  EXPECT_EQ(Amax(x.data(), 0), 0.0f);
}

TEST(Quantize, NonFiniteInputPoisonsItsTileOnly) {
  // A NaN must surface (the trainer's non-finite check relies on it), and only in its own tile.
  const int64_t rows = 2, cols = 256;
  auto x = RandomMatrix(rows, cols, 8);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y(x.size()), s(rows * 2);
  ASSERT_TRUE(FakeQuantize(x.data(), rows, cols, Granularity::k1x128, Fp8Format::kE4M3, ScaleFormat::kFp32, 0.0f,
                           y.data(), s.data()).ok());
  EXPECT_TRUE(std::isnan(y[5]));
  EXPECT_TRUE(std::isnan(s[0]));
  for (int64_t i = 128; i < rows * cols; ++i) ASSERT_TRUE(std::isfinite(y[i])) << i;
}

TEST(Quantize, InvalidArgumentsNameTheField) {
  float x = 1.0f, s = 0.0f, y = 0.0f;
  uint8_t q = 0;
  Status st = Quantize1x128(&x, -1, 1, Fp8Format::kE4M3, ScaleFormat::kFp32, &q, &s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rows"), std::string::npos) << st.message();
  st = Quantize128x128(&x, 1, 1, Fp8Format::kE4M3, ScaleFormat::kFp32, &q, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("scale_inv"), std::string::npos) << st.message();
  st = Dequantize128x1(&q, &s, 1, -3, Fp8Format::kE5M2, &y);
  EXPECT_NE(st.message().find("cols"), std::string::npos) << st.message();
  st = FakeQuantize(&x, 1, 1, Granularity::kTensor, Fp8Format::kE4M3, ScaleFormat::kFp32, 0.0f, &y, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor_scale_inv"), std::string::npos) << st.message();
  // Empty inputs are fine and touch nothing.
  EXPECT_TRUE(Quantize1x128(nullptr, 0, 0, Fp8Format::kE4M3, ScaleFormat::kFp32, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace fp8::kernels
