// SPDX-License-Identifier: Apache-2.0
// The whole model: gradients against finite differences (FP32 recipe), the training loop on the
// shipped corpus (loss falls; FP8 recipes end within 2% of bf16), bitwise resume.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "test_util.h"
#include "worker/common/events.h"
#include "kernels/fp8_format.h"
#include "worker/data/shards.h"
#include "worker/train/checkpoint.h"
#include "worker/train/collective.h"
#include "worker/train/model.h"
#include "worker/train/optimizer.h"
#include "worker/train/trainer.h"

namespace fp8::train {
namespace {

using testing::MakeTempDir;
using testing::TinySpec;

ModelConfig SmallModel() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 32;
  m.seq_len = 8;
  m.vocab_size = 64;
  return m;
}

// Per parameter tensor: the derivative of the loss along the (unit) gradient direction, by
// central differences, must equal the gradient's norm. Sensitive to any wrong block of the
// backward pass, robust to float noise.
TEST(ModelGradients, DirectionalDerivativePerTensorFp32) {
  PrecisionConfig prec;
  prec.recipe = Recipe::kFp32;
  GptModel model(SmallModel(), prec);
  model.InitWeights(7);
  // Larger weights than GPT-2's init so every path carries signal.
  for (float& p : model.params()) p *= 5.0f;
  const int batch = 2, t = 8;
  std::vector<int32_t> in(batch * t), tg(batch * t);
  for (int i = 0; i < batch * t; ++i) {
    in[i] = (i * 13 + 5) % 64;
    tg[i] = (i * 7 + 3) % 64;
  }
  model.ZeroGrad();
  model.Forward(in.data(), tg.data(), batch);
  model.Backward(1.0f);
  const std::vector<float> grads = model.grads();
  const std::vector<float> base = model.params();
  for (const ParamTensor& tensor : model.tensors()) {
    double norm2 = 0;
    for (int64_t i = 0; i < tensor.numel; ++i) norm2 += static_cast<double>(grads[tensor.offset + i]) * grads[tensor.offset + i];
    const double norm = std::sqrt(norm2);
    if (norm < 1e-6) continue;
    const double eps = 2e-3;  // the ×5 weights make the loss strongly curved: keep the step small
    auto loss_at = [&](double sign) {
      std::vector<float>& p = model.params();
      for (int64_t i = 0; i < tensor.numel; ++i)
        p[tensor.offset + i] = static_cast<float>(base[tensor.offset + i] + sign * eps * grads[tensor.offset + i] / norm);
      const double l = model.Forward(in.data(), tg.data(), batch);
      p = base;
      return l;
    };
    const double fd = (loss_at(+1) - loss_at(-1)) / (2 * eps);
    EXPECT_NEAR(fd, norm, 2e-2 * norm + 2e-5) << tensor.name;
  }
}

TEST(ModelGradients, GradientsAccumulateAcrossBackwardCalls) {
  PrecisionConfig prec;
  prec.recipe = Recipe::kFp32;
  GptModel model(SmallModel(), prec);
  model.InitWeights(1);
  std::vector<int32_t> in(16, 3), tg(16, 4);
  model.ZeroGrad();
  model.Forward(in.data(), tg.data(), 2);
  model.Backward(1.0f);
  const std::vector<float> once = model.grads();
  model.Forward(in.data(), tg.data(), 2);
  model.Backward(1.0f);
  for (size_t i = 0; i < once.size(); i += 97) EXPECT_FLOAT_EQ(model.grads()[i], 2 * once[i]);
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

double MeanLast(const std::vector<double>& v, size_t n) {
  n = std::min(n, v.size());
  return std::accumulate(v.end() - static_cast<long>(n), v.end(), 0.0) / static_cast<double>(n);
}

TrainResult TinyRun(Recipe recipe) {
  TrainSpec spec = TinySpec(recipe, 200, MakeTempDir("recipe"));
  spec.training.eval_steps = 200;
  return Train(spec);
}

// One test for the three 200-step runs (CTest starts every test in a process of its own, so
// separate tests could not share the bf16 baseline).
TEST(Training, LossFallsAndFp8RecipesEndWithinTwoPercentOfBf16) {
  const TrainResult bf16 = TinyRun(Recipe::kBf16);
  ASSERT_EQ(bf16.exit_code, 0);
  ASSERT_EQ(bf16.losses.size(), 200u);
  const double first = bf16.losses.front(), ref = MeanLast(bf16.losses, 20);
  std::printf("bf16: first loss %.4f, last-20 mean train loss %.4f, eval loss %.4f\n", first, ref, bf16.eval_loss);
  EXPECT_NEAR(first, std::log(256.0), 0.3);  // a fresh model guesses uniformly over bytes
  EXPECT_LT(ref, 0.5 * first);
  EXPECT_GT(bf16.eval_loss, 0);
  EXPECT_LT(bf16.eval_loss, 0.5 * first);

  for (Recipe recipe : {Recipe::kFp8Tensorwise, Recipe::kFp8Blockwise}) {
    const TrainResult fp8 = TinyRun(recipe);
    ASSERT_EQ(fp8.exit_code, 0);
    const double got = MeanLast(fp8.losses, 20);
    std::printf("%s: last-20 mean train loss %.4f (bf16 %.4f), eval loss %.4f (bf16 %.4f)\n", RecipeName(recipe), got,
                ref, fp8.eval_loss, bf16.eval_loss);
    EXPECT_LT(std::abs(got - ref) / ref, 0.02) << RecipeName(recipe);
    EXPECT_LT(std::abs(fp8.eval_loss - bf16.eval_loss) / bf16.eval_loss, 0.02) << RecipeName(recipe);
  }
}

struct ResumeCase {
  const char* name;
  Recipe recipe;
  bool bf16_moments;
  int accum;
};

void PrintTo(const ResumeCase& c, std::ostream* os) { *os << c.name; }

class Resume : public ::testing::TestWithParam<ResumeCase> {};

// Interrupted at step 13 (as SIGTERM would: checkpoint; the knob exits 75, SIGTERM 76) and
// resumed: every step's loss
// equals the uninterrupted run's, bit for bit.
TEST_P(Resume, InterruptedRunRepeatsUninterruptedBitwise) {
  const ResumeCase& c = GetParam();
  auto spec_for = [&](const std::string& dir) {
    TrainSpec s = TinySpec(c.recipe, 30, dir);
    s.precision.bf16_moments = c.bf16_moments;
    s.training.gradient_accumulation_steps = c.accum;
    s.training.per_device_train_batch_size = 4;
    s.training.warmup_steps = 5;
    s.training.eval_steps = 10;  // evaluation must not disturb training
    return s;
  };
  const TrainResult full = Train(spec_for(MakeTempDir("full")));
  ASSERT_EQ(full.exit_code, 0);
  ASSERT_EQ(full.losses.size(), 30u);

  const std::string dir = MakeTempDir("resumed");
  TrainOptions stop;
  stop.stop_after_step = 13;
  const TrainResult first = Train(spec_for(dir), stop);
  EXPECT_EQ(first.exit_code, worker::kExitTemporary);
  EXPECT_TRUE(first.interrupted);
  ASSERT_EQ(first.losses.size(), 13u);
  ASSERT_TRUE(std::filesystem::exists(dir + "/checkpoints/step-13/model.safetensors"));

  TrainOptions resume;
  resume.resume_from = dir + "/checkpoints";
  const TrainResult second = Train(spec_for(dir), resume);
  ASSERT_EQ(second.exit_code, 0);
  EXPECT_EQ(second.start_step, 13);
  ASSERT_EQ(second.losses.size(), 17u);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(joined[i], full.losses[i]) << "step " << i + 1;
  EXPECT_EQ(second.eval_loss, full.eval_loss);
}

INSTANTIATE_TEST_SUITE_P(Recipes, Resume,
                         ::testing::Values(ResumeCase{"Bf16", Recipe::kBf16, false, 1},
                                           ResumeCase{"Fp8TensorwiseAccum2", Recipe::kFp8Tensorwise, false, 2},
                                           ResumeCase{"Fp8BlockwiseBf16Moments", Recipe::kFp8Blockwise, true, 1}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Checkpoints, KeepNewestAndLoadBack) {
  const std::string dir = MakeTempDir("ckpt");
  TrainSpec spec = TinySpec(Recipe::kFp8Tensorwise, 6, dir);
  spec.training.save_steps = 1;
  spec.training.save_total_limit = 2;
  const TrainResult r = Train(spec);
  ASSERT_EQ(r.exit_code, 0);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/checkpoints")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-5", "step-6"}));  // no temporaries either

  auto found = FindCheckpoint(dir + "/checkpoints");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(std::filesystem::path(*found).filename(), "step-6");
  GptModel model(spec.model, spec.precision);
  AdamW opt(spec.training, false, model.tensors(), model.num_params());
  auto state = LoadCheckpoint(*found, &model, &opt);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ((*state)["step"], 6);
  EXPECT_EQ((*state)["loss_history"].size(), 6u);
  EXPECT_FALSE((*state)["fp8_scaling"].empty());
  EXPECT_EQ((*state)["data"]["samples_seen"], 6 * 8);

  // A model of another shape is refused, naming the tensor.
  TrainSpec other = spec;
  other.model.d_model = 64;
  GptModel wrong(other.model, other.precision);
  AdamW wrong_opt(other.training, false, wrong.tensors(), wrong.num_params());
  auto bad = LoadCheckpoint(*found, &wrong, &wrong_opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("wte.weight"), std::string::npos) << bad.status().message();
}

TEST(Precision, RoundToBf16MatchesKernelsBitForBit) {
  std::vector<float> x;
  for (uint32_t i = 0; i < 200000; ++i) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(data::Mix64(i))));
  for (float v : {0.0f, -0.0f, 1.0f, 3.4028235e38f, -3.4028235e38f, INFINITY, -INFINITY, NAN, 1e-40f})
    x.push_back(v);
  std::vector<float> y(x.size());
  RoundToBf16(x.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = kernels::Bf16ToFloat(kernels::FloatToBf16(x[i]));
    ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(want)) << "x = " << x[i];
  }
}

TEST(Schedules, WarmupThenCosineToZero) {
  TrainingConfig t;
  t.learning_rate = 1.0;
  t.max_steps = 110;
  t.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(LearningRateAt(t, 0), 0.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(t, 5), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateAt(t, 10), 1.0);
  EXPECT_NEAR(LearningRateAt(t, 60), 0.5, 1e-12);
  EXPECT_NEAR(LearningRateAt(t, 110), 0.0, 1e-12);
  t.lr_scheduler_type = LrSchedule::kLinear;
  EXPECT_NEAR(LearningRateAt(t, 60), 0.5, 1e-12);
  t.lr_scheduler_type = LrSchedule::kConstant;
  EXPECT_DOUBLE_EQ(LearningRateAt(t, 100), 1.0);
}

}  // namespace
}  // namespace fp8::train
