// SPDX-License-Identifier: Apache-2.0
// Spec parsing/validation (errors name the field) and the llm.c shard format.
#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"
#include "worker/data/shards.h"
#include "worker/train/spec.h"

namespace fp8::train {
namespace {

using nlohmann::json;

json Minimal() { return json{{"data", {{"train", "x/*.bin"}}}, {"output_dir", "out"}}; }

std::string ErrorOf(const json& j) {
  auto s = ParseTrainSpec(j);
  return s.ok() ? std::string("OK") : s.status().message();
}

TEST(Spec, DefaultsFromTinyPresetAndZeros) {
  json j = Minimal();
  // What the daemon writes from the proto: every field, unset ones as 0 / "".
  j["model"] = {{"preset", "tiny"}, {"n_layer", 0}, {"n_head", 0}, {"d_model", 0}, {"seq_len", 0}, {"vocab_size", 0}};
  j["training"] = {{"max_steps", "200"}, {"learning_rate", 0}, {"lr_scheduler_type", ""}, {"seed", "0"}};
  j["precision"] = {{"recipe", "fp8-blockwise"}, {"amax_history_len", 0}, {"bf16_moments", false}};
  j["backend"] = "";
  auto s = ParseTrainSpec(j);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->model.n_layer, 2);
  EXPECT_EQ(s->model.d_model, 128);
  EXPECT_EQ(s->model.vocab_size, 256);
  EXPECT_EQ(s->training.max_steps, 200);
  EXPECT_DOUBLE_EQ(s->training.learning_rate, 1e-3);
  EXPECT_EQ(s->training.lr_scheduler_type, LrSchedule::kCosine);
  EXPECT_EQ(s->precision.recipe, Recipe::kFp8Blockwise);
  EXPECT_EQ(s->precision.amax_history_len, 16);
  EXPECT_EQ(s->backend, Backend::kAuto);
  // precision.recipe is not required: bf16 by default.
  auto plain = ParseTrainSpec(Minimal());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->precision.recipe, Recipe::kBf16);
}

TEST(Spec, ExplicitFieldsOverridePresetAndCamelCaseIsAccepted) {
  json j = Minimal();
  j["model"] = {{"preset", "gpt2-124m"}, {"nLayer", 3}};
  j["training"] = {{"perDeviceTrainBatchSize", 2}, {"maxSteps", "7"}};
  auto s = ParseTrainSpec(j);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->model.n_layer, 3);
  EXPECT_EQ(s->model.d_model, 768);
  EXPECT_EQ(s->training.per_device_train_batch_size, 2);
  EXPECT_EQ(s->training.max_steps, 7);
}

// Reading errors; the checks of values are the shared case table's (tests/spec_cases).
TEST(Spec, ReadingErrorsNameTheField) {
  struct Case { json patch; const char* prefix; };
  const Case cases[] = {
      {{{"training", {{"learnin_rate", 0.1}}}}, "training.learnin_rate: unknown field"},
      {{{"trainingArgs", {{"seed", 1}}}}, "trainingArgs: unknown field"},
      {{{"colour", "blue"}}, "colour: unknown field"},
      {{{"training", {{"seed", "abc"}}}}, "training.seed: invalid value"},
      {{{"training", {{"max_steps", 1.5}}}}, "training.max_steps: invalid value"},
      {{{"model", 5}}, "model: must be an object"},
      {{{"training", {{"learning_rate", 20}}}}, "training.learning_rate: must be in (0, 10]"},
  };
  for (const Case& c : cases) {
    json j = Minimal();
    j.merge_patch(c.patch);
    const std::string err = ErrorOf(j);
    EXPECT_EQ(err.rfind(c.prefix, 0), 0u) << "patch " << c.patch.dump() << " gave: " << err;
  }
}

TEST(Spec, YamlIsReadLikeJson) {
  const std::string dir = testing::MakeTempDir("yaml");
  const std::string path = dir + "/spec.yaml";
  std::ofstream(path) << "model: {preset: tiny}\n"
                         "data: {train: \"a/*.bin\", val: 'b/*.bin'}\n"
                         "precision: {recipe: fp8-tensorwise, margin: 1, bf16_moments: true}\n"
                         "training: {max_steps: 12, learning_rate: 3e-4}\n"
                         "output_dir: out\n";
  auto s = LoadTrainSpec(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->training.max_steps, 12);
  EXPECT_DOUBLE_EQ(s->training.learning_rate, 3e-4);
  EXPECT_EQ(s->precision.recipe, Recipe::kFp8Tensorwise);
  EXPECT_EQ(s->precision.margin, 1);
  EXPECT_TRUE(s->precision.bf16_moments);
  EXPECT_EQ(s->data.val, "b/*.bin");
  EXPECT_EQ(s->output_dir, "out");
}

TEST(Shards, RoundTripAndValidation) {
  const std::string dir = testing::MakeTempDir("shards");
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 200);
  ASSERT_TRUE(data::WriteShard(dir + "/a.bin", tokens).ok());
  auto back = data::ReadShard(dir + "/a.bin");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, tokens);

  // Header: 256 int32 with magic, version, count.
  std::ifstream in(dir + "/a.bin", std::ios::binary);
  int32_t header[3];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 1000);

  std::ofstream(dir + "/bad.bin", std::ios::binary) << std::string(2048, 'x');
  auto bad = data::ReadShard(dir + "/bad.bin");
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("magic"), std::string::npos);

  std::filesystem::resize_file(dir + "/a.bin", 1024 + 100);
  EXPECT_EQ(data::ReadShard(dir + "/a.bin").status().code(), StatusCode::kDataLoss);

  EXPECT_EQ(data::TokenDataset::Load(dir + "/none*.bin", 8, 256).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(data::WriteShard(dir + "/big.bin", tokens).ok());
  auto vocab = data::TokenDataset::Load(dir + "/big.bin", 8, 100);
  EXPECT_EQ(vocab.status().code(), StatusCode::kDataLoss);
}

TEST(Shards, SamplingIsAPureFunctionOfSeedAndIndex) {
  auto ds = data::TokenDataset::Load(testing::CorpusShardDir() + "/train_*.bin", 64, 256);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  std::vector<int32_t> a(64), at(64), b(64), bt(64);
  ds->Sample(42, 1234, a.data(), at.data());
  ds->Sample(42, 1234, b.data(), bt.data());
  EXPECT_EQ(a, b);
  for (int i = 0; i + 1 < 64; ++i) EXPECT_EQ(at[i], a[i + 1]);  // targets are inputs shifted by one
  ds->Sample(42, 1235, b.data(), bt.data());
  EXPECT_NE(a, b);
  ds->Sample(43, 1234, b.data(), bt.data());
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace fp8::train
