// cuBLASLt epilogue GEMMs (worker/train/cuda/lt_epilogue_gemm.h) against the unfused path the
// trainer otherwise runs: GemmBf16 followed by AddBias / BiasGeluForward / ResidualAdd /
// GeluBackward. Fails (rather than falling back) when cuBLASLt has no kernel, so a run shows
// whether the bf16 trainer really fuses. Skips without a GPU.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/worker_train_cuda/cuda_test_util.h"
#include "worker/train/cuda/cuda_model.h"
#include "worker/train/cuda/lt_epilogue_gemm.h"

namespace fp8::train::cuda {
namespace {

TEST(LtEpilogueGemm, EachEpilogueMatchesTheUnfusedKernels) {
  SKIP_WITHOUT_GPU();
  const int64_t m = 256, n = 384, k = 128;
  Dev<bf16> x(ToBf16(Random(m * k, 1))), w(ToBf16(Random(n * k, 2, 0.1f))), dy(ToBf16(Random(m * n, 3)));
  Dev<float> bias(Random(n, 4)), res(Random(m * n, 5));
  Dev<bf16> y_ref(m * n), y(m * n), aux(m * n), pre(m * n), dx_ref(m * k), dx(m * k);
  Dev<float> out_ref(m * n), out(m * n);
  auto created = LtEpilogueGemm::Create();
  ASSERT_TRUE(created.ok()) << created.status().message();
  LtEpilogueGemm& lt = **created;
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  auto gemm = [&](bf16* into) {  // into[m, n] = x·Wᵀ
    return GemmBf16(h, false, true, m, n, k, 1.0f, x.get(), k, w.get(), k, 0.0f, into, n, false);
  };
  auto rel = [](Dev<bf16>& a, Dev<bf16>& b) {
    const std::vector<float> fa = ToF32(a.Host()), fb = ToF32(b.Host());
    return RelErr(fa.data(), fb.data(), fa.size());
  };

  ASSERT_OK(gemm(y_ref.get()));
  ASSERT_OK(AddBias(y_ref.get(), bias.get(), m, n, nullptr));
  ASSERT_OK(lt.Run(LtEpilogue::kBias, x.get(), w.get(), m, n, k, bias.get(), nullptr, nullptr, y.get(), nullptr));
  EXPECT_LT(rel(y, y_ref), 1e-2) << "bias";

  ASSERT_OK(gemm(pre.get()));
  ASSERT_OK(BiasGeluForward(pre.get(), bias.get(), m, n, y_ref.get(), nullptr));
  ASSERT_OK(lt.Run(LtEpilogue::kGeluAuxBias, x.get(), w.get(), m, n, k, bias.get(), aux.get(), nullptr, y.get(), nullptr));
  EXPECT_LT(rel(aux, pre), 1e-2) << "gelu aux (pre-activation)";
  EXPECT_LT(rel(y, y_ref), 1e-2) << "gelu";

  ASSERT_OK(gemm(y_ref.get()));
  ASSERT_OK(ResidualAdd(res.get(), y_ref.get(), bias.get(), m, n, out_ref.get(), nullptr));
  ASSERT_OK(lt.Run(LtEpilogue::kBiasResidualF32, x.get(), w.get(), m, n, k, bias.get(), nullptr, res.get(), out.get(), nullptr));
  const std::vector<float> o = out.Host(), o_ref = out_ref.Host();
  EXPECT_LT(RelErr(o.data(), o_ref.data(), o.size()), 1e-2) << "residual";

  // dgrad of a layer W [n_out = n, in = k] fused with GELU backward at pre [m, k]: the layer
  // here is the fc_proj shape, dy [m, n], W [n, k], aux = pre-activation [m, k].
  Dev<bf16> pre_k(ToBf16(Random(m * k, 6)));
  ASSERT_OK(GemmBf16(h, false, false, m, k, n, 1.0f, dy.get(), n, w.get(), k, 0.0f, dx_ref.get(), k, false));
  ASSERT_OK(GeluBackward(dx_ref.get(), pre_k.get(), m * k, dx_ref.get(), nullptr));
  ASSERT_OK(lt.Run(LtEpilogue::kDGelu, dy.get(), w.get(), m, k, n, nullptr, pre_k.get(), nullptr, dx.get(), nullptr));
  EXPECT_LT(rel(dx, dx_ref), 2e-2) << "dgelu";
  cublasDestroy(h);
}

}  // namespace
}  // namespace fp8::train::cuda
