#include "worker/train/spec.h"

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

// A plain copy of a defaulted (and, but for DefaultTrainSpec, validated) spec.
TrainSpec FromProto(const fp8d::v1::TrainSpec& p) {
  TrainSpec s;
  const auto& m = p.model();
  s.model = {m.preset(), m.n_layer(), m.n_head(), m.d_model(), m.seq_len(), m.vocab_size()};
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
                .save_total_limit = t.save_total_limit(), .export_hf = t.export_() == "hf"};
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
      {"model", {{"preset", s.model.preset}, {"n_layer", s.model.n_layer}, {"n_head", s.model.n_head},
                 {"d_model", s.model.d_model}, {"seq_len", s.model.seq_len}, {"vocab_size", s.model.vocab_size}}},
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
                    {"save_total_limit", t.save_total_limit}, {"export", t.export_hf ? "hf" : ""}}},
      {"output_dir", s.output_dir},
      {"init_from", s.init_from},
      {"backend", kBackend[static_cast<int>(s.backend)]},
  };
}

}  // namespace fp8::train
