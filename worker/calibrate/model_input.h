// SPDX-License-Identifier: Apache-2.0
// The model a calibration job reads: one .safetensors file, a Hugging Face style directory
// (config.json, shards, model.safetensors.index.json, tokenizer files...), or an fp8d
// checkpoint directory (step-N: model.safetensors, trainer_state.json, optimizer.safetensors,
// of which only the model is read). Everything read from
// disk is validated here, before any output is written, so bad input fails fast (exit 65) and
// leaves nothing behind.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/safetensors/safetensors.h"

namespace fp8::calibrate {

struct ModelInput {
  std::string dir;                     // directory holding the shards
  bool single_file = false;            // the input was one .safetensors file
  std::vector<std::string> shards;     // shard file names in `dir`, sorted
  std::vector<safetensors::Reader> readers;  // one per shard, headers validated
  std::optional<nlohmann::json> config;      // config.json, when present
  std::optional<nlohmann::json> index;       // model.safetensors.index.json, when present
  std::vector<std::string> other_files;      // other regular files, copied verbatim
  // tensor name → shard position in `shards` (every tensor of every shard, unique).
  std::map<std::string, size_t> tensor_shard;
  uint64_t total_bytes = 0;  // sum of shard file sizes

  // size + mtime of each shard: a restart resumes only from the same input.
  nlohmann::json Fingerprint() const;
};

inline constexpr const char* kIndexFile = "model.safetensors.index.json";
inline constexpr const char* kConfigFile = "config.json";
// An fp8d training checkpoint directory (step-N) holds these two (and optimizer.safetensors).
inline constexpr const char* kTrainerStateFile = "trainer_state.json";
inline constexpr const char* kTrainerModelFile = "model.safetensors";

// A shard named in an index must be a plain file name in the model directory.
Status ValidateShardName(const std::string& name, const std::string& where);
// Tensor names must not look like paths that escape a directory, nor hold control bytes.
Status ValidateTensorName(const std::string& name, const std::string& where);

// DataLoss when unreadable, InvalidArgument when not JSON; both name the file.
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

// FailedPrecondition when `input` does not exist (the spec names nothing); DataLoss /
// InvalidArgument naming the file and the problem for bad data.
StatusOr<ModelInput> OpenModelInput(const std::string& input);

}  // namespace fp8::calibrate
