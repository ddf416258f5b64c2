#include "jobspec/validate.h"

#include <cmath>
#include <functional>
#include <initializer_list>

namespace fp8::jobspec {
namespace {

using fp8d::v1::CalibrateSpec;
using fp8d::v1::TrainSpec;

// A check returns "" when the spec passes it, else why not (the text after "<field>: ").
template <typename Spec>
struct Rule {
  const char* id;     // unique; listed by the shared case table (tests/spec_cases)
  const char* field;  // path below the spec, e.g. "training.learning_rate"
  std::function<std::string(const Spec&)> check;
};

std::string OneOf(const std::string& value, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return "";
    list += std::string(list.empty() ? "" : ", ") + a;
  }
  return "must be one of " + list + " (got \"" + value + "\")";
}

std::string IntIn(int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return "";
  return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " + std::to_string(v) + ")";
}

std::string AtLeast(int64_t v, int64_t lo) {
  return v >= lo ? "" : "must be >= " + std::to_string(lo) + " (got " + std::to_string(v) + ")";
}

// Finite and in [lo, hi) / [lo, hi] / (lo, hi]; `text` names the interval in the message.
std::string RealIn(double v, bool ok, const char* text) {
  if (!std::isfinite(v)) return "must be finite";
  return ok ? "" : std::string("must be in ") + text;
}

std::string PathProblem(const std::string& p, bool required) {
  if (p.empty()) return required ? "required" : "";
  if (p.size() > kMaxPathLength) return "must be at most " + std::to_string(kMaxPathLength) + " characters";
  for (unsigned char c : p) {
    if (c < 0x20 || c == 0x7f) return "must not contain control characters";
  }
  return "";
}

bool ModelIsSet(const fp8d::v1::ModelSpec& m) {
  return !m.preset().empty() || m.n_layer() || m.n_head() || m.d_model() || m.seq_len() || m.vocab_size();
}

// The model rules apply to a model built from the spec, not to one loaded from init_from.
std::function<std::string(const TrainSpec&)> ModelRule(std::function<std::string(const fp8d::v1::ModelSpec&)> f) {
  return [f](const TrainSpec& s) { return s.init_from().empty() ? f(s.model()) : std::string(); };
}

const std::vector<Rule<TrainSpec>>& TrainRules() {
  using M = fp8d::v1::ModelSpec;
  static const std::vector<Rule<TrainSpec>> rules = {
      {"model.with_init_from", "model",
       [](const TrainSpec& s) {
         return !s.init_from().empty() && ModelIsSet(s.model())
                    ? "must be left out with init_from (the shape comes from the model it names)"
                    : "";
       }},
      {"model.preset", "model.preset",
       ModelRule([](const M& m) { return OneOf(m.preset(), {"tiny", "gpt2-124m", "gpt-1b", "gpt-2b"}); })},
      {"model.n_layer", "model.n_layer", ModelRule([](const M& m) { return IntIn(m.n_layer(), 1, 1024); })},
      {"model.n_head", "model.n_head", ModelRule([](const M& m) { return IntIn(m.n_head(), 1, 1024); })},
      {"model.d_model", "model.d_model", ModelRule([](const M& m) { return IntIn(m.d_model(), 1, 65536); })},
      {"model.seq_len", "model.seq_len", ModelRule([](const M& m) { return IntIn(m.seq_len(), 1, 1 << 20); })},
      // llm.c shards hold uint16 tokens.
      {"model.vocab_size", "model.vocab_size", ModelRule([](const M& m) { return IntIn(m.vocab_size(), 1, 65536); })},
      {"model.d_model.multiple", "model.d_model", ModelRule([](const M& m) {
         return m.d_model() % m.n_head() == 0
                    ? std::string()
                    : "must be a multiple of n_head (" + std::to_string(m.n_head()) + ")";
       })},
      {"init_from", "init_from", [](const TrainSpec& s) { return PathProblem(s.init_from(), false); }},
      {"data.train", "data.train",
       [](const TrainSpec& s) {
         const std::string why = PathProblem(s.data().train(), true);
         return why == "required" ? why + " (a glob of llm.c token shards)" : why;
       }},
      {"data.val", "data.val", [](const TrainSpec& s) { return PathProblem(s.data().val(), false); }},
      {"precision.recipe", "precision.recipe",
       [](const TrainSpec& s) { return OneOf(s.precision().recipe(), {"bf16", "fp8-tensorwise", "fp8-blockwise"}); }},
      {"precision.amax_history_len", "precision.amax_history_len",
       [](const TrainSpec& s) { return IntIn(s.precision().amax_history_len(), 1, 1024); }},
      {"precision.margin", "precision.margin", [](const TrainSpec& s) { return IntIn(s.precision().margin(), 0, 64); }},
      {"precision.scale_format", "precision.scale_format",
       [](const TrainSpec& s) { return OneOf(s.precision().scale_format(), {"fp32", "ue8m0"}); }},
      {"precision.amax_compute_algo", "precision.amax_compute_algo",
       [](const TrainSpec& s) { return OneOf(s.precision().amax_compute_algo(), {"max", "most_recent"}); }},
      {"training.max_steps", "training.max_steps", [](const TrainSpec& s) { return AtLeast(s.training().max_steps(), 1); }},
      {"training.per_device_train_batch_size", "training.per_device_train_batch_size",
       [](const TrainSpec& s) { return AtLeast(s.training().per_device_train_batch_size(), 1); }},
      {"training.gradient_accumulation_steps", "training.gradient_accumulation_steps",
       [](const TrainSpec& s) { return AtLeast(s.training().gradient_accumulation_steps(), 1); }},
      {"training.learning_rate", "training.learning_rate",
       [](const TrainSpec& s) {
         const double v = s.training().learning_rate();
         return RealIn(v, v > 0 && v <= 10, "(0, 10]");
       }},
      {"training.lr_scheduler_type", "training.lr_scheduler_type",
       [](const TrainSpec& s) { return OneOf(s.training().lr_scheduler_type(), {"cosine", "linear", "constant"}); }},
      {"training.warmup_steps", "training.warmup_steps",
       [](const TrainSpec& s) { return IntIn(s.training().warmup_steps(), 0, s.training().max_steps()); }},
      {"training.weight_decay", "training.weight_decay",
       [](const TrainSpec& s) {
         const double v = s.training().weight_decay();
         return RealIn(v, v >= 0, "[0, inf)");
       }},
      {"training.adam_beta1", "training.adam_beta1",
       [](const TrainSpec& s) {
         const double v = s.training().adam_beta1();
         return RealIn(v, v >= 0 && v < 1, "[0, 1)");
       }},
      {"training.adam_beta2", "training.adam_beta2",
       [](const TrainSpec& s) {
         const double v = s.training().adam_beta2();
         return RealIn(v, v >= 0 && v < 1, "[0, 1)");
       }},
      {"training.adam_epsilon", "training.adam_epsilon",
       [](const TrainSpec& s) {
         const double v = s.training().adam_epsilon();
         return RealIn(v, v > 0, "(0, inf)");
       }},
      {"training.max_grad_norm", "training.max_grad_norm",
       [](const TrainSpec& s) {
         const double v = s.training().max_grad_norm();
         return RealIn(v, v >= 0, "[0, inf)");
       }},
      {"training.seed", "training.seed", [](const TrainSpec& s) { return AtLeast(s.training().seed(), 0); }},
      {"training.logging_steps", "training.logging_steps",
       [](const TrainSpec& s) { return AtLeast(s.training().logging_steps(), 1); }},
      {"training.eval_steps", "training.eval_steps", [](const TrainSpec& s) { return AtLeast(s.training().eval_steps(), 1); }},
      {"training.save_steps", "training.save_steps", [](const TrainSpec& s) { return AtLeast(s.training().save_steps(), 1); }},
      {"training.save_total_limit", "training.save_total_limit",
       [](const TrainSpec& s) { return AtLeast(s.training().save_total_limit(), 1); }},
      {"training.export", "training.export",
       [](const TrainSpec& s) { return s.training().export_().empty() ? "" : OneOf(s.training().export_(), {"hf"}); }},
      {"output_dir", "output_dir", [](const TrainSpec& s) { return PathProblem(s.output_dir(), true); }},
      {"backend", "backend", [](const TrainSpec& s) { return OneOf(s.backend(), {"auto", "cpu", "cuda"}); }},
  };
  return rules;
}

std::string TrimmedDir(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string PatternsProblem(const google::protobuf::RepeatedPtrField<std::string>& patterns) {
  for (int i = 0; i < patterns.size(); ++i) {
    const std::string why = PathProblem(patterns[i], true);
    if (!why.empty()) return "entry " + std::to_string(i) + ": " + why;
  }
  return "";
}

const std::vector<Rule<CalibrateSpec>>& CalibrateRules() {
  using S = CalibrateSpec;
  static const std::vector<Rule<CalibrateSpec>> rules = {
      {"input", "input", [](const S& s) { return PathProblem(s.input(), true); }},
      {"output_dir", "output_dir", [](const S& s) { return PathProblem(s.output_dir(), true); }},
      // The output replaces output_dir as a whole (calibrate.cc stages it next to it).
      {"output_dir.replaceable", "output_dir",
       [](const S& s) {
         const std::string d = TrimmedDir(s.output_dir());
         return d == "/" || d == "." || d == ".." ? "\"" + d + "\" cannot be replaced by the output" : "";
       }},
      {"weights.granularity", "weights.granularity",
       [](const S& s) { return OneOf(s.weights().granularity(), {"block", "channel", "tensor"}); }},
      // E5M2 has too few mantissa bits for weights; the kernels use it for gradients only.
      {"weights.fmt", "weights.fmt", [](const S& s) { return OneOf(s.weights().fmt(), {"e4m3"}); }},
      {"weights.scale_format", "weights.scale_format",
       [](const S& s) { return OneOf(s.weights().scale_format(), {"fp32", "ue8m0"}); }},
      {"weights.include", "weights.include", [](const S& s) { return PatternsProblem(s.weights().include()); }},
      {"weights.exclude", "weights.exclude", [](const S& s) { return PatternsProblem(s.weights().exclude()); }},
      {"activations.data", "activations.data", [](const S& s) { return PathProblem(s.activations().data(), false); }},
      {"activations.data.direction", "activations.data",
       [](const S& s) {
         return !s.activations().data().empty() && s.direction() != "quantize"
                    ? "static activation scales are calibrated by direction quantize only"
                    : "";
       }},
      {"activations.num_samples", "activations.num_samples",
       [](const S& s) { return IntIn(s.activations().num_samples(), 1, 1 << 30); }},
      {"activations.method", "activations.method",
       [](const S& s) { return OneOf(s.activations().method(), {"max", "percentile", "mse"}); }},
      {"activations.percentile", "activations.percentile",
       [](const S& s) {
         const double v = s.activations().percentile();
         return RealIn(v, v > 0 && v <= 100, "(0, 100]");
       }},
      {"direction", "direction", [](const S& s) { return OneOf(s.direction(), {"quantize", "dequantize"}); }},
      {"backend", "backend", [](const S& s) { return OneOf(s.backend(), {"auto", "cpu", "cuda"}); }},
  };
  return rules;
}

template <typename Spec>
const Rule<Spec>* FirstBroken(const std::vector<Rule<Spec>>& rules, const Spec& spec, std::string* why) {
  for (const Rule<Spec>& rule : rules) {
    *why = rule.check(spec);
    if (!why->empty()) return &rule;
  }
  return nullptr;
}

template <typename Spec>
fp8::Status Validate(const std::vector<Rule<Spec>>& rules, const Spec& spec, std::string_view prefix) {
  std::string why;
  const Rule<Spec>* rule = FirstBroken(rules, spec, &why);
  if (rule == nullptr) return fp8::OkStatus();
  std::string field(prefix);
  if (!field.empty()) field += '.';
  field += rule->field;
  return fp8::InvalidArgumentError(field + ": " + why);
}

template <typename Spec>
std::vector<std::string> Ids(const std::vector<Rule<Spec>>& rules) {
  std::vector<std::string> ids;
  for (const Rule<Spec>& rule : rules) ids.push_back(rule.id);
  return ids;
}

template <typename Spec>
std::string BrokenId(const std::vector<Rule<Spec>>& rules, const Spec& spec) {
  std::string why;
  const Rule<Spec>* rule = FirstBroken(rules, spec, &why);
  return rule ? rule->id : "";
}

}  // namespace

fp8::Status ValidateTrainSpec(const TrainSpec& spec, std::string_view prefix) {
  return Validate(TrainRules(), spec, prefix);
}

fp8::Status ValidateCalibrateSpec(const CalibrateSpec& spec, std::string_view prefix) {
  return Validate(CalibrateRules(), spec, prefix);
}

std::vector<std::string> TrainRuleIds() { return Ids(TrainRules()); }
std::vector<std::string> CalibrateRuleIds() { return Ids(CalibrateRules()); }
std::string FirstBrokenTrainRule(const TrainSpec& spec) { return BrokenId(TrainRules(), spec); }
std::string FirstBrokenCalibrateRule(const CalibrateSpec& spec) { return BrokenId(CalibrateRules(), spec); }

}  // namespace fp8::jobspec
