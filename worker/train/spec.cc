// SPDX-License-Identifier: Apache-2.0
#include "worker/train/spec.h"

#include <algorithm>

#include "jobspec/paths.h"
#include "jobspec/validate.h"
#include "worker/common/spec_file.h"

namespace fp8::train {
namespace {

Recipe RecipeOf(const std::string& name) {
  if (name == "fp8-tensorwise") return Recipe::kFp8Tensorwise;
  if (name == "fp8-blockwise") return Recipe::kFp8Blockwise;
  return Recipe::kBf16;
}

LrSchedule ScheduleOf(const std::string& name) {
  if (name == "linear") return LrSchedule::kLinear;
  if (name == "constant") return LrSchedule::kConstant;
  return LrSchedule::kCosine;
}

Backend BackendOf(const std::string& name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  return Backend::kAuto;
}

MoeConfig MoeFromProto(const fp8d::v1::ModelSpec& m) {
  if (!m.has_moe()) return {};
  const auto& e = m.moe();
  return {.num_experts = e.num_experts(), .experts_per_token = e.experts_per_token(),
          .moe_intermediate_size = e.moe_intermediate_size(), .num_shared_experts = e.num_shared_experts(),
          .first_dense_layers = e.first_dense_layers(),
          .router = e.router() == "sigmoid-bias" ? MoeRouter::kSigmoidBias : MoeRouter::kSoftmaxTopK,
          .norm_topk_prob = e.norm_topk_prob(), .capacity_factor = e.capacity_factor(),
          .aux_loss_coef = e.aux_loss_coef(), .bias_update_rate = e.bias_update_rate()};
}

// A plain copy of a defaulted (and, but for DefaultTrainSpec, validated) spec.
TrainSpec FromProto(const fp8d::v1::TrainSpec& p) {
  TrainSpec s;
  const auto& m = p.model();
  s.model = {.preset = m.preset(), .n_layer = m.n_layer(), .n_head = m.n_head(), .d_model = m.d_model(),
             .seq_len = m.seq_len(), .vocab_size = m.vocab_size(),
             .architecture = m.architecture() == "llama" ? Architecture::kLlama : Architecture::kGpt2,
             .n_kv_head = m.num_key_value_heads(), .intermediate_size = m.intermediate_size(), .head_dim = m.head_dim(),
             .rms_norm_eps = m.rms_norm_eps(), .rope_theta = m.rope_theta(),
             .rope_scaling = {.llama3 = m.rope_scaling().rope_type() == "llama3", .factor = m.rope_scaling().factor(),
                              .low_freq_factor = m.rope_scaling().low_freq_factor(),
                              .high_freq_factor = m.rope_scaling().high_freq_factor(),
                              .original_max_position_embeddings = m.rope_scaling().original_max_position_embeddings()},
             .tie_word_embeddings = m.tie_word_embeddings(), .attention_bias = m.attention_bias(), .qk_norm = m.qk_norm(),
             .hf_architecture = "", .max_position_embeddings = 0,
             .moe = MoeFromProto(m)};
  s.data = {p.data().train(), p.data().val()};
  const auto& pr = p.precision();
  // Designated initializers: a field added to these structs must be mapped here (-Wextra).
  s.precision = {.recipe = RecipeOf(pr.recipe()), .amax_history_len = pr.amax_history_len(), .margin = pr.margin(),
                 .ue8m0 = pr.scale_format() == "ue8m0", .amax_most_recent = pr.amax_compute_algo() == "most_recent",
                 .bf16_moments = pr.bf16_moments()};
  const auto& t = p.training();
  s.training = {.max_steps = t.max_steps(), .per_device_train_batch_size = t.per_device_train_batch_size(),
                .gradient_accumulation_steps = t.gradient_accumulation_steps(), .learning_rate = t.learning_rate(),
                .lr_scheduler_type = ScheduleOf(t.lr_scheduler_type()), .warmup_steps = t.warmup_steps(),
                .weight_decay = t.weight_decay(), .adam_beta1 = t.adam_beta1(), .adam_beta2 = t.adam_beta2(),
                .adam_epsilon = t.adam_epsilon(), .max_grad_norm = t.max_grad_norm(), .seed = t.seed(),
                .logging_steps = t.logging_steps(), .eval_steps = t.eval_steps(), .save_steps = t.save_steps(),
                .save_total_limit = t.save_total_limit(), .export_hf = t.export_() == "hf",
                .report_to_tensorboard = std::find(t.report_to().begin(), t.report_to().end(), "tensorboard") != t.report_to().end()};
  s.output_dir = p.output_dir();
  s.backend = BackendOf(p.backend());
  s.init_from = p.init_from();
  return s;
}

}  // namespace

StatusOr<TrainSpec> ParseTrainSpec(fp8d::v1::TrainSpec proto) {
  jobspec::ApplyTrainDefaults(&proto);
  FP8_RETURN_IF_ERROR(jobspec::ValidateTrainSpec(proto, ""));
  FP8_RETURN_IF_ERROR(jobspec::CheckPathsBeforeOpen(proto, proto.allowed_roots()));
  return FromProto(proto);
}

StatusOr<TrainSpec> ParseTrainSpec(const nlohmann::json& j) {
  fp8d::v1::TrainSpec proto;
  FP8_RETURN_IF_ERROR(worker::ParseSpecJson(j, &proto));
  return ParseTrainSpec(std::move(proto));
}

StatusOr<TrainSpec> LoadTrainSpec(const std::string& path) {
  fp8d::v1::TrainSpec proto;
  FP8_RETURN_IF_ERROR(worker::ReadSpecFile(path, &proto));
  return ParseTrainSpec(std::move(proto));
}

TrainSpec DefaultTrainSpec() {
  fp8d::v1::TrainSpec proto;
  jobspec::ApplyTrainDefaults(&proto);
  return FromProto(proto);
}

const char* ArchitectureName(Architecture a) { return a == Architecture::kLlama ? "llama" : "gpt2"; }

nlohmann::json ModelConfigToJson(const ModelConfig& m) {
  nlohmann::json j = {{"preset", m.preset}, {"n_layer", m.n_layer}, {"n_head", m.n_head}, {"d_model", m.d_model},
                      {"seq_len", m.seq_len}, {"vocab_size", m.vocab_size}};
  if (m.architecture == Architecture::kGpt2) return j;  // GPT-2's spec.model as it always was
  j["architecture"] = ArchitectureName(m.architecture);
  j["num_key_value_heads"] = m.n_kv_head;
  j["intermediate_size"] = m.intermediate_size;
  j["head_dim"] = m.head_dim;
  j["rms_norm_eps"] = m.rms_norm_eps;
  j["rope_theta"] = m.rope_theta;
  if (m.rope_scaling.llama3)
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", m.rope_scaling.factor},
                         {"low_freq_factor", m.rope_scaling.low_freq_factor},
                         {"high_freq_factor", m.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", m.rope_scaling.original_max_position_embeddings}};
  j["tie_word_embeddings"] = m.tie_word_embeddings;
  j["attention_bias"] = m.attention_bias;
  j["qk_norm"] = m.qk_norm;
  if (!m.hf_architecture.empty()) j["hf_architecture"] = m.hf_architecture;
  if (m.max_position_embeddings > 0) j["max_position_embeddings"] = m.max_position_embeddings;
  if (m.moe.enabled()) {
    const MoeConfig& e = m.moe;
    j["moe"] = {{"num_experts", e.num_experts}, {"experts_per_token", e.experts_per_token},
                {"moe_intermediate_size", e.moe_intermediate_size}, {"num_shared_experts", e.num_shared_experts},
                {"router", MoeRouterName(e.router)}, {"norm_topk_prob", e.norm_topk_prob},
                {"capacity_factor", e.capacity_factor}, {"aux_loss_coef", e.aux_loss_coef},
                {"bias_update_rate", e.bias_update_rate}, {"first_dense_layers", e.first_dense_layers}};
  }
  return j;
}

StatusOr<ModelConfig> ModelConfigFromJson(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return DataLossError(where + ": not an object");
  auto positive = [&](const char* key, int* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1 << 24))
      return DataLossError(where + ": field \"" + key + "\" must be a positive integer" +
                           (it == j.end() ? std::string(" (missing)") : ", got " + it->dump()));
    *out = it->get<int>();
    return OkStatus();
  };
  auto real = [&](const nlohmann::json& obj, const char* key, double* out) -> Status {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_number() || !(it->get<double>() > 0))
      return DataLossError(where + ": field \"" + key + "\" must be a positive number");
    *out = it->get<double>();
    return OkStatus();
  };
  ModelConfig m;
  m.preset = j.value("preset", "");
  FP8_RETURN_IF_ERROR(positive("n_layer", &m.n_layer));
  FP8_RETURN_IF_ERROR(positive("n_head", &m.n_head));
  FP8_RETURN_IF_ERROR(positive("d_model", &m.d_model));
  FP8_RETURN_IF_ERROR(positive("seq_len", &m.seq_len));
  FP8_RETURN_IF_ERROR(positive("vocab_size", &m.vocab_size));
  const std::string arch = j.value("architecture", "gpt2");
  if (arch == "gpt2") return m;
  if (arch != "llama") return DataLossError(where + ": field \"architecture\" is \"" + arch + "\"; fp8d knows gpt2 and llama");
  m.architecture = Architecture::kLlama;
  FP8_RETURN_IF_ERROR(positive("num_key_value_heads", &m.n_kv_head));
  FP8_RETURN_IF_ERROR(positive("intermediate_size", &m.intermediate_size));
  FP8_RETURN_IF_ERROR(positive("head_dim", &m.head_dim));
  FP8_RETURN_IF_ERROR(real(j, "rms_norm_eps", &m.rms_norm_eps));
  FP8_RETURN_IF_ERROR(real(j, "rope_theta", &m.rope_theta));
  if (j.contains("rope_scaling")) {
    const nlohmann::json& r = j["rope_scaling"];
    if (!r.is_object() || r.value("rope_type", "") != "llama3")
      return DataLossError(where + ": field \"rope_scaling\" is not a llama3 rope scaling");
    m.rope_scaling.llama3 = true;
    FP8_RETURN_IF_ERROR(real(r, "factor", &m.rope_scaling.factor));
    FP8_RETURN_IF_ERROR(real(r, "low_freq_factor", &m.rope_scaling.low_freq_factor));
    FP8_RETURN_IF_ERROR(real(r, "high_freq_factor", &m.rope_scaling.high_freq_factor));
    m.rope_scaling.original_max_position_embeddings = r.value("original_max_position_embeddings", 0);
    if (m.rope_scaling.original_max_position_embeddings <= 0)
      return DataLossError(where + ": field \"rope_scaling.original_max_position_embeddings\" must be a positive integer");
  }
  m.tie_word_embeddings = j.value("tie_word_embeddings", false);
  m.attention_bias = j.value("attention_bias", false);
  m.qk_norm = j.value("qk_norm", false);
  m.hf_architecture = j.value("hf_architecture", "");
  m.max_position_embeddings = j.value("max_position_embeddings", 0);
  if (m.n_head % m.n_kv_head != 0)
    return DataLossError(where + ": field \"num_key_value_heads\" (" + std::to_string(m.n_kv_head) +
                         ") does not divide \"n_head\" (" + std::to_string(m.n_head) + ")");
  if (m.head_dim % 2 != 0) return DataLossError(where + ": field \"head_dim\" must be even");
  if (j.contains("moe")) FP8_RETURN_IF_ERROR(MoeConfigFromJson(j["moe"], m.n_layer, where, &m.moe));
  return m;
}

const char* MoeRouterName(MoeRouter r) { return r == MoeRouter::kSigmoidBias ? "sigmoid-bias" : "softmax-topk"; }

Status MoeConfigFromJson(const nlohmann::json& j, int n_layer, const std::string& where, MoeConfig* out) {
  auto bad = [&](const std::string& field, const std::string& why) {
    return DataLossError(where + ": field \"moe." + field + "\" " + why);
  };
  if (!j.is_object()) return DataLossError(where + ": field \"moe\" is not an object");
  auto integer = [&](const char* key, int lo, int hi, int* v) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi)
      return bad(key, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    *v = it->get<int>();
    return OkStatus();
  };
  auto real = [&](const char* key, double* v) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number() || !(it->get<double>() >= 0) || it->get<double>() > 64)
      return bad(key, "must be a number in [0, 64]");
    *v = it->get<double>();
    return OkStatus();
  };
  MoeConfig e;
  FP8_RETURN_IF_ERROR(integer("num_experts", 1, 1024, &e.num_experts));
  FP8_RETURN_IF_ERROR(integer("experts_per_token", 1, e.num_experts, &e.experts_per_token));
  FP8_RETURN_IF_ERROR(integer("moe_intermediate_size", 1, 1 << 20, &e.moe_intermediate_size));
  FP8_RETURN_IF_ERROR(integer("num_shared_experts", 0, 64, &e.num_shared_experts));
  FP8_RETURN_IF_ERROR(integer("first_dense_layers", 0, n_layer - 1, &e.first_dense_layers));
  const std::string router = j.value("router", "");
  if (router != "softmax-topk" && router != "sigmoid-bias") return bad("router", "must be softmax-topk or sigmoid-bias");
  e.router = router == "sigmoid-bias" ? MoeRouter::kSigmoidBias : MoeRouter::kSoftmaxTopK;
  if (!j.contains("norm_topk_prob") || !j["norm_topk_prob"].is_boolean()) return bad("norm_topk_prob", "must be true or false");
  e.norm_topk_prob = j["norm_topk_prob"].get<bool>();
  FP8_RETURN_IF_ERROR(real("capacity_factor", &e.capacity_factor));
  FP8_RETURN_IF_ERROR(real("aux_loss_coef", &e.aux_loss_coef));
  FP8_RETURN_IF_ERROR(real("bias_update_rate", &e.bias_update_rate));
  *out = e;
  return OkStatus();
}

const char* RecipeName(Recipe r) {
  switch (r) {
    case Recipe::kFp32: return "fp32";
    case Recipe::kBf16: return "bf16";
    case Recipe::kFp8Tensorwise: return "fp8-tensorwise";
    case Recipe::kFp8Blockwise: return "fp8-blockwise";
  }
  return "?";
}

nlohmann::json SpecToJson(const TrainSpec& s) {
  static const char* kSched[] = {"cosine", "linear", "constant"};
  static const char* kBackend[] = {"auto", "cpu", "cuda"};
  const auto& t = s.training;
  return nlohmann::json{
      {"model", ModelConfigToJson(s.model)},
      {"data", {{"train", s.data.train}, {"val", s.data.val}}},
      {"precision", {{"recipe", RecipeName(s.precision.recipe)}, {"amax_history_len", s.precision.amax_history_len},
                     {"margin", s.precision.margin}, {"scale_format", s.precision.ue8m0 ? "ue8m0" : "fp32"},
                     {"amax_compute_algo", s.precision.amax_most_recent ? "most_recent" : "max"},
                     {"bf16_moments", s.precision.bf16_moments}}},
      {"training", {{"max_steps", t.max_steps}, {"per_device_train_batch_size", t.per_device_train_batch_size},
                    {"gradient_accumulation_steps", t.gradient_accumulation_steps}, {"learning_rate", t.learning_rate},
                    {"lr_scheduler_type", kSched[static_cast<int>(t.lr_scheduler_type)]},
                    {"warmup_steps", t.warmup_steps}, {"weight_decay", t.weight_decay},
                    {"adam_beta1", t.adam_beta1}, {"adam_beta2", t.adam_beta2}, {"adam_epsilon", t.adam_epsilon},
                    {"max_grad_norm", t.max_grad_norm}, {"seed", t.seed}, {"logging_steps", t.logging_steps},
                    {"eval_steps", t.eval_steps}, {"save_steps", t.save_steps},
                    {"save_total_limit", t.save_total_limit}, {"export", t.export_hf ? "hf" : ""},
                    {"report_to", t.report_to_tensorboard ? nlohmann::json::array({"tensorboard"}) : nlohmann::json::array({"none"})}}},
      {"output_dir", s.output_dir},
      {"init_from", s.init_from},
      {"backend", kBackend[static_cast<int>(s.backend)]},
  };
}

}  // namespace fp8::train
