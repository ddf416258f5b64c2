// SPDX-License-Identifier: Apache-2.0
// LlamaModel on the CPU: gradients against finite differences in every variant, training lowers
// the loss with each recipe, an interrupted run resumes bit for bit, and checkpoints name its
// tensors and scaling state as transformers names the layers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>

#include "test_util.h"
#include "worker/common/events.h"
#include "worker/train/causal_lm.h"
#include "worker/train/checkpoint.h"
#include "worker/train/collective.h"
#include "worker/train/llama_layers.h"
#include "worker/train/llama_model.h"
#include "worker/train/optimizer.h"
#include "worker/train/trainer.h"

namespace fp8::train {
namespace {

using testing::MakeTempDir;

struct Variant {
  const char* name;
  int n_kv_head;
  bool attention_bias, qk_norm, tied, llama3;
  int head_dim;  // 0: d_model / n_head
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

ModelConfig SmallLlama(const Variant& v) {
  ModelConfig m;
  m.architecture = Architecture::kLlama;
  m.n_layer = 2;
  m.n_head = 4;
  m.d_model = 32;
  m.seq_len = 8;
  m.vocab_size = 64;
  m.n_kv_head = v.n_kv_head;
  m.intermediate_size = 48;
  m.head_dim = v.head_dim ? v.head_dim : m.d_model / m.n_head;
  m.rms_norm_eps = 1e-5;
  m.rope_theta = 10000;
  m.tie_word_embeddings = v.tied;
  m.attention_bias = v.attention_bias;
  m.qk_norm = v.qk_norm;
  if (v.llama3) m.rope_scaling = {.llama3 = true, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                                  .original_max_position_embeddings = 4};
  return m;
}

// Per parameter tensor: the derivative of the loss along the (unit) gradient direction, by
// central differences, must equal the gradient's norm (as tests/worker_train does for GPT-2).
// `tol` is relative.
void CheckGradients(const Variant& v, Recipe recipe, double tol) {
  PrecisionConfig prec;
  prec.recipe = recipe;
  const ModelConfig cfg = SmallLlama(v);
  std::unique_ptr<CausalLm> model = MakeCausalLm(cfg, prec);
  ASSERT_NE(dynamic_cast<LlamaModel*>(model.get()), nullptr);
  model->InitWeights(7);
  // Larger weights than the init so every path carries signal; norms and biases away from 1/0.
  for (const ParamTensor& t : model->tensors()) {
    float* p = model->params().data() + t.offset;
    for (int64_t i = 0; i < t.numel; ++i) {
      if (t.shape.size() == 2) p[i] *= 5.0f;
      else p[i] += 0.3f * std::sin(static_cast<float>(i) * 1.7f + 0.5f);
    }
  }
  const int batch = 2, t = cfg.seq_len;
  std::vector<int32_t> in(batch * t), tg(batch * t);
  for (int i = 0; i < batch * t; ++i) {
    in[i] = (i * 13 + 5) % 64;
    tg[i] = (i * 7 + 3) % 64;
  }
  model->ZeroGrad();
  model->Forward(in.data(), tg.data(), batch);
  model->Backward(1.0f);
  const std::vector<float> grads = model->grads();
  const std::vector<float> base = model->params();
  int checked = 0;
  for (const ParamTensor& tensor : model->tensors()) {
    double norm2 = 0;
    for (int64_t i = 0; i < tensor.numel; ++i) norm2 += static_cast<double>(grads[tensor.offset + i]) * grads[tensor.offset + i];
    const double norm = std::sqrt(norm2);
    ASSERT_GT(norm, 1e-7) << tensor.name << ": no gradient reaches it";
    const double eps = 2e-3;
    auto loss_at = [&](double sign) {
      std::vector<float>& p = model->params();
      for (int64_t i = 0; i < tensor.numel; ++i)
        p[tensor.offset + i] = static_cast<float>(base[tensor.offset + i] + sign * eps * grads[tensor.offset + i] / norm);
      const double l = model->Forward(in.data(), tg.data(), batch, /*training=*/false);
      p = base;
      return l;
    };
    const double fd = (loss_at(+1) - loss_at(-1)) / (2 * eps);
    EXPECT_NEAR(fd, norm, tol * norm + 2e-5) << tensor.name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(model->tensors().size()));
}

class LlamaGradients : public ::testing::TestWithParam<Variant> {};

TEST_P(LlamaGradients, DirectionalDerivativePerTensorFp32) { CheckGradients(GetParam(), Recipe::kFp32, 2e-2); }
// The bf16 recipe rounds every GEMM operand in the forward pass, so its loss is only piecewise
// smooth: finite differences of it scatter around the (straight-through) gradient by tens of
// percent at this size. Its gradient is checked against the FP32 one instead, which the finite
// differences above check: per tensor, the same direction (cosine) and size.
TEST_P(LlamaGradients, Bf16GradientFollowsFp32) {
  const ModelConfig cfg = SmallLlama(GetParam());
  std::vector<std::vector<float>> grads;
  std::vector<ParamTensor> tensors;
  for (Recipe recipe : {Recipe::kFp32, Recipe::kBf16}) {
    PrecisionConfig prec;
    prec.recipe = recipe;
    std::unique_ptr<CausalLm> model = MakeCausalLm(cfg, prec);
    model->InitWeights(11);
    for (float& p : model->params()) p *= 3.0f;
    std::vector<int32_t> in(2 * cfg.seq_len), tg(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<int32_t>((i * 13 + 5) % 64);
      tg[i] = static_cast<int32_t>((i * 7 + 3) % 64);
    }
    model->ZeroGrad();
    model->Forward(in.data(), tg.data(), 2);
    model->Backward(1.0f);
    grads.push_back(model->grads());
    tensors = model->tensors();
  }
  for (const ParamTensor& t : tensors) {
    double dot = 0, a2 = 0, b2 = 0;
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
      dot += static_cast<double>(grads[0][i]) * grads[1][i];
      a2 += static_cast<double>(grads[0][i]) * grads[0][i];
      b2 += static_cast<double>(grads[1][i]) * grads[1][i];
    }
    ASSERT_GT(a2, 0) << t.name;
    EXPECT_GT(dot / std::sqrt(a2 * b2), 0.99) << t.name;
    EXPECT_NEAR(std::sqrt(b2 / a2), 1.0, 0.05) << t.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, LlamaGradients,
    ::testing::Values(Variant{"MultiHead", 4, false, false, false, false, 0},
                      Variant{"GqaLlama3Rope", 2, false, false, false, true, 0},
                      Variant{"MultiQueryQkvBiasTied", 1, true, false, true, false, 0},
                      Variant{"QkNormHeadDim16", 2, false, true, false, false, 16}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LlamaLayout, HuggingFaceNamesAndShapes) {
  const ModelConfig cfg = SmallLlama({"", 2, true, true, false, false, 16});
  std::vector<std::string> names;
  for (const ParamTensor& t : LlamaParamLayout(cfg)) names.push_back(t.name);
  const std::vector<std::string> first = {"model.embed_tokens.weight",
                                          "model.layers.0.input_layernorm.weight",
                                          "model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.0.self_attn.q_proj.bias",
                                          "model.layers.0.self_attn.k_proj.weight",
                                          "model.layers.0.self_attn.k_proj.bias",
                                          "model.layers.0.self_attn.v_proj.weight",
                                          "model.layers.0.self_attn.v_proj.bias",
                                          "model.layers.0.self_attn.o_proj.weight",
                                          "model.layers.0.self_attn.q_norm.weight",
                                          "model.layers.0.self_attn.k_norm.weight",
                                          "model.layers.0.post_attention_layernorm.weight",
                                          "model.layers.0.mlp.gate_proj.weight",
                                          "model.layers.0.mlp.up_proj.weight",
                                          "model.layers.0.mlp.down_proj.weight"};
  ASSERT_GE(names.size(), first.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + static_cast<long>(first.size())), first);
  EXPECT_EQ(names.back(), "lm_head.weight");
  const auto layout = LlamaParamLayout(cfg);
  EXPECT_EQ(layout[2].shape, (std::vector<int64_t>{4 * 16, 32}));  // q_proj: n_head·head_dim × d_model
  EXPECT_EQ(layout[4].shape, (std::vector<int64_t>{2 * 16, 32}));  // k_proj: n_kv_head·head_dim
  EXPECT_EQ(layout[8].shape, (std::vector<int64_t>{32, 4 * 16}));  // o_proj
  LlamaModel model(cfg, PrecisionConfig{});
  EXPECT_EQ(model.LinearLayerNames().size(), 2u * 7u);
  EXPECT_EQ(model.LinearLayerNames()[6], "model.layers.0.mlp.down_proj");
}

// MFU's FLOP count, from the layout: 6 per weight a token multiplies (the untied input embedding
// is a lookup) plus the attention's 12·L·(n_head·head_dim)·T, head_dim not d_model/n_head.
TEST(LlamaFlops, CountTheMultipliedWeightsAndTheHeadsWidth) {
  for (const bool tied : {false, true}) {
    ModelConfig cfg = SmallLlama({"", 2, false, true, tied, false, 16});
    ASSERT_NE(cfg.n_head * cfg.head_dim, cfg.d_model);
    double weights = 0;
    int64_t total = 0;
    for (const ParamTensor& t : LlamaParamLayout(cfg)) {
      total += t.numel;
      if (tied || t.name != "model.embed_tokens.weight") weights += static_cast<double>(t.numel);
    }
    const double attention = 12.0 * cfg.n_layer * cfg.n_head * cfg.head_dim * cfg.seq_len;
    EXPECT_DOUBLE_EQ(TrainFlopsPerToken(cfg, total), 6 * weights + attention) << "tied " << tied;
  }
}

TEST(LlamaRope, Llama3FrequenciesFollowTheThreeBands) {
  ModelConfig cfg = SmallLlama({"", 4, false, false, false, false, 0});
  cfg.head_dim = 128;
  cfg.rope_theta = 500000;
  const std::vector<double> plain = RopeInverseFrequencies(cfg);
  cfg.rope_scaling = {.llama3 = true, .factor = 32, .low_freq_factor = 1, .high_freq_factor = 4,
                      .original_max_position_embeddings = 8192};
  const std::vector<double> scaled = RopeInverseFrequencies(cfg);
  ASSERT_EQ(plain.size(), 64u);
  int low = 0, high = 0, mid = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * M_PI / plain[i];
    if (wavelen < 8192 / 4.0) {
      EXPECT_EQ(scaled[i], plain[i]) << i;  // short wavelengths kept
      ++high;
    } else if (wavelen > 8192 / 1.0) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 32) << i;  // long ones stretched by the factor
      ++low;
    } else {
      EXPECT_LT(scaled[i], plain[i]) << i;
      EXPECT_GT(scaled[i], plain[i] / 32) << i;
      ++mid;
    }
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(high, 0);
  EXPECT_GT(mid, 0);
}

TrainSpec LlamaTinySpec(Recipe recipe, int64_t steps, const std::string& dir) {
  TrainSpec s = testing::TinySpec(recipe, steps, dir);
  s.model = SmallLlama({"", 2, false, false, false, false, 0});
  s.model.preset = "llama-tiny";
  s.model.d_model = 64;
  s.model.head_dim = 16;
  s.model.intermediate_size = 128;
  s.model.seq_len = 32;
  s.model.vocab_size = 256;
  return s;
}

TrainResult Train(const TrainSpec& spec, const TrainOptions& opts = {}) {
  std::FILE* sink = std::tmpfile();
  worker::EventWriter events(sink);
  auto coll = MakeSingleProcessCollective();
  TrainOptions o = opts;
  o.heartbeat_ms = 0;
  TrainResult r = RunTraining(spec, o, *coll, events);
  std::fclose(sink);
  return r;
}

double Mean(const std::vector<double>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(to), 0.0) /
         static_cast<double>(to - from);
}

TEST(LlamaTraining, LossFallsWithEveryRecipe) {
  for (Recipe recipe : {Recipe::kBf16, Recipe::kFp8Tensorwise, Recipe::kFp8Blockwise}) {
    TrainSpec spec = LlamaTinySpec(recipe, 60, MakeTempDir("llama-train"));
    spec.training.learning_rate = 3e-3;
    const TrainResult r = Train(spec);
    ASSERT_EQ(r.exit_code, 0) << RecipeName(recipe);
    ASSERT_EQ(r.losses.size(), 60u);
    const double first = Mean(r.losses, 0, 5), last = Mean(r.losses, 55, 60);
    std::printf("%s: mean loss of steps 1-5 %.4f, of steps 56-60 %.4f\n", RecipeName(recipe), first, last);
    EXPECT_NEAR(r.losses.front(), std::log(256.0), 0.3) << RecipeName(recipe);  // uniform guess over bytes
    EXPECT_LT(last, 0.75 * first) << RecipeName(recipe);
  }
}

// Interrupted at step 6 and resumed: every step's loss equals the uninterrupted run's, bit for
// bit (fp8-tensorwise: the scaling histories come back under the layers' own names).
TEST(LlamaTraining, InterruptedRunRepeatsUninterruptedBitwise) {
  for (Recipe recipe : {Recipe::kFp8Tensorwise, Recipe::kFp8Blockwise}) {
    auto spec_for = [&](const std::string& dir) {
      TrainSpec s = LlamaTinySpec(recipe, 12, dir);
      s.model.qk_norm = true;
      s.model.n_kv_head = 1;
      s.training.per_device_train_batch_size = 4;
      s.training.warmup_steps = 3;
      return s;
    };
    const TrainResult full = Train(spec_for(MakeTempDir("llama-full")));
    ASSERT_EQ(full.exit_code, 0);
    const std::string dir = MakeTempDir("llama-resumed");
    TrainOptions stop;
    stop.stop_after_step = 6;
    const TrainResult first = Train(spec_for(dir), stop);
    ASSERT_EQ(first.losses.size(), 6u);
    TrainOptions resume;
    resume.resume_from = dir + "/checkpoints";
    const TrainResult second = Train(spec_for(dir), resume);
    ASSERT_EQ(second.exit_code, 0);
    ASSERT_EQ(second.losses.size(), 6u);
    std::vector<double> joined = first.losses;
    joined.insert(joined.end(), second.losses.begin(), second.losses.end());
    for (size_t i = 0; i < 12; ++i) EXPECT_EQ(joined[i], full.losses[i]) << RecipeName(recipe) << " step " << i + 1;

    // The checkpoint holds transformers' names, and (tensorwise) a scaling state per layer.
    const TrainSpec spec = spec_for(dir);
    std::unique_ptr<CausalLm> model = MakeCausalLm(spec.model, spec.precision);
    AdamW opt(spec.training, false, model->tensors(), model->num_params());
    auto state = LoadCheckpoint(dir + "/checkpoints/step-12", model.get(), &opt);
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    EXPECT_EQ((*state)["spec"]["model"]["architecture"], "llama");
    EXPECT_EQ((*state)["spec"]["model"]["qk_norm"], true);
    if (recipe == Recipe::kFp8Tensorwise) {
      EXPECT_EQ((*state)["fp8_scaling"].size(), 2u * 7u);
      EXPECT_TRUE((*state)["fp8_scaling"].contains("model.layers.1.self_attn.k_proj"));
    }
  }
}

}  // namespace
}  // namespace fp8::train
