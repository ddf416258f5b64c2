// SPDX-License-Identifier: Apache-2.0
#include "tests/worker_calibrate/model_fixture.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/fp8_format.h"

namespace fp8::calibrate::testing {

namespace fs = std::filesystem;
using safetensors::DType;

std::vector<float> FixtureTensor::Values() const {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DType::F32) {
      std::memcpy(&v[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      v[i] = dtype == DType::BF16 ? kernels::Bf16ToFloat(h) : kernels::HalfToFloat(h);
    }
  }
  return v;
}

FixtureTensor RandomTensor(const std::string& name, DType dtype, std::vector<int64_t> shape, uint32_t seed,
                           float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  FixtureTensor t{name, dtype, shape, {}, ""};
  const int64_t cols = shape.size() == 2 ? shape[1] : 1;
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  t.bytes.resize(n * safetensors::DTypeSize(dtype));
  for (size_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(i) / cols;
    // Rows of very different magnitude (so block scales differ), exact zeros, and tiny values
    // that fall into E4M3's subnormal range (or flush to zero) once divided by the scale.
    float v = normal(rng) * scale * (row % 7 == 0 ? 30.0f : 1.0f);
    if (i % 97 == 0) v = 0.0f;
    if (i % 89 == 0) v = scale * 1e-4f;
    if (dtype == DType::F32) {
      std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    } else {
      uint16_t h = dtype == DType::BF16 ? kernels::FloatToBf16(v) : kernels::FloatToHalf(v);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  return t;
}

void WriteSingleShard(const std::string& path, const std::vector<FixtureTensor>& tensors) {
  std::vector<safetensors::TensorData> data;
  for (const auto& t : tensors) data.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  Status st = safetensors::WriteFile(path, data, {{"format", "pt"}});
  ASSERT_TRUE(st.ok()) << st.ToString();
}

std::vector<std::string> DefaultQuantizedNames() {
  return {"model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.self_attn.o_proj.weight",
          "model.layers.0.mlp.up_proj.weight",        "model.layers.0.mlp.down_proj.weight",
          "model.layers.1.self_attn.qkv_proj.weight", "model.layers.1.mlp.experts.0.down_proj.weight"};
}

FixtureModel WriteFixtureModel(const std::string& dir, uint32_t seed) {
  fs::create_directories(dir);
  FixtureModel m;
  m.dir = dir;
  struct Def {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
    int shard;
  };
  const std::vector<Def> defs = {
      {"model.embed_tokens.weight", DType::BF16, {300, 136}, 0},
      {"model.layers.0.input_layernorm.weight", DType::BF16, {136}, 0},
      {"model.layers.0.self_attn.qkv_proj.weight", DType::BF16, {408, 136}, 0},
      {"model.layers.0.self_attn.qkv_proj.bias", DType::BF16, {408}, 0},
      {"model.layers.0.self_attn.o_proj.weight", DType::F32, {136, 136}, 0},
      {"model.layers.0.mlp.up_proj.weight", DType::BF16, {260, 136}, 1},
      {"model.layers.0.mlp.down_proj.weight", DType::F16, {136, 260}, 1},
      {"model.layers.0.post_attention_layernorm.weight", DType::F32, {136}, 1},
      {"model.layers.1.self_attn.qkv_proj.weight", DType::BF16, {129, 257}, 1},
      {"model.layers.1.mlp.gate.weight", DType::BF16, {4, 136}, 2},
      {"model.layers.1.mlp.experts.0.down_proj.weight", DType::BF16, {100, 50}, 2},
      {"model.norm.weight", DType::BF16, {136}, 2},
      {"lm_head.weight", DType::BF16, {300, 136}, 2},
  };
  m.shards = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
              "model-00003-of-00003.safetensors"};
  std::vector<std::vector<FixtureTensor>> per_shard(3);
  nlohmann::json weight_map = nlohmann::json::object();
  uint32_t s = seed;
  for (const auto& d : defs) {
    FixtureTensor t = RandomTensor(d.name, d.dtype, d.shape, ++s);
    t.shard = m.shards[d.shard];
    weight_map[t.name] = t.shard;
    per_shard[d.shard].push_back(t);
    m.tensors[t.name] = t;
  }
  for (int i = 0; i < 3; ++i) WriteSingleShard((fs::path(dir) / m.shards[i]).string(), per_shard[i]);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  std::ofstream((fs::path(dir) / "model.safetensors.index.json").string()) << index.dump(2);
  nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 136}, {"torch_dtype", "bfloat16"}};
  std::ofstream((fs::path(dir) / "config.json").string()) << config.dump(2);
  std::ofstream((fs::path(dir) / "tokenizer.json").string()) << "{\"version\": \"1.0\"}";
  return m;
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace fp8::calibrate::testing
