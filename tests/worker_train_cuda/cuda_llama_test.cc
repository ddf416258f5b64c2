// SPDX-License-Identifier: Apache-2.0
// CudaLlamaModel against LlamaModel (the CPU reference) on the same weights and tokens: the
// loss and the gradient of every parameter tensor per recipe, over the family's variants
// (grouped-query attention, q/k/v biases, q/k norm, tied and untied head, llama3 rope scaling,
// head dims 32, 64, 128); a few training steps of both backends; then `fp8-worker train` on the
// llama-tiny preset with backend cuda, whose checkpoint the CPU model loads. Skips without a GPU.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/worker_train/test_util.h"
#include "tests/worker_train/worker_process.h"
#include "tests/worker_train_cuda/cuda_test_util.h"
#include "worker/common/events.h"
#include "worker/train/causal_lm.h"
#include "worker/train/checkpoint.h"
#include "worker/train/collective.h"
#include "worker/train/cuda/cuda_causal_lm.h"
#include "worker/train/cuda/cuda_llama_model.h"
#include "worker/train/cuda/cuda_trainer.h"
#include "worker/train/llama_model.h"
#include "worker/train/optimizer.h"
#include "worker/train/trainer.h"

namespace fp8::train::cuda {
namespace {

struct Variant {
  const char* name;
  int n_kv_head, head_dim;
  bool attention_bias, qk_norm, tied, llama3;
};

// 2 layers, C128, 4 query heads, T64, vocab 256, intermediate 256.
ModelConfig LlamaConfig(const Variant& v) {
  ModelConfig m;
  m.architecture = Architecture::kLlama;
  m.n_layer = 2;
  m.n_head = 4;
  m.d_model = 128;
  m.seq_len = 64;
  m.vocab_size = 256;
  m.n_kv_head = v.n_kv_head;
  m.intermediate_size = 256;
  m.head_dim = v.head_dim;
  m.rms_norm_eps = 1e-5;
  m.rope_theta = 10000;
  m.tie_word_embeddings = v.tied;
  m.attention_bias = v.attention_bias;
  m.qk_norm = v.qk_norm;
  if (v.llama3)
    m.rope_scaling = {.llama3 = true, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_position_embeddings = 16};
  return m;
}

// blockwise needs every width a multiple of 128, so its kv width (kv heads · head dim) is 128.
const Variant kVariants[] = {
    {"tiny_like", 2, 32, false, false, false, false},     // llama-tiny's attention: GQA 4/2, hd 32, untied
    {"mha_hd32_tied", 4, 32, false, false, true, false},  // kv width 128
    {"gqa_hd64_llama3", 2, 64, false, false, false, true},
    {"qwen2_bias_hd128", 1, 128, true, false, true, false},
    {"qwen3_qknorm_hd64", 2, 64, false, true, true, false},
};

struct Case {
  Variant variant;
  Recipe recipe;
  double loss_tol, grad_tol;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string n = std::string(info.param.variant.name) + "_" + RecipeName(info.param.recipe);
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

// The tolerances of cuda_trainer_test.cc's GPT-2 comparison. The q/k norm puts two more
// normalisations (and their bf16 gradients) between the attention and q_proj/k_proj: under the
// FP8 recipes their weight gradients (and k_norm's) came out ~25% noisier than the other
// variants' (H200: blockwise 0.106 vs 0.086, tensorwise 0.147 vs 0.120; bf16 0.012 vs 0.009),
// so the FP8 gradient bounds are 25% wider there.
std::vector<Case> AllCases() {
  std::vector<Case> out;
  for (const Variant& v : kVariants) {
    const double fp8_noise = v.qk_norm ? 1.25 : 1.0;
    out.push_back({v, Recipe::kBf16, 5e-3, 3e-2});
    out.push_back({v, Recipe::kFp8Tensorwise, 2e-2, 0.15 * fp8_noise});  // E5M2 gradients: ~5% rounding noise
    if ((v.n_kv_head * v.head_dim) % 128 == 0) out.push_back({v, Recipe::kFp8Blockwise, 2e-2, 0.1 * fp8_noise});
  }
  return out;
}

class CudaLlamaVsCpu : public ::testing::TestWithParam<Case> {};

TEST_P(CudaLlamaVsCpu, LossAndEveryTensorGradientMatch) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const ModelConfig cfg = LlamaConfig(c.variant);
  PrecisionConfig pc;
  pc.recipe = c.recipe;
  const int batch = 4;
  LlamaModel cpu(cfg, pc);
  cpu.InitWeights(7);
  // Non-trivial norm weights and biases, so their gradients and uses are exercised.
  std::mt19937 g(3);
  std::normal_distribution<float> d(0.0f, 0.1f);
  for (const ParamTensor& t : cpu.tensors())
    if (t.shape.size() == 1)
      for (int64_t i = 0; i < t.numel; ++i) cpu.params()[static_cast<size_t>(t.offset + i)] += d(g);
  std::vector<int32_t> in(static_cast<size_t>(batch * cfg.seq_len)), tg(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>(g() % 256);
    tg[i] = static_cast<int32_t>(g() % 256);
  }
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto gpu = MakeCudaCausalLm(cfg, pc, cpu.tensors(), batch, s);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  ASSERT_OK((*gpu)->UploadParams(cpu.params().data()));
  // Two steps' worth of forward/backward so tensorwise runs with a recorded history too.
  for (int rep = 0; rep < 2; ++rep) {
    cpu.ZeroGrad();
    const double cpu_loss = cpu.Forward(in.data(), tg.data(), batch);
    cpu.Backward(1.0f);
    ASSERT_OK((*gpu)->ZeroGrad());
    auto gl = (*gpu)->Forward(in.data(), tg.data(), batch, true, 1.0f);
    ASSERT_TRUE(gl.ok()) << gl.status().message();
    ASSERT_OK((*gpu)->Backward());
    EXPECT_NEAR(*gl, cpu_loss, c.loss_tol * cpu_loss) << "rep " << rep;
    std::vector<float> gg(static_cast<size_t>(cpu.num_params()));
    ASSERT_OK((*gpu)->DownloadGrads(gg.data()));
    double worst = 0;
    std::string worst_name;
    for (const ParamTensor& t : cpu.tensors()) {
      const double e = RelErr(gg.data() + t.offset, cpu.grads().data() + t.offset, static_cast<size_t>(t.numel));
      EXPECT_LT(e, c.grad_tol) << t.name << " (rep " << rep << ")";
      if (e > worst) worst = e, worst_name = t.name;
    }
    std::printf("%s %s rep %d: loss cpu %.6f gpu %.6f, worst gradient %s %.4f\n", c.variant.name, RecipeName(c.recipe), rep, cpu_loss,
                *gl, worst_name.c_str(), worst);
  }
  // The scaling state under the CPU model's layer names, restorable from the CPU's.
  const nlohmann::json state = (*gpu)->PrecisionState();
  const nlohmann::json cpu_state = cpu.PrecisionState();
  ASSERT_EQ(state.size(), cpu_state.size());
  for (const auto& [key, value] : cpu_state.items()) EXPECT_TRUE(state.contains(key)) << key;
  ASSERT_OK((*gpu)->RestorePrecisionState(cpu_state));
  // Evaluation must not move the scaling state: two evals give the same loss.
  auto e1 = (*gpu)->Forward(in.data(), tg.data(), batch, false, 1.0f);
  auto e2 = (*gpu)->Forward(in.data(), tg.data(), batch, false, 1.0f);
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_EQ(*e1, *e2);
  gpu->reset();
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaLlamaVsCpu, ::testing::ValuesIn(AllCases()), CaseName);

// The fused paths (epilogues, optimizer writing the casts, overwritten gradients) against the
// plain ones after a few AdamW steps: the same weights within rounding.
TEST(CudaLlamaFusion, FusedPathsMatchThePlainOnes) {
  SKIP_WITHOUT_GPU();
  const ModelConfig cfg = LlamaConfig(kVariants[4]);
  PrecisionConfig pc;
  LlamaModel cpu(cfg, pc);
  cpu.InitWeights(5);
  const int batch = 4;
  std::mt19937 g(9);
  std::vector<int32_t> in(static_cast<size_t>(batch * cfg.seq_len)), tg(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>(g() % 256);
    tg[i] = static_cast<int32_t>(g() % 256);
  }
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::vector<std::vector<float>> params;
  for (bool fused : {true, false}) {
    CudaModelOptions o;
    o.fused_epilogues = o.fused_optimizer = o.overwrite_grads = fused;
    auto m = MakeCudaCausalLm(cfg, pc, cpu.tensors(), batch, s, o);
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_OK((*m)->UploadParams(cpu.params().data()));
    Dev<float> mm(static_cast<size_t>(cpu.num_params())), vv(static_cast<size_t>(cpu.num_params()));
    for (int step = 1; step <= 3; ++step) {
      ASSERT_OK((*m)->ZeroGrad());
      ASSERT_TRUE((*m)->Forward(in.data(), tg.data(), batch, true, 1.0f).ok());
      ASSERT_OK((*m)->Backward());
      AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, static_cast<float>(1 - std::pow(0.9, step)),
                  static_cast<float>(1 - std::pow(0.95, step)), 1.0f};
      ASSERT_OK((*m)->OptimizerStep(a, mm.get(), vv.get()));
    }
    params.emplace_back(static_cast<size_t>(cpu.num_params()));
    ASSERT_OK((*m)->DownloadParams(params.back().data()));
  }
  for (const ParamTensor& t : cpu.tensors()) {
    std::vector<float> delta_f(static_cast<size_t>(t.numel)), delta_p(delta_f.size());
    for (int64_t i = 0; i < t.numel; ++i) {
      const size_t k = static_cast<size_t>(t.offset + i);
      delta_f[static_cast<size_t>(i)] = params[0][k] - cpu.params()[k];
      delta_p[static_cast<size_t>(i)] = params[1][k] - cpu.params()[k];
    }
    EXPECT_LT(RelErr(delta_f.data(), delta_p.data(), delta_f.size()), 2e-2) << t.name;  // the updates agree
  }
  cudaStreamDestroy(s);
}

TEST(CudaLlamaCreate, RefusesWhatTheGpuCannotRunNamingTheField) {
  ModelConfig cfg = LlamaConfig(kVariants[0]);
  PrecisionConfig pc;
  pc.recipe = Recipe::kFp8Blockwise;  // kv width 64: no whole 128 blocks
  auto m = CudaLlamaModel::Create(cfg, pc, LlamaParamLayout(cfg), 4, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("model.num_key_value_heads"), std::string::npos) << m.status().message();
  cfg.head_dim = 48;
  pc.recipe = Recipe::kBf16;
  auto h = CudaLlamaModel::Create(cfg, pc, LlamaParamLayout(cfg), 4, nullptr);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("model.head_dim"), std::string::npos) << h.status().message();
}

TrainResult TrainOn(bool cuda_backend, const TrainSpec& spec) {
  std::FILE* sink = std::fopen("/dev/null", "w");
  worker::EventWriter events(sink);
  TrainOptions opts;
  opts.heartbeat_ms = 0;
  TrainResult r;
  if (cuda_backend) {
    r = RunCudaTraining(spec, opts, Distributed{}, events);
  } else {
    auto coll = MakeSingleProcessCollective();
    r = RunTraining(spec, opts, *coll, events);
  }
  std::fclose(sink);
  return r;
}

class CudaLlamaTraining : public ::testing::TestWithParam<Case> {};

// The loop on both backends from the same initialisation and batches: every step's loss within
// the recipe's tolerance (a little more for the steps the rounding differences compound over).
TEST_P(CudaLlamaTraining, StepLossesMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const int steps = 6;
  TrainSpec spec = testing::TinySpec(c.recipe, steps, testing::MakeTempDir("cuda-llama-steps"));
  spec.model = LlamaConfig(c.variant);
  spec.model.preset = "llama-tiny";
  spec.training.learning_rate = 3e-3;
  spec.training.per_device_train_batch_size = 4;
  const TrainResult gpu = TrainOn(true, spec);
  const TrainResult cpu = TrainOn(false, spec);
  ASSERT_EQ(gpu.exit_code, 0);
  ASSERT_EQ(cpu.exit_code, 0);
  ASSERT_EQ(gpu.losses.size(), static_cast<size_t>(steps));
  ASSERT_EQ(cpu.losses.size(), gpu.losses.size());
  for (size_t i = 0; i < gpu.losses.size(); ++i) {
    std::printf("%s %s step %zu: loss cpu %.6f gpu %.6f\n", c.variant.name, RecipeName(c.recipe), i + 1, cpu.losses[i], gpu.losses[i]);
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 2 * c.loss_tol * cpu.losses[i]) << "step " << i + 1;
  }
  EXPECT_LT(gpu.losses.back(), gpu.losses.front());
  std::filesystem::remove_all(spec.output_dir);
}

INSTANTIATE_TEST_SUITE_P(Recipes, CudaLlamaTraining,
                         ::testing::Values(Case{kVariants[2], Recipe::kBf16, 5e-3, 0}, Case{kVariants[4], Recipe::kFp8Tensorwise, 2e-2, 0},
                                           Case{kVariants[3], Recipe::kFp8Blockwise, 2e-2, 0}),
                         CaseName);

// `fp8-worker train` on the llama-tiny preset with backend cuda, as the launcher runs it: it ends
// SUCCEEDED (exit 0, a done event), the loss falls, and the checkpoint loads into the CPU model.
TEST(CudaLlamaWorker, LlamaTinyPresetTrainsOnCudaAndTheCpuReadsItsCheckpoint) {
  SKIP_WITHOUT_GPU();
  const char* env_bin = std::getenv("FP8_WORKER_BINARY");  // the binaries carried elsewhere (scripts/gpu/)
  const std::string binary = env_bin ? env_bin : FP8_WORKER_BINARY;
  const std::string dir = testing::MakeTempDir("cuda-llama-worker");
  const int steps = 40;
  nlohmann::json s = testing::TinySpecJson(dir, steps, 8);
  s["model"] = {{"preset", "llama-tiny"}};
  s["backend"] = "cuda";
  s["training"]["learning_rate"] = 3e-3;
  s["training"]["save_steps"] = steps;
  testing::WorkerProcess w = testing::StartWorker(binary, {"train", "--spec", testing::WriteSpec(dir, s)}, {}, dir, "w");
  ASSERT_EQ(testing::WaitWorker(w), 0) << "see " << w.events_path;
  const auto events = testing::Events(w.events_path);
  const auto done = testing::OfType(events, "done");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]["result"].value("backend", ""), "cuda") << done[0].dump();
  const std::vector<double> losses = testing::Losses(w.events_path);
  ASSERT_EQ(losses.size(), static_cast<size_t>(steps));
  EXPECT_LT(losses.back(), losses.front() - 0.5) << "first " << losses.front() << " last " << losses.back();
  const std::string checkpoint = done[0]["result"].value("checkpoint", "");
  ASSERT_FALSE(checkpoint.empty()) << done[0].dump();
  auto spec = LoadTrainSpec(dir + "/spec.json");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_EQ(spec->model.architecture, Architecture::kLlama);
  auto cpu = MakeCausalLm(spec->model, spec->precision);
  AdamW adam(spec->training, false, cpu->tensors(), cpu->num_params());
  auto state = LoadCheckpoint(checkpoint, cpu.get(), &adam);
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ((*state)["step"].get<int64_t>(), steps);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp8::train::cuda
