// SPDX-License-Identifier: Apache-2.0
// Models in and out, for every family: Hugging Face directories and fp8d checkpoints as sources
// of weights (`train.init_from`, `fp8-worker export`, `fp8-worker evaluate`), and the Hugging
// Face export. What differs between the families (config.json's fields, tensor names and
// orientation) is theirs: hf_gpt2.h, hf_llama.h (with hf_qwen3_moe.h and hf_mixtral.h). The rest
// (shards, dtypes, the atomic export directory, the checks that every tensor is there once with
// its shape) is here, once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/data/tokenizer_files.h"
#include "worker/train/causal_lm.h"
#include "worker/train/spec.h"

namespace fp8::train {

inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfGenerationConfigFile = "generation_config.json";
inline constexpr const char* kHfSingleFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";

struct HfExportOptions {
  // A shard holds tensors up to this many bytes (a bigger tensor gets a shard of its own). More
  // than one shard: model-0000i-of-0000n.safetensors and model.safetensors.index.json.
  uint64_t max_shard_bytes = 2ull << 30;
  // The tokenizer the model's ids are from (the one recorded beside its training shards):
  // its files go into the export unchanged, and generation_config.json gets the bos/eos ids its
  // tokenizer_config.json names instead of the family's defaults. A tokenizer with more ids
  // than the model's vocab_size is refused (FailedPrecondition), nothing written.
  std::optional<data::TokenizerFiles> tokenizer;
};

// How a family's tensors appear in a Hugging Face directory.
struct HfLayout {
  // The name an export writes for an fp8d tensor.
  std::function<std::string(const std::string& fp8d_name)> export_name;
  // The fp8d tensor a file's tensor is; "" for one the import skips (buffers, a tied head).
  std::function<std::string(const std::string& file_name)> import_name;
  // Stored [in, out] in the file (GPT-2's Conv1D), [out, in] in fp8d.
  std::function<bool(const std::string& fp8d_name)> transposed;
  // What the family is called in errors ("GPT-2", "LlamaForCausalLM").
  std::string family;
  // What an export writes as config.json and generation_config.json.
  nlohmann::json config, generation_config;
  // Why the model has no form in this class ("" when it has): ExportHf refuses it.
  std::string refusal;
};
// The layout of `cfg`'s family (the one switch on the architecture here).
HfLayout HfLayoutOf(const ModelConfig& cfg);

// Writes config.json, generation_config.json, the tokenizer files when `opts` has them, and the weights (FP32, the family's transformers
// names and orientation) of `model` into `out_dir`, in the architecture the model came from
// (GPT2LMHeadModel; LlamaForCausalLM, Qwen2ForCausalLM, ...). The directory is built under a
// temporary name and renamed into place, so it is complete or absent; an existing `out_dir` is
// replaced only when it is empty or holds an earlier export (config.json), never another
// directory.
Status ExportHf(const CausalLm& model, const std::string& out_dir, const HfExportOptions& opts = {});

// What `init_from` (or `export --checkpoint`, `evaluate --model`) points at.
struct ModelSource {
  enum class Kind { kHuggingFace, kFp8dCheckpoint };
  Kind kind = Kind::kHuggingFace;
  std::string dir;          // the directory holding the weights (for fp8d, the step-N directory)
  std::string config_path;  // config.json or trainer_state.json: where the shape came from
  ModelConfig config;       // the shape, architecture included
};

// Reads the shape: from config.json (GPT2LMHeadModel, or LlamaForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, MistralForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM; any other
// architecture, or a field fp8d's model cannot honour, is refused naming the field) or from trainer_state.json (an fp8d step-N directory or
// a directory of them: the newest). Errors name the file. Nothing is written.
StatusOr<ModelSource> OpenModelSource(const std::string& path);

// Loads every parameter of `model` (built from source.config) from the source's safetensors:
// each tensor present once, with the expected shape and a float dtype (F32, BF16, F16); a
// missing, unexpected, misshapen or unreadable tensor (a truncated shard) is an error naming
// the tensor or file. `model` is unchanged on error.
Status LoadModelWeights(const ModelSource& source, CausalLm* model);

// A JSON object from a file (DataLoss naming the file otherwise).
StatusOr<nlohmann::json> ReadJsonObject(const std::string& path);
// obj[key] as an integer in [1, 2^24]; errors name `where` and the field.
StatusOr<int> ConfigPositiveInt(const nlohmann::json& obj, const std::string& key, const std::string& where);

}  // namespace fp8::train
