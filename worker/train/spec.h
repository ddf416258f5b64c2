// SPDX-License-Identifier: Apache-2.0
// The training spec as the worker runs it. spec.json / spec.yaml is read into the proto
// fp8d::v1::TrainSpec (worker/common/spec_file.h), filled and checked by fp8_jobspec (the same
// defaults and checks the daemon applies at create), then mapped onto the plain structs below.
// So the structs hold no spec defaults of their own: build one with DefaultTrainSpec().
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"
#include "jobspec/defaults.h"

namespace fp8::train {

enum class Recipe { kFp32, kBf16, kFp8Tensorwise, kFp8Blockwise };  // kFp32: tests only
enum class LrSchedule { kCosine, kLinear, kConstant };
enum class Backend { kAuto, kCpu, kCuda };

enum class Architecture { kGpt2, kLlama };

// Llama-3's "llama3" rescaling of the rotary frequencies (transformers' rope_type "llama3").
struct RopeScaling {
  bool llama3 = false;  // false: the plain rotary frequencies
  double factor = 0, low_freq_factor = 0, high_freq_factor = 0;
  int original_max_position_embeddings = 0;
};

enum class MoeRouter { kSoftmaxTopK, kSigmoidBias };

// A mixture of experts in place of the dense MLPs (proto MoeSpec documents each field).
struct MoeConfig {
  int num_experts = 0;  // 0: no mixture of experts
  int experts_per_token = 0, moe_intermediate_size = 0, num_shared_experts = 0, first_dense_layers = 0;
  MoeRouter router = MoeRouter::kSoftmaxTopK;
  bool norm_topk_prob = false;
  double capacity_factor = 0, aux_loss_coef = 0, bias_update_rate = 0;
  bool enabled() const { return num_experts > 0; }
  // Whether layer `l` of the model has the MoE MLP.
  bool SparseLayer(int l) const { return enabled() && l >= first_dense_layers; }
};

struct ModelConfig {
  std::string preset;
  int n_layer = 0, n_head = 0, d_model = 0, seq_len = 0, vocab_size = 0;
  Architecture architecture = Architecture::kGpt2;
  // The Llama family only (proto ModelSpec documents each; GPT-2 ignores them).
  int n_kv_head = 0, intermediate_size = 0, head_dim = 0;
  double rms_norm_eps = 0, rope_theta = 0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false, attention_bias = false, qk_norm = false;
  // The Hugging Face class an export writes (LlamaForCausalLM, Qwen2ForCausalLM, ...): the
  // imported model's own; empty, the one the flags imply.
  std::string hf_architecture;
  // The Llama family: the context an export's config.json states (max_position_embeddings);
  // 0: seq_len. An import trains at most 2048 positions of a longer one (kLlamaImportSeqLen).
  int max_position_embeddings = 0;
  MoeConfig moe;  // the Llama family only
};

const char* ArchitectureName(Architecture a);
const char* MoeRouterName(MoeRouter r);
// spec.model.moe as trainer_state.json stores it, and back; errors name `where` and the field.
Status MoeConfigFromJson(const nlohmann::json& j, int n_layer, const std::string& where, MoeConfig* out);
// spec.model as trainer_state.json stores it, and back (a checkpoint without "architecture" is
// GPT-2's). Errors name `where` and the field.
nlohmann::json ModelConfigToJson(const ModelConfig& m);
StatusOr<ModelConfig> ModelConfigFromJson(const nlohmann::json& j, const std::string& where);

struct DataConfig {
  std::string train, val;
};

// The model code also builds a PrecisionConfig on its own (evaluation, tools, benches): those
// two initialisers are jobspec's defaults, not copies of them.
struct PrecisionConfig {
  Recipe recipe = Recipe::kBf16;
  int amax_history_len = jobspec::kDefaultAmaxHistoryLen;
  int margin = 0;
  bool ue8m0 = false;                  // scale_format
  bool amax_most_recent = false;       // amax_compute_algo
  bool bf16_moments = false;
};

struct TrainingConfig {
  int64_t max_steps = 0;
  int per_device_train_batch_size = 0;
  int gradient_accumulation_steps = 0;
  double learning_rate = 0;
  LrSchedule lr_scheduler_type = LrSchedule::kCosine;
  int64_t warmup_steps = 0;
  double weight_decay = 0;
  double adam_beta1 = 0;
  double adam_beta2 = 0;
  double adam_epsilon = 0;
  double max_grad_norm = 0;
  int64_t seed = 0;
  int64_t logging_steps = 0;
  int64_t eval_steps = 0;
  int64_t save_steps = 0;
  int save_total_limit = 0;
  bool export_hf = false;  // training.export: hf → <output_dir>/hf/ at the end (rank 0)
  bool report_to_tensorboard = false;  // training.report_to has tensorboard (tensorboard_writer.h)
};

struct TrainSpec {
  ModelConfig model;
  DataConfig data;
  PrecisionConfig precision;
  TrainingConfig training;
  std::string output_dir;
  Backend backend = Backend::kAuto;
  // A Hugging Face directory (GPT-2 or the Llama family) or an fp8d checkpoint to start from
  // (worker/train/hf_model.h); the model shape comes from it, so `model` must be left out.
  std::string init_from;
};

// Defaults, checks (errors name the field, e.g. "training.learning_rate: must be in (0, 10]")
// and the mapping onto TrainSpec.
StatusOr<TrainSpec> ParseTrainSpec(fp8d::v1::TrainSpec proto);
StatusOr<TrainSpec> ParseTrainSpec(const nlohmann::json& j);
// Reads a file: .yaml/.yml as YAML, anything else as JSON.
StatusOr<TrainSpec> LoadTrainSpec(const std::string& path);
// Every default filled in, nothing checked (data.train and output_dir stay empty): for code
// that builds a spec by hand (tests, benches).
TrainSpec DefaultTrainSpec();

const char* RecipeName(Recipe r);
// The resolved spec (defaults filled in), for trainer_state.json and logs.
nlohmann::json SpecToJson(const TrainSpec& s);

}  // namespace fp8::train
