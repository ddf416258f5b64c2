// SPDX-License-Identifier: Apache-2.0
// The CUDA trainer against the CPU trainer (the reference) on the same weights and tokens:
// single kernels (LayerNorm, GELU, cross-entropy) against layers.h, then the whole model's loss
// and the gradient of every parameter tensor — every layer's forward and backward — per recipe.
// Then the loop: loss falls, a CUDA checkpoint loads into the CPU model, and progress carries the
// FP8 figures. Skips without a GPU.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/event_lines.h"
#include "tests/worker_train/test_util.h"
#include "tests/worker_train_cuda/cuda_test_util.h"
#include "worker/common/events.h"
#include "worker/train/checkpoint.h"
#include "worker/train/collective.h"
#include "worker/train/cuda/cuda_model.h"
#include "worker/train/cuda/cuda_trainer.h"
#include "worker/train/cuda/nccl_comm.h"
#include "worker/train/cuda/train_kernels.h"
#include "worker/train/layers.h"
#include "worker/train/model.h"
#include "worker/train/optimizer.h"

namespace fp8::train::cuda {
namespace {

TEST(CudaLayout, MatchesGptModel) {
  ModelConfig cfg;
  cfg.n_layer = 3;
  cfg.n_head = 4;
  cfg.d_model = 64;
  cfg.seq_len = 32;
  cfg.vocab_size = 300;
  GptModel cpu(cfg, PrecisionConfig{});
  const auto layout = GptParamLayout(cfg);
  ASSERT_EQ(layout.size(), cpu.tensors().size());
  for (size_t i = 0; i < layout.size(); ++i) {
    EXPECT_EQ(layout[i].name, cpu.tensors()[i].name);
    EXPECT_EQ(layout[i].shape, cpu.tensors()[i].shape);
    EXPECT_EQ(layout[i].offset, cpu.tensors()[i].offset);
    EXPECT_EQ(layout[i].weight_decay, cpu.tensors()[i].weight_decay);
  }
}

// Shape rules are checked before any CUDA call, so they hold on machines without a GPU too.
TEST(CudaModelCreate, RejectsShapesTheFp8GemmsCannotRun) {
  ModelConfig cfg;
  cfg.n_layer = 1;
  cfg.n_head = 2;
  cfg.d_model = 96;  // not a multiple of 128: no whole blockwise scale blocks
  cfg.seq_len = 64;
  cfg.vocab_size = 256;
  PrecisionConfig pc;
  pc.recipe = Recipe::kFp8Blockwise;
  auto m = CudaGptModel::Create(cfg, pc, GptParamLayout(cfg), 2, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("d_model"), std::string::npos) << m.status().message();
  cfg.d_model = 128;
  cfg.n_head = 3;
  auto h = CudaGptModel::Create(cfg, pc, GptParamLayout(cfg), 2, nullptr);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("n_head"), std::string::npos) << h.status().message();
}

// World size 1 needs no NCCL at all; a multi-rank group needs the rendezvous directory.
TEST(NcclComm, SingleRankNeedsNoLibraryAndGroupsNeedRendezvousDir) {
  auto one = NcclComm::Create(0, 1, "", std::chrono::milliseconds(10));
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_TRUE((*one)->AllReduceSum(static_cast<float*>(nullptr), 16, nullptr).ok());
  auto two = NcclComm::Create(0, 2, "", std::chrono::milliseconds(10));
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(two.status().message().find("FP8D_RENDEZVOUS_DIR"), std::string::npos);
}

// (300, 384): the row-in-registers forward and the fused one-pass backward, with a partial last
// block of rows; (77, 130): c not a multiple of 4, the warp-per-row forward and two-kernel backward;
// (64, 4096): the d4096 model's width (4 float4 per thread in the forward).
TEST(CudaKernels, LayerNormForwardBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (const auto& [n, c] : {std::pair<int64_t, int64_t>{300, 384}, {77, 130}, {64, 4096}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " c=" + std::to_string(c));
    auto x = Random(n * c, 1, 2.0f), w = Random(c, 2), b = Random(c, 3), dout = RoundBf16(Random(n * c, 4));
    std::vector<float> out(n * c), mean(n), rstd(n), dx(n * c, 0.5f), dw(c, 0), db(c, 0);
    train::LayerNormForward<float>(x.data(), w.data(), b.data(), n, c, out.data(), mean.data(), rstd.data());
    train::LayerNormBackward<float>(dout.data(), x.data(), w.data(), mean.data(), rstd.data(), n, c, dx.data(), dw.data(), db.data());
    Dev<float> dx_(x), dw_(w), db_(b), dmean(n), drstd(n), ddx(std::vector<float>(n * c, 0.5f)), ddw(c), ddb(c),
        scratch(ColumnScratchFloats(n, c));
    Dev<bf16> dout_(ToBf16(dout)), dout_y(n * c), ddx_bf16(n * c);
    ASSERT_OK(LayerNormForward(dx_.get(), dw_.get(), db_.get(), n, c, dout_y.get(), dmean.get(), drstd.get(), nullptr));
    ASSERT_OK(LayerNormBackward(dout_.get(), dx_.get(), dw_.get(), dmean.get(), drstd.get(), n, c, ddx.get(), ddx_bf16.get(), ddw.get(),
                                ddb.get(), scratch.get(), nullptr));
    const auto y = ToF32(dout_y.Host());
    EXPECT_LT(RelErr(y.data(), out.data(), y.size()), 5e-3);
    EXPECT_LT(RelErr(dmean.Host().data(), mean.data(), n), 1e-5);
    EXPECT_LT(RelErr(drstd.Host().data(), rstd.data(), n), 1e-5);
    EXPECT_LT(RelErr(ddx.Host().data(), dx.data(), dx.size()), 1e-4);
    // The bf16 copy is exactly the fp32 result rounded (the next GEMM's operand).
    const auto got_bf16 = ddx_bf16.Host(), want_bf16 = ToBf16(ddx.Host());
    EXPECT_EQ(std::memcmp(got_bf16.data(), want_bf16.data(), got_bf16.size() * sizeof(bf16)), 0);
    EXPECT_LT(RelErr(ddw.Host().data(), dw.data(), c), 1e-4);
    EXPECT_LT(RelErr(ddb.Host().data(), db.data(), c), 1e-4);
  }
}

// Bias gradients: db += Σ_rows dy. (300, 2304): the vectorized kernel with a partial last chunk;
// (77, 130): columns not a multiple of 8, the scalar path.
TEST(CudaKernels, ColumnSumAccumulateMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{300, 2304}, {77, 130}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n));
    const auto dy = RoundBf16(Random(m * n, 21));
    const auto db0 = Random(n, 22);
    std::vector<double> want(db0.begin(), db0.end());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) want[j] += dy[i * n + j];
    Dev<bf16> ddy(ToBf16(dy));
    Dev<float> ddb(db0), scratch(ColumnScratchFloats(m, n));
    ASSERT_OK(ColumnSumAccumulate(ddy.get(), m, n, ddb.get(), scratch.get(), nullptr));
    const auto got = ddb.Host();
    for (int64_t j = 0; j < n; ++j) ASSERT_NEAR(got[j], want[j], 1e-4 * (1.0 + std::fabs(want[j]))) << "column " << j;
  }
}

// The fused residual add + LayerNorm is bitwise equal to ResidualAdd then LayerNormForward
// ((256, 768): the row-in-registers kernels; (77, 130): the warp-per-row ones).
TEST(CudaKernels, ResidualAddLayerNormEqualsTheTwoKernels) {
  SKIP_WITHOUT_GPU();
  for (const auto& [n, c] : {std::pair<int64_t, int64_t>{256, 768}, {77, 130}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " c=" + std::to_string(c));
    Dev<float> res(Random(n * c, 31, 2.0f)), bias(Random(c, 32)), w(Random(c, 33)), lb(Random(c, 34));
    Dev<bf16> y(ToBf16(Random(n * c, 35)));
    Dev<float> out1(n * c), out2(n * c), mean1(n), mean2(n), rstd1(n), rstd2(n);
    Dev<bf16> ln1(n * c), ln2(n * c);
    ASSERT_OK(ResidualAdd(res.get(), y.get(), bias.get(), n, c, out1.get(), nullptr));
    ASSERT_OK(LayerNormForward(out1.get(), w.get(), lb.get(), n, c, ln1.get(), mean1.get(), rstd1.get(), nullptr));
    ASSERT_OK(ResidualAddLayerNorm(res.get(), y.get(), bias.get(), n, c, out2.get(), w.get(), lb.get(), ln2.get(), mean2.get(),
                                   rstd2.get(), nullptr));
    EXPECT_EQ(out1.Host(), out2.Host());
    EXPECT_EQ(mean1.Host(), mean2.Host());
    EXPECT_EQ(rstd1.Host(), rstd2.Host());
    const auto a = ln1.Host(), b = ln2.Host();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)), 0);
  }
}

TEST(CudaKernels, GeluAndCrossEntropyMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 64, v = 1000;
  auto x = RoundBf16(Random(n * v, 5, 3.0f));
  std::vector<float> y(x.size()), dx(x.size());
  auto dy = RoundBf16(Random(x.size(), 6));
  train::GeluForward<float>(x.data(), x.size(), y.data());
  train::GeluBackward<float>(dy.data(), x.data(), x.size(), dx.data());
  Dev<bf16> dx_(ToBf16(x)), dy_(ToBf16(dy)), out(x.size()), dgrad(x.size());
  ASSERT_OK(GeluForward(dx_.get(), x.size(), out.get(), nullptr));
  ASSERT_OK(GeluBackward(dy_.get(), dx_.get(), x.size(), dgrad.get(), nullptr));
  EXPECT_LT(RelErr(ToF32(out.Host()).data(), y.data(), y.size()), 5e-3);
  EXPECT_LT(RelErr(ToF32(dgrad.Host()).data(), dx.data(), dx.size()), 5e-3);

  std::vector<int32_t> tgt(n);
  for (int64_t i = 0; i < n; ++i) tgt[i] = static_cast<int32_t>((i * 37) % v);
  std::vector<float> probs = x, dlogits(x.size());
  const double loss = train::CrossEntropyForward<float>(probs.data(), tgt.data(), n, v);
  train::CrossEntropyBackward<float>(probs.data(), tgt.data(), n, v, 1.0f / n, dlogits.data());
  Dev<bf16> logits(ToBf16(x));
  Dev<int32_t> dt(tgt);
  Dev<float> losses(n);
  ASSERT_OK(CrossEntropy(logits.get(), dt.get(), n, v, v, 1.0f / n, true, losses.get(), nullptr));
  const auto l = losses.Host();
  double sum = 0;
  for (float e : l) sum += e;
  EXPECT_NEAR(sum / n, loss, 1e-4 * std::fabs(loss));
  EXPECT_LT(RelErr(ToF32(logits.Host()).data(), dlogits.data(), dlogits.size()), 1e-2);
}

struct RecipeCase {
  Recipe recipe;
  double loss_tol, grad_tol;
};

// "fp8-blockwise" → "fp8_blockwise": a recipe as a test-name suffix.
std::string RecipeParamName(const ::testing::TestParamInfo<Recipe>& info) {
  std::string n = RecipeName(info.param);
  for (char& ch : n) if (ch == '-') ch = '_';
  return n;
}

// The whole-model tests' setup: 2 layers, C128, 4 heads, T64, vocab 256, the CPU model's
// initialisation from weight_seed, and a batch of 4 random sequences from token_seed.
struct TinyGptCase {
  ModelConfig cfg;
  PrecisionConfig pc;
  int batch = 4;
  std::unique_ptr<GptModel> cpu;
  std::vector<int32_t> in, tg;
  TinyGptCase(Recipe recipe, uint64_t weight_seed, uint32_t token_seed) {
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.d_model = 128;
    cfg.seq_len = 64;
    cfg.vocab_size = 256;
    pc.recipe = recipe;
    cpu = std::make_unique<GptModel>(cfg, pc);
    cpu->InitWeights(weight_seed);
    in.resize(static_cast<size_t>(batch * cfg.seq_len));
    tg.resize(in.size());
    std::mt19937 g(token_seed);
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<int32_t>(g() % 256);
      tg[i] = static_cast<int32_t>(g() % 256);
    }
  }
  // The same model on the GPU, with the CPU model's weights.
  StatusOr<std::unique_ptr<CudaGptModel>> Gpu(cudaStream_t s, const CudaModelOptions& options = {}) const {
    FP8_ASSIGN_OR_RETURN(auto gpu, CudaGptModel::Create(cfg, pc, cpu->tensors(), batch, s, options));
    FP8_RETURN_IF_ERROR(gpu->UploadParams(cpu->params().data()));
    return gpu;
  }
};

class CudaModelVsCpu : public ::testing::TestWithParam<RecipeCase> {};

// The whole model on the same weights and tokens: loss, then every parameter's gradient (each
// block's LayerNorms, qkv/proj/fc/fc_proj weights and biases, embeddings, final norm), as
// ‖g_cuda − g_cpu‖/‖g_cpu‖ against the CPU model under the same recipe.
TEST_P(CudaModelVsCpu, LossAndEveryTensorGradientMatch) {
  SKIP_WITHOUT_GPU();
  const RecipeCase rc = GetParam();
  TinyGptCase tc(rc.recipe, 7, 11);
  const int batch = tc.batch;
  GptModel& cpu = *tc.cpu;
  const std::vector<int32_t>&in = tc.in, &tg = tc.tg;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto gpu = tc.Gpu(s);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  // Two steps' worth of forward/backward so tensorwise runs with a recorded history too.
  for (int rep = 0; rep < 2; ++rep) {
    cpu.ZeroGrad();
    const double cpu_loss = cpu.Forward(in.data(), tg.data(), batch);
    cpu.Backward(1.0f);
    ASSERT_OK((*gpu)->ZeroGrad());
    auto gl = (*gpu)->Forward(in.data(), tg.data(), batch, true, 1.0f);
    ASSERT_TRUE(gl.ok()) << gl.status().message();
    ASSERT_OK((*gpu)->Backward());
    EXPECT_NEAR(*gl, cpu_loss, rc.loss_tol * cpu_loss) << "rep " << rep;
    std::vector<float> gg(static_cast<size_t>(cpu.num_params()));
    ASSERT_OK((*gpu)->DownloadGrads(gg.data()));
    for (const ParamTensor& t : cpu.tensors()) {
      const double e = RelErr(gg.data() + t.offset, cpu.grads().data() + t.offset, static_cast<size_t>(t.numel));
      EXPECT_LT(e, rc.grad_tol) << t.name << " (rep " << rep << ")";
    }
  }
  // Evaluation must not move the scaling state: two evals give the same loss.
  auto e1 = (*gpu)->Forward(in.data(), tg.data(), batch, false, 1.0f);
  auto e2 = (*gpu)->Forward(in.data(), tg.data(), batch, false, 1.0f);
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_EQ(*e1, *e2);
  gpu->reset();
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Recipes, CudaModelVsCpu,
                         ::testing::Values(RecipeCase{Recipe::kBf16, 5e-3, 3e-2},  // bf16 logits and probabilities on the GPU
                                           RecipeCase{Recipe::kFp8Tensorwise, 2e-2, 0.15},  // E5M2 gradients: ~5% rounding noise
                                           RecipeCase{Recipe::kFp8Blockwise, 2e-2, 0.1}),
                         [](const auto& info) {
                           std::string n = RecipeName(info.param.recipe);
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

// bf16: the GEMM-epilogue fusions (bias, bias + GELU, GELU backward in cuBLASLt epilogues)
// against the separate passes (CudaModelOptions::fused_epilogues off) on the same weights and tokens. They differ
// only in roundings (the bias in bf16, GELU of the FP32 pre-activation).
TEST(CudaModelFusion, EpilogueFusionsMatchSeparatePasses) {
  SKIP_WITHOUT_GPU();
  TinyGptCase tc(Recipe::kBf16, 5, 13);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto fused = tc.Gpu(s);
  auto separate = tc.Gpu(s, {.fused_epilogues = false});
  ASSERT_TRUE(fused.ok() && separate.ok());
  std::vector<std::vector<float>> grads;
  std::vector<double> losses;
  for (auto* m : {&*fused, &*separate}) {
    auto loss = (*m)->Forward(tc.in.data(), tc.tg.data(), tc.batch, true, 1.0f);
    ASSERT_TRUE(loss.ok()) << loss.status().message();
    ASSERT_OK((*m)->Backward());
    losses.push_back(*loss);
    grads.emplace_back(static_cast<size_t>(tc.cpu->num_params()));
    ASSERT_OK((*m)->DownloadGrads(grads.back().data()));
  }
  const std::string refused = (*fused)->EpilogueRefusals();
  std::printf("epilogues cuBLASLt refused: %s\n", refused.empty() ? "none" : refused.c_str());
  EXPECT_NEAR(losses[0], losses[1], 1e-3 * losses[1]);
  double worst = 0;
  for (const ParamTensor& t : tc.cpu->tensors()) {
    const double e = RelErr(grads[0].data() + t.offset, grads[1].data() + t.offset, static_cast<size_t>(t.numel));
    worst = std::max(worst, e);
    EXPECT_LT(e, 2e-2) << t.name;
  }
  std::printf("loss fused %.6f separate %.6f, worst gradient relative difference %.2e\n", losses[0], losses[1], worst);
  fused->reset();
  separate->reset();
  cudaStreamDestroy(s);
}

class CudaModelFusedOptimizer : public ::testing::TestWithParam<Recipe> {};

// OptimizerStep writing the next forward's weight operands (and the cast reused across the
// micro-batches of a step) against the plain AdamW with the forward casting
// (CudaModelOptions::fused_optimizer off) over three steps of two micro-batches each, evaluation included.
// The kernels agree bit for bit (adamw_cast_test.cc) and nothing in a step depends on the order
// of atomics (the embedding gradient sums each token's rows in a fixed order, token_groups.h), so
// three steps of the fused and the unfused optimizer must give the same bits. (With the
// embedding's atomicAdd they differed by FP32 roundings that fp8-tensorwise and AdamW grew past
// 1e-4 of the loss in two steps on one H200.)
TEST_P(CudaModelFusedOptimizer, MatchesUnfused) {
  SKIP_WITHOUT_GPU();
  TinyGptCase tc(GetParam(), 3, 17);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto fused = tc.Gpu(s);
  auto unfused = tc.Gpu(s, {.fused_optimizer = false});
  ASSERT_TRUE(fused.ok() && unfused.ok());
  const size_t np = static_cast<size_t>(tc.cpu->num_params());
  DeviceBuffer<float> moments[2][2];
  for (auto& mv : moments)
    for (auto& buf : mv) {
      ASSERT_OK(buf.Allocate(np, "moment"));
      ASSERT_EQ(cudaMemset(buf.get(), 0, np * sizeof(float)), cudaSuccess);
    }
  std::vector<int32_t> in2(tc.in.rbegin(), tc.in.rend());  // the second micro-batch
  for (int step = 1; step <= 3; ++step) {
    double losses[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      CudaGptModel& m = k == 0 ? **fused : **unfused;
      ASSERT_OK(m.ZeroGrad());
      for (const std::vector<int32_t>* batch : {&tc.in, &in2}) {
        auto loss = m.Forward(batch->data(), tc.tg.data(), tc.batch, true, 0.5f);
        ASSERT_TRUE(loss.ok()) << loss.status().message();
        losses[k] += *loss;
        ASSERT_OK(m.Backward());
      }
      const AdamWArgs a{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f - std::pow(0.9f, static_cast<float>(step)),
                        1.0f - std::pow(0.95f, static_cast<float>(step)), 0.8f};
      ASSERT_OK(m.OptimizerStep(a, moments[k][0].get(), moments[k][1].get()));
      auto eval = m.Forward(tc.in.data(), tc.tg.data(), tc.batch, false, 1.0f);
      ASSERT_TRUE(eval.ok()) << eval.status().message();
      losses[k] += 1000 * *eval;
    }
    EXPECT_EQ(losses[0], losses[1]) << "step " << step;
  }
  std::vector<float> pf(np), pu(np);
  ASSERT_OK((*fused)->DownloadParams(pf.data()));
  ASSERT_OK((*unfused)->DownloadParams(pu.data()));
  for (const ParamTensor& t : tc.cpu->tensors())
    EXPECT_EQ(std::memcmp(pf.data() + t.offset, pu.data() + t.offset, static_cast<size_t>(t.numel) * sizeof(float)), 0)
        << t.name << " (relative difference " << RelErr(pf.data() + t.offset, pu.data() + t.offset, static_cast<size_t>(t.numel))
        << ")";
  std::vector<float> p0(tc.cpu->params().begin(), tc.cpu->params().end());
  EXPECT_NE(std::memcmp(pf.data(), p0.data(), np * sizeof(float)), 0) << "the steps did not move the weights";
  fused->reset();
  unfused->reset();
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Recipes, CudaModelFusedOptimizer,
                         ::testing::Values(Recipe::kBf16, Recipe::kFp8Tensorwise, Recipe::kFp8Blockwise),
                         RecipeParamName);

// Token ids index wte and the logits' rows: one outside the vocabulary is refused by name and
// position, in training and evaluation, before anything reads it.
TEST(CudaModelForward, RejectsTokenOutsideTheVocabularyNamingIt) {
  SKIP_WITHOUT_GPU();
  TinyGptCase tc(Recipe::kBf16, 3, 17);
  auto model = tc.Gpu(nullptr);
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::vector<int32_t> bad_in = tc.in, bad_tg = tc.tg;
  bad_in[5] = 256;  // vocabulary 256
  bad_tg[9] = -1;
  for (bool training : {true, false}) {
    auto a = (*model)->Forward(bad_in.data(), tc.tg.data(), tc.batch, training, 1.0f);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find("inputs[5] = 256"), std::string::npos) << a.status().message();
    auto b = (*model)->Forward(tc.in.data(), bad_tg.data(), tc.batch, training, 1.0f);
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find("targets[9] = -1"), std::string::npos) << b.status().message();
  }
  auto good = (*model)->Forward(tc.in.data(), tc.tg.data(), tc.batch, false, 1.0f);
  EXPECT_TRUE(good.ok()) << good.status().message();
}

class CudaModelGradOverwrite : public ::testing::TestWithParam<Recipe> {};

// ZeroGrad leaves the linear weights' and wte's gradients to the first Backward's GEMMs (beta 0):
// over gradients poisoned with NaN bytes, ZeroGrad + two micro-batches give the gradients of the
// model that clears everything and accumulates (CudaModelOptions::overwrite_grads off).
TEST_P(CudaModelGradOverwrite, MatchesZeroingEverything) {
  SKIP_WITHOUT_GPU();
  TinyGptCase tc(GetParam(), 9, 21);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto overwriting = tc.Gpu(s);
  auto zeroing = tc.Gpu(s, {.overwrite_grads = false});
  ASSERT_TRUE(overwriting.ok() && zeroing.ok());
  const size_t np = static_cast<size_t>(tc.cpu->num_params());
  std::vector<int32_t> in2(tc.in.rbegin(), tc.in.rend());
  std::vector<std::vector<float>> grads;
  for (auto* m : {&*overwriting, &*zeroing}) {
    ASSERT_EQ(cudaMemset((*m)->grads(), 0xFF, np * sizeof(float)), cudaSuccess);  // NaN everywhere
    ASSERT_OK((*m)->ZeroGrad());
    for (const std::vector<int32_t>* batch : {&tc.in, &in2}) {
      auto loss = (*m)->Forward(batch->data(), tc.tg.data(), tc.batch, true, 0.5f);
      ASSERT_TRUE(loss.ok()) << loss.status().message();
      ASSERT_OK((*m)->Backward());
    }
    grads.emplace_back(np);
    ASSERT_OK((*m)->DownloadGrads(grads.back().data()));
  }
  for (const ParamTensor& t : tc.cpu->tensors()) {
    const float* a = grads[0].data() + t.offset;
    const float* b = grads[1].data() + t.offset;
    EXPECT_EQ(std::memcmp(a, b, static_cast<size_t>(t.numel) * sizeof(float)), 0) << t.name;
  }
  overwriting->reset();
  zeroing->reset();
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Recipes, CudaModelGradOverwrite,
                         ::testing::Values(Recipe::kBf16, Recipe::kFp8Tensorwise, Recipe::kFp8Blockwise),
                         RecipeParamName);

class CudaTraining : public ::testing::TestWithParam<Recipe> {};

// The loop end to end on the shipped corpus: the loss falls, and the checkpoint it writes loads
// into the CPU model (same names, shapes, layout).
TEST_P(CudaTraining, LossFallsAndCheckpointLoadsOnCpu) {
  SKIP_WITHOUT_GPU();
  const std::string out = testing::MakeTempDir("cuda-train");
  TrainSpec spec = testing::TinySpec(GetParam(), 60, out);
  spec.training.learning_rate = 3e-3;
  spec.training.save_steps = 60;
  std::FILE* sink = std::fopen("/dev/null", "w");
  worker::EventWriter events(sink);
  TrainOptions opts;
  opts.heartbeat_ms = 0;
  TrainResult r = RunCudaTraining(spec, opts, Distributed{}, events);
  std::fclose(sink);
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.losses.size(), 60u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += r.losses[i] / 5;
  for (int i = 55; i < 60; ++i) last += r.losses[i] / 5;
  EXPECT_LT(last, first - 0.5) << "first " << first << " last " << last;
  ASSERT_FALSE(r.last_checkpoint.empty());
  GptModel cpu(spec.model, spec.precision);
  AdamW adam(spec.training, false, cpu.tensors(), cpu.num_params());
  auto state = LoadCheckpoint(r.last_checkpoint, &cpu, &adam);
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ((*state)["step"].get<int64_t>(), 60);
  std::filesystem::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Recipes, CudaTraining,
                         ::testing::Values(Recipe::kBf16, Recipe::kFp8Tensorwise, Recipe::kFp8Blockwise),
                         RecipeParamName);


// Progress of the FP8 recipes carries the casts' figures as the CPU trainer reports them, and
// counting them (on report steps only) changes nothing the steps compute: the losses of a run
// that reports every step equal, bit for bit, those of a run that never reports.
class CudaProgress : public ::testing::TestWithParam<Recipe> {};

std::vector<nlohmann::json> ProgressEvents(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return out;
  char line[1 << 14];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    auto e = fp8::testing::FlatEvent(nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false));
    if (e.value("type", "") == "progress") out.push_back(e);
  }
  std::fclose(f);
  return out;
}

TEST_P(CudaProgress, ReportsFp8FiguresWithoutChangingTheSteps) {
  SKIP_WITHOUT_GPU();
  const Recipe recipe = GetParam();
  const std::string out = testing::MakeTempDir("cuda-progress");
  TrainSpec spec = testing::TinySpec(recipe, 6, out);
  TrainOptions opts;
  opts.heartbeat_ms = 0;
  auto run = [&](const std::string& name, int64_t logging_steps, bool cuda) {
    TrainSpec s = spec;
    s.training.logging_steps = logging_steps;
    s.output_dir = out + "/" + name;
    std::FILE* f = std::fopen((out + "/" + name + ".ndjson").c_str(), "w");
    worker::EventWriter events(f);
    TrainResult r;
    if (cuda) {
      r = RunCudaTraining(s, opts, Distributed{}, events);
    } else {
      auto coll = MakeSingleProcessCollective();
      r = RunTraining(s, opts, *coll, events);
    }
    std::fclose(f);
    EXPECT_EQ(r.exit_code, 0) << name;
    return std::make_pair(r.losses, ProgressEvents(out + "/" + name + ".ndjson"));
  };
  const auto [every_losses, every] = run("every", 1, true);
  const auto [never_losses, never] = run("never", 1000000, true);
  const auto [cpu_losses, cpu] = run("cpu", 1, false);
  ASSERT_EQ(every_losses.size(), 6u);
  EXPECT_EQ(every_losses, never_losses);
  ASSERT_EQ(every.size(), 6u);
  ASSERT_EQ(cpu.size(), 6u);
  for (size_t i = 0; i < every.size(); ++i) {
    const nlohmann::json& g = every[i];
    const nlohmann::json& c = cpu[i];
    if (recipe == Recipe::kBf16) {
      EXPECT_FALSE(g.contains("fp8_amax_max")) << g.dump();
      EXPECT_FALSE(g.contains("fp8_saturation_fraction")) << g.dump();
      continue;
    }
    ASSERT_TRUE(g.contains("fp8_amax_max") && g.contains("fp8_saturation_fraction")) << g.dump();
    const double amax = g["fp8_amax_max"].get<double>(), sat = g["fp8_saturation_fraction"].get<double>();
    EXPECT_TRUE(std::isfinite(amax) && amax > 0) << g.dump();
    EXPECT_GE(sat, 0.0);
    EXPECT_LE(sat, 1.0);
    // Same weights and tokens, BF16 activations on the GPU against FP32 on the CPU: the largest
    // amax of a step is the same tensor's, close but not equal.
    const double cpu_amax = c["fp8_amax_max"].get<double>();
    EXPECT_NEAR(amax, cpu_amax, 0.25 * cpu_amax) << "step " << i + 1;
    // Blockwise scales come from each block's own amax: nothing clips, on either backend.
    if (recipe == Recipe::kFp8Blockwise) {
      EXPECT_EQ(sat, 0.0);
    }
  }
  std::filesystem::remove_all(out);
}

// A run stopped after step 3 and resumed from its checkpoint (weights, moments, FP8 scaling
// state through the host model) takes the steps of the uninterrupted run.
TEST_P(CudaProgress, ResumedRunRepeatsTheUninterruptedOne) {
  SKIP_WITHOUT_GPU();
  const std::string out = testing::MakeTempDir("cuda-resume");
  TrainSpec spec = testing::TinySpec(GetParam(), 6, out + "/full");
  spec.training.save_steps = 3;
  std::FILE* sink = std::fopen("/dev/null", "w");
  worker::EventWriter events(sink);
  TrainOptions opts;
  opts.heartbeat_ms = 0;
  const TrainResult full = RunCudaTraining(spec, opts, Distributed{}, events);
  spec.output_dir = out + "/parts";
  opts.stop_after_step = 3;
  const TrainResult first = RunCudaTraining(spec, opts, Distributed{}, events);
  opts.stop_after_step = 0;
  opts.resume_from = out + "/parts/checkpoints";
  const TrainResult rest = RunCudaTraining(spec, opts, Distributed{}, events);
  std::fclose(sink);
  ASSERT_EQ(full.losses.size(), 6u);
  ASSERT_EQ(first.losses.size(), 3u);
  ASSERT_EQ(rest.start_step, 3);
  ASSERT_EQ(rest.losses.size(), 3u);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), rest.losses.begin(), rest.losses.end());
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(joined[i], full.losses[i], 1e-5 * full.losses[i]) << "step " << i + 1;
  std::printf("resumed run bitwise equal to the uninterrupted one: %s\n", joined == full.losses ? "yes" : "no");
  std::filesystem::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Recipes, CudaProgress,
                         ::testing::Values(Recipe::kBf16, Recipe::kFp8Tensorwise, Recipe::kFp8Blockwise),
                         RecipeParamName);

}  // namespace
}  // namespace fp8::train::cuda
