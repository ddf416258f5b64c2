// SPDX-License-Identifier: Apache-2.0
// A small generated Hugging Face style model for the calibration tests: three shards, an index,
// config.json and a tokenizer file; linear weights with shapes that are not multiples of 128,
// in BF16, F32 and F16, with rows of very different magnitudes, exact zeros and values that
// land in FP8's subnormal range after scaling; plus tensors that must stay untouched
// (embeddings, norms, biases, lm_head, a router gate).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/safetensors/safetensors.h"

namespace fp8::calibrate::testing {

struct FixtureTensor {
  std::string name;
  safetensors::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  std::string shard;
  std::vector<float> Values() const;  // widened to FP32
};

struct FixtureModel {
  std::string dir;
  std::map<std::string, FixtureTensor> tensors;
  std::vector<std::string> shards;
};

// Names of the tensors the default patterns quantize.
std::vector<std::string> DefaultQuantizedNames();

FixtureModel WriteFixtureModel(const std::string& dir, uint32_t seed);

// Writes a single-shard model with the given tensors (for bad-input cases).
void WriteSingleShard(const std::string& path, const std::vector<FixtureTensor>& tensors);

// The whole file as bytes ("" when it cannot be read), for byte-for-byte output comparisons.
std::string Slurp(const std::string& path);

FixtureTensor RandomTensor(const std::string& name, safetensors::DType dtype, std::vector<int64_t> shape,
                           uint32_t seed, float scale = 0.02f);

}  // namespace fp8::calibrate::testing
