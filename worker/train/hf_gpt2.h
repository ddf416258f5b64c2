// Models in and out: Hugging Face GPT-2 directories and fp8d checkpoints as sources of weights
// (`train.init_from`, `fp8-worker export`, `fp8-worker evaluate`), and the Hugging Face export.
//
// fp8d's GPT is GPT-2 exactly (learned positions, LayerNorm eps 1e-5, tanh GELU, head tied to
// wte), so both directions are a layout question. fp8d names a tensor as GPT2Model does
// ("h.0.attn.c_attn.weight") and stores linear weights as nn.Linear, [out, in]; transformers'
// GPT2LMHeadModel prefixes "transformer." and keeps Conv1D's [in, out]. An export writes
// transformers' names and orientation; an import accepts both prefixed and bare names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/train/model.h"
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
};

// Writes config.json, generation_config.json and the weights (FP32, transformers' names and
// Conv1D orientation) of `model` into `out_dir`. The directory is built under a temporary name
// and renamed into place, so it is complete or absent; an existing `out_dir` is replaced only
// when it is empty or holds an earlier export (config.json), never another directory.
Status ExportHfGpt2(const GptModel& model, const std::string& out_dir, const HfExportOptions& opts = {});

// The transformers name and [in, out] orientation of an fp8d tensor.
std::string HfTensorName(const std::string& fp8d_name);
bool IsConv1DWeight(const std::string& fp8d_name);

// What `init_from` (or `export --checkpoint`, `evaluate --model`) points at.
struct ModelSource {
  enum class Kind { kHuggingFace, kFp8dCheckpoint };
  Kind kind = Kind::kHuggingFace;
  std::string dir;      // the directory holding the weights (for fp8d, the step-N directory)
  std::string config_path;  // config.json or trainer_state.json: where the shape came from
  ModelConfig config;   // the shape
};

// Reads the shape: from config.json (a Hugging Face GPT-2; any other architecture, or a field
// fp8d's GPT cannot honour, is refused naming the field) or from trainer_state.json (an fp8d
// step-N directory or a directory of them: the newest). Errors name the file.
StatusOr<ModelSource> OpenModelSource(const std::string& path);

// Loads every parameter of `model` (built from source.config) from the source's safetensors:
// each tensor present once, with the expected shape and a float dtype (F32, BF16, F16); a
// missing, unexpected, misshapen or unreadable tensor (a truncated shard) is an error naming
// the tensor or file. `model` is unchanged on error.
Status LoadModelWeights(const ModelSource& source, GptModel* model);

}  // namespace fp8::train
