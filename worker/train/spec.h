// The training spec (TrainSpec in proto/fp8d/v1/job.proto) as the worker reads it: JSON or YAML,
// snake_case (lowerCamelCase, as protobuf's JSON printer writes, is accepted too). The daemon
// writes every field of the proto, so 0, "" and absent all mean "the default". Unknown fields
// and bad values are InvalidArgument errors whose message starts with the field path, e.g.
// "training.learning_rate: must be > 0".
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace fp8::train {

enum class Recipe { kFp32, kBf16, kFp8Tensorwise, kFp8Blockwise };  // kFp32: tests only
enum class LrSchedule { kCosine, kLinear, kConstant };
enum class Backend { kAuto, kCpu, kCuda };

struct ModelConfig {
  std::string preset = "tiny";
  int n_layer = 0, n_head = 0, d_model = 0, seq_len = 0, vocab_size = 0;
};

struct DataConfig {
  std::string train, val;
};

struct PrecisionConfig {
  Recipe recipe = Recipe::kBf16;
  int amax_history_len = 16;
  int margin = 0;
  bool ue8m0 = false;                  // scale_format
  bool amax_most_recent = false;       // amax_compute_algo
  bool bf16_moments = false;
};

struct TrainingConfig {
  int64_t max_steps = 200;
  int per_device_train_batch_size = 8;
  int gradient_accumulation_steps = 1;
  double learning_rate = 1e-3;
  LrSchedule lr_scheduler_type = LrSchedule::kCosine;
  int64_t warmup_steps = 0;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;
  int64_t seed = 42;
  int64_t logging_steps = 10;
  int64_t eval_steps = 100;
  int64_t save_steps = 500;
  int save_total_limit = 3;
  bool export_hf = false;  // training.export: hf → <output_dir>/hf/ at the end (rank 0)
};

struct TrainSpec {
  ModelConfig model;
  DataConfig data;
  PrecisionConfig precision;
  TrainingConfig training;
  std::string output_dir = "./fp8-output";
  Backend backend = Backend::kAuto;
  // A Hugging Face GPT-2 directory or an fp8d checkpoint to start from (worker/train/hf_gpt2.h);
  // the model shape comes from it, so `model` must be left out.
  std::string init_from;
};

// Parses and validates (including the preset, whose explicit fields override it).
StatusOr<TrainSpec> ParseTrainSpec(const nlohmann::json& j);
// Reads a file: .yaml/.yml as YAML, anything else as JSON.
StatusOr<TrainSpec> LoadTrainSpec(const std::string& path);
// YAML text → JSON (scalars that look like numbers or booleans become numbers or booleans).
StatusOr<nlohmann::json> YamlToJson(const std::string& yaml_text);

const char* RecipeName(Recipe r);
// The resolved spec (defaults filled in), for trainer_state.json and logs.
nlohmann::json SpecToJson(const TrainSpec& s);

}  // namespace fp8::train
