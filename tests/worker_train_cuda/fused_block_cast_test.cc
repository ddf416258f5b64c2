// SPDX-License-Identifier: Apache-2.0
// fp8-blockwise's casts fused into RMSNorm and SwiGLU (llama_kernels.h) against the unfused path
// the Llama model ran before: the bf16 output (RmsNormForward / ResidualAddRmsNorm /
// SwiGluForward) cast by Sm90Fp8Quantize1x128AndTransposed128x128. Every byte and scale must be
// the same (the fused kernels round to bf16 as the plain ones write it, then run the same cast
// code), the statistics pass must give the plain norm's rstd and residual sum bit for bit, and
// the folded amax must be max |output|. Output buffers start from the same poison on both
// sides, so an entry one side leaves unwritten shows up. SwiGLU also at the merged gate/up
// output's row pitch, and its backward cast into the merged layer's dy. FP32 and UE8M0 scales; one, three and 24 column tiles, one and two row
// tiles. Skips without a GPU.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/cuda/sm90_fp8_quantize_transpose.h"
#include "tests/worker_train_cuda/cuda_test_util.h"
#include "worker/train/cuda/llama_kernels.h"

namespace fp8::train::cuda {
namespace {

namespace kc = kernels::cuda;
using kernels::Fp8Format;
using kernels::ScaleFormat;

template <typename T>
bool BitwiseEqual(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// A cast operand of X [n, c] in device buffers poisoned with one pattern.
struct Operand {
  Dev<uint8_t> q, qt;
  Dev<float> s, st;
  Operand(int64_t n, int64_t c)
      : q(std::vector<uint8_t>(static_cast<size_t>(n * c), 0xA5)),
        qt(std::vector<uint8_t>(static_cast<size_t>(n * c), 0xA5)),
        s(std::vector<float>(static_cast<size_t>(c / 128 * n), -7.0f)),
        st(std::vector<float>(static_cast<size_t>(c / 128 * kc::Sm90BlockScaleLd(n)), -7.0f)) {}
  Fp8BlockOperand View() { return {q.get(), s.get(), qt.get(), st.get()}; }
};

void ExpectSameCast(Operand& fused, Operand& plain) {
  EXPECT_TRUE(BitwiseEqual(fused.q.Host(), plain.q.Host())) << "1x128 bytes";
  EXPECT_TRUE(BitwiseEqual(fused.s.Host(), plain.s.Host())) << "1x128 scales";
  EXPECT_TRUE(BitwiseEqual(fused.qt.Host(), plain.qt.Host())) << "Xᵀ 128x128 bytes";
  EXPECT_TRUE(BitwiseEqual(fused.st.Host(), plain.st.Host())) << "Xᵀ 128x128 scales";
}

// The unfused cast of a bf16 X into `op`.
Status PlainCast(const bf16* x, int64_t n, int64_t c, ScaleFormat sf, Operand& op) {
  return kc::Sm90Fp8Quantize1x128AndTransposed128x128(x, n, c, Fp8Format::kE4M3, sf, op.q.get(), op.s.get(), op.qt.get(), op.st.get(),
                                                      kc::Sm90BlockScaleLd(n), nullptr);
}

float MaxAbs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

struct Shape {
  int64_t n, c;
  ScaleFormat sf;
};
std::string ShapeName(const ::testing::TestParamInfo<Shape>& i) {
  return std::to_string(i.param.n) + "x" + std::to_string(i.param.c) + (i.param.sf == ScaleFormat::kUe8m0 ? "_ue8m0" : "_fp32");
}
const Shape kShapes[] = {{256, 128, ScaleFormat::kFp32}, {256, 384, ScaleFormat::kFp32}, {128, 3072, ScaleFormat::kFp32},
                         {256, 384, ScaleFormat::kUe8m0}};

class FusedBlockCast : public ::testing::TestWithParam<Shape> {};

TEST_P(FusedBlockCast, RmsNormCastEqualsNormThenCast) {
  SKIP_WITHOUT_GPU();
  const auto [n, c, sf] = GetParam();
  const size_t nc = static_cast<size_t>(n * c);
  const float eps = 1e-5f;
  std::vector<float> w = Random(static_cast<size_t>(c), 2, 0.2f);
  for (float& x : w) x += 1.0f;
  const std::vector<float> res = Random(nc, 1, 3.0f);
  const std::vector<bf16> y = ToBf16(Random(nc, 3));
  Dev<float> dres(res), dw(w), out_plain(nc), out_fused(nc), rstd_plain(static_cast<size_t>(n)), rstd_fused(static_cast<size_t>(n));
  Dev<bf16> dy(y), ln(nc);
  Dev<unsigned int> amax(1);
  // The residual add + norm (the model's every norm but the first), then the plain norm of x.
  for (bool residual : {true, false}) {
    SCOPED_TRACE(residual ? "residual add + norm" : "norm");
    Operand plain(n, c), fused(n, c);
    if (residual) {
      ASSERT_OK(ResidualAddRmsNorm(dres.get(), dy.get(), n, c, out_plain.get(), dw.get(), eps, ln.get(), rstd_plain.get(), nullptr));
      ASSERT_OK(ResidualAddRmsRstd(dres.get(), dy.get(), n, c, out_fused.get(), eps, rstd_fused.get(), nullptr));
    } else {
      ASSERT_OK(RmsNormForward(dres.get(), dw.get(), n, c, eps, ln.get(), rstd_plain.get(), nullptr));
      ASSERT_OK(RmsNormRstd(dres.get(), n, c, eps, rstd_fused.get(), nullptr));
    }
    ASSERT_OK(PlainCast(ln.get(), n, c, sf, plain));
    ASSERT_EQ(cudaMemset(amax.get(), 0, sizeof(unsigned int)), cudaSuccess);
    ASSERT_OK(RmsNormCastBlockwise(residual ? out_fused.get() : dres.get(), rstd_fused.get(), dw.get(), n, c, sf, fused.View(),
                                   amax.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(rstd_fused.Host(), rstd_plain.Host())) << "rstd";
    if (residual) {
      EXPECT_TRUE(BitwiseEqual(out_fused.Host(), out_plain.Host())) << "the residual sum";
    }
    ExpectSameCast(fused, plain);
    float got = 0;
    const unsigned int bits = amax.Host()[0];
    std::memcpy(&got, &bits, sizeof(got));
    EXPECT_EQ(got, MaxAbs(ToF32(ln.Host()))) << "amax";
  }
}

TEST_P(FusedBlockCast, SwiGluCastEqualsSwiGluThenCast) {
  SKIP_WITHOUT_GPU();
  const auto [n, c, sf] = GetParam();
  const size_t nc = static_cast<size_t>(n * c);
  Dev<bf16> gate(ToBf16(Random(nc, 11, 2.0f))), up(ToBf16(Random(nc, 12))), act(nc);
  Dev<unsigned int> amax(1);
  Operand plain(n, c), fused(n, c);
  ASSERT_OK(SwiGluForward(gate.get(), up.get(), static_cast<int64_t>(nc), act.get(), nullptr));
  ASSERT_OK(PlainCast(act.get(), n, c, sf, plain));
  ASSERT_OK(SwiGluCastBlockwise(gate.get(), up.get(), n, c, c, sf, fused.View(), amax.get(), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectSameCast(fused, plain);
  float got = 0;
  const unsigned int bits = amax.Host()[0];
  std::memcpy(&got, &bits, sizeof(got));
  EXPECT_EQ(got, MaxAbs(ToF32(act.Host()))) << "amax";
}

// The merged gate/up projection's output [n, 2c]: gate in its first c columns, up in the rest.
// Reading it at pitch 2c gives the flat kernels' bits on dense copies: forward, backward (whose
// gradients land at the same pitch) and the fused cast.
TEST_P(FusedBlockCast, SwiGluAtARowPitchEqualsDenseInputs) {
  SKIP_WITHOUT_GPU();
  const auto [n, c, sf] = GetParam();
  const size_t nc = static_cast<size_t>(n * c);
  const std::vector<float> merged_h = RoundBf16(Random(2 * nc, 21, 2.0f)), dout_h = RoundBf16(Random(nc, 22));
  std::vector<float> gate_h(nc), up_h(nc);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < c; ++j) {
      gate_h[static_cast<size_t>(r * c + j)] = merged_h[static_cast<size_t>(r * 2 * c + j)];
      up_h[static_cast<size_t>(r * c + j)] = merged_h[static_cast<size_t>(r * 2 * c + c + j)];
    }
  Dev<bf16> merged(ToBf16(merged_h)), gate(ToBf16(gate_h)), up(ToBf16(up_h)), dout(ToBf16(dout_h));
  Dev<bf16> out_rows(nc), out_flat(nc), dgate(nc), dup(nc);
  Dev<bf16> dmerged(ToBf16(std::vector<float>(2 * nc, 7.0f)));
  const bf16* g = merged.get();
  const bf16* u = merged.get() + c;
  ASSERT_OK(SwiGluForwardRows(g, u, n, c, 2 * c, out_rows.get(), nullptr));
  ASSERT_OK(SwiGluForward(gate.get(), up.get(), static_cast<int64_t>(nc), out_flat.get(), nullptr));
  ASSERT_OK(SwiGluBackwardRows(dout.get(), g, u, n, c, 2 * c, dmerged.get(), dmerged.get() + c, nullptr));
  ASSERT_OK(SwiGluBackward(dout.get(), gate.get(), up.get(), static_cast<int64_t>(nc), dgate.get(), dup.get(), nullptr));
  Operand plain(n, c), fused(n, c);
  ASSERT_OK(PlainCast(out_flat.get(), n, c, sf, plain));
  ASSERT_OK(SwiGluCastBlockwise(g, u, n, c, 2 * c, sf, fused.View(), nullptr, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(BitwiseEqual(ToF32(out_rows.Host()), ToF32(out_flat.Host())));
  const std::vector<float> dm = ToF32(dmerged.Host()), dg = ToF32(dgate.Host()), du = ToF32(dup.Host());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < c; ++j) {
      ASSERT_EQ(dm[static_cast<size_t>(r * 2 * c + j)], dg[static_cast<size_t>(r * c + j)]) << r << "," << j;
      ASSERT_EQ(dm[static_cast<size_t>(r * 2 * c + c + j)], du[static_cast<size_t>(r * c + j)]) << r << "," << j;
    }
  ExpectSameCast(fused, plain);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedBlockCast, ::testing::ValuesIn(kShapes), ShapeName);

TEST(FusedBlockCastArgs, RefusesShapesTheCastCannotTile) {
  SKIP_WITHOUT_GPU();
  Dev<bf16> gate(size_t{4096}), up(size_t{4096});
  Operand op(256, 128);
  EXPECT_FALSE(SwiGluCastBlockwise(gate.get(), up.get(), 40, 100, 100, ScaleFormat::kFp32, op.View(), nullptr, nullptr).ok());
  Fp8BlockOperand missing = op.View();
  missing.qt = nullptr;
  EXPECT_FALSE(SwiGluCastBlockwise(gate.get(), up.get(), 16, 128, 128, ScaleFormat::kFp32, missing, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace fp8::train::cuda
