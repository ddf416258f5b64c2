#include "jobspec/validate.h"

#include <cmath>
#include <functional>
#include <initializer_list>

#include <google/protobuf/descriptor.h>

namespace fp8::jobspec {
namespace {

using fp8d::v1::CalibrateSpec;
using fp8d::v1::TrainSpec;
using google::protobuf::FieldDescriptor;

// A scalar field's value, read by reflection from its path below the spec.
struct Value {
  int64_t i = 0;
  double d = 0;
  std::string s;
};

Value Get(const google::protobuf::Message& spec, const std::string& path) {
  const google::protobuf::Message* m = &spec;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(path.substr(start, dot - start));
    if (f == nullptr) std::abort();  // a typo in a rule below; every rule runs in the tests
    const auto* r = m->GetReflection();
    if (dot != std::string::npos) {
      m = &r->GetMessage(*m, f);
      start = dot + 1;
      continue;
    }
    Value v;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: v.i = r->GetInt32(*m, f); break;
      case FieldDescriptor::CPPTYPE_INT64: v.i = r->GetInt64(*m, f); break;
      case FieldDescriptor::CPPTYPE_DOUBLE: v.d = r->GetDouble(*m, f); break;
      case FieldDescriptor::CPPTYPE_STRING: v.s = r->GetString(*m, f); break;
      default: std::abort();  // no rule reads another type
    }
    return v;
  }
}

// A check returns "" when the value passes, else why not (the text after "<field>: ").
using ValueCheck = std::function<std::string(const Value&)>;

ValueCheck Ints(int64_t lo, int64_t hi) {
  return [lo, hi](const Value& v) {
    if (v.i >= lo && v.i <= hi) return std::string();
    return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " + std::to_string(v.i) + ")";
  };
}

ValueCheck AtLeast(int64_t lo) {
  return [lo](const Value& v) {
    return v.i >= lo ? std::string() : "must be >= " + std::to_string(lo) + " (got " + std::to_string(v.i) + ")";
  };
}

// Finite and in the interval `text` names, e.g. "(0, 10]"; `hi` may be INFINITY.
ValueCheck Reals(double lo, bool lo_open, double hi, bool hi_open, const char* text) {
  return [=](const Value& v) {
    if (!std::isfinite(v.d)) return std::string("must be finite");
    const bool ok = (lo_open ? v.d > lo : v.d >= lo) && (hi_open ? v.d < hi : v.d <= hi);
    return ok ? std::string() : std::string("must be in ") + text;
  };
}

ValueCheck OneOf(std::initializer_list<const char*> allowed, bool empty_ok = false) {
  std::vector<std::string> names(allowed.begin(), allowed.end());
  return [names, empty_ok](const Value& v) {
    std::string list;
    for (const std::string& a : names) {
      if (v.s == a || (empty_ok && v.s.empty())) return std::string();
      list += (list.empty() ? "" : ", ") + a;
    }
    return "must be one of " + list + " (got \"" + v.s + "\")";
  };
}

std::string PathProblem(const std::string& p, bool required) {
  if (p.empty()) return required ? "required" : "";
  if (p.size() > kMaxPathLength) return "must be at most " + std::to_string(kMaxPathLength) + " characters";
  for (unsigned char c : p) {
    if (c < 0x20 || c == 0x7f) return "must not contain control characters";
  }
  return "";
}

ValueCheck Path(bool required) {
  return [required](const Value& v) { return PathProblem(v.s, required); };
}

template <typename Spec>
struct Rule {
  std::string id;     // unique; every id has a case in tests/spec_cases/spec_cases.json
  std::string field;  // path below the spec, e.g. "training.learning_rate"
  std::function<std::string(const Spec&)> check;
};

// A rule on one field's value; its id is the field's path.
template <typename Spec>
Rule<Spec> On(const char* field, ValueCheck check) {
  return {field, field, [field = std::string(field), check](const Spec& s) { return check(Get(s, field)); }};
}

// The model rules apply to a model built from the spec, not to one loaded from init_from.
Rule<TrainSpec> OnModel(Rule<TrainSpec> rule) {
  rule.check = [check = rule.check](const TrainSpec& s) { return s.init_from().empty() ? check(s) : std::string(); };
  return rule;
}

bool ModelIsSet(const fp8d::v1::ModelSpec& m) {
  return !m.preset().empty() || m.n_layer() || m.n_head() || m.d_model() || m.seq_len() || m.vocab_size();
}

const std::vector<Rule<TrainSpec>>& TrainRules() {
  using R = Rule<TrainSpec>;
  constexpr double kInf = INFINITY;
  static const std::vector<R> rules = {
      {"model.with_init_from", "model",
       [](const TrainSpec& s) {
         return !s.init_from().empty() && ModelIsSet(s.model())
                    ? "must be left out with init_from (the shape comes from the model it names)"
                    : "";
       }},
      OnModel(On<TrainSpec>("model.preset", OneOf({"tiny", "gpt2-124m", "gpt-1b", "gpt-2b"}))),
      OnModel(On<TrainSpec>("model.n_layer", Ints(1, 1024))),
      OnModel(On<TrainSpec>("model.n_head", Ints(1, 1024))),
      OnModel(On<TrainSpec>("model.d_model", Ints(1, 65536))),
      OnModel(On<TrainSpec>("model.seq_len", Ints(1, 1 << 20))),
      OnModel(On<TrainSpec>("model.vocab_size", Ints(1, 65536))),  // llm.c shards hold uint16 tokens
      OnModel({"model.d_model.multiple", "model.d_model",
               [](const TrainSpec& s) {
                 const auto& m = s.model();
                 return m.d_model() % m.n_head() == 0 ? ""
                                                      : "must be a multiple of n_head (" + std::to_string(m.n_head()) + ")";
               }}),
      On<TrainSpec>("init_from", Path(false)),
      On<TrainSpec>("data.train", Path(true)),
      On<TrainSpec>("data.val", Path(false)),
      On<TrainSpec>("precision.recipe", OneOf({"bf16", "fp8-tensorwise", "fp8-blockwise"})),
      On<TrainSpec>("precision.amax_history_len", Ints(1, 1024)),
      On<TrainSpec>("precision.margin", Ints(0, 64)),
      On<TrainSpec>("precision.scale_format", OneOf({"fp32", "ue8m0"})),
      On<TrainSpec>("precision.amax_compute_algo", OneOf({"max", "most_recent"})),
      On<TrainSpec>("training.max_steps", AtLeast(1)),
      On<TrainSpec>("training.per_device_train_batch_size", AtLeast(1)),
      On<TrainSpec>("training.gradient_accumulation_steps", AtLeast(1)),
      On<TrainSpec>("training.learning_rate", Reals(0, true, 10, false, "(0, 10]")),
      On<TrainSpec>("training.lr_scheduler_type", OneOf({"cosine", "linear", "constant"})),
      {"training.warmup_steps", "training.warmup_steps",
       [](const TrainSpec& s) { return Ints(0, s.training().max_steps())(Get(s, "training.warmup_steps")); }},
      On<TrainSpec>("training.weight_decay", Reals(0, false, kInf, true, "[0, inf)")),
      On<TrainSpec>("training.adam_beta1", Reals(0, false, 1, true, "[0, 1)")),
      On<TrainSpec>("training.adam_beta2", Reals(0, false, 1, true, "[0, 1)")),
      On<TrainSpec>("training.adam_epsilon", Reals(0, true, kInf, true, "(0, inf)")),
      On<TrainSpec>("training.max_grad_norm", Reals(0, false, kInf, true, "[0, inf)")),
      On<TrainSpec>("training.seed", AtLeast(0)),
      On<TrainSpec>("training.logging_steps", AtLeast(1)),
      On<TrainSpec>("training.eval_steps", AtLeast(1)),
      On<TrainSpec>("training.save_steps", AtLeast(1)),
      On<TrainSpec>("training.save_total_limit", AtLeast(1)),
      On<TrainSpec>("training.export", OneOf({"hf"}, /*empty_ok=*/true)),
      On<TrainSpec>("output_dir", Path(true)),
      On<TrainSpec>("backend", OneOf({"auto", "cpu", "cuda"})),
  };
  return rules;
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
  static const std::vector<Rule<S>> rules = {
      On<S>("input", Path(true)),
      On<S>("output_dir", Path(true)),
      // The output replaces output_dir as a whole (calibrate.cc stages it next to it).
      {"output_dir.replaceable", "output_dir",
       [](const S& s) {
         std::string d = s.output_dir();
         while (d.size() > 1 && d.back() == '/') d.pop_back();
         return d == "/" || d == "." || d == ".." ? "\"" + d + "\" cannot be replaced by the output" : "";
       }},
      On<S>("weights.granularity", OneOf({"block", "channel", "tensor"})),
      On<S>("weights.fmt", OneOf({"e4m3"})),  // E5M2 has too few mantissa bits for weights
      On<S>("weights.scale_format", OneOf({"fp32", "ue8m0"})),
      {"weights.include", "weights.include", [](const S& s) { return PatternsProblem(s.weights().include()); }},
      {"weights.exclude", "weights.exclude", [](const S& s) { return PatternsProblem(s.weights().exclude()); }},
      On<S>("activations.data", Path(false)),
      {"activations.data.direction", "activations.data",
       [](const S& s) {
         return !s.activations().data().empty() && s.direction() != "quantize"
                    ? "static activation scales are calibrated by direction quantize only"
                    : "";
       }},
      On<S>("activations.num_samples", Ints(1, 1 << 30)),
      On<S>("activations.method", OneOf({"max", "percentile", "mse"})),
      On<S>("activations.percentile", Reals(0, true, 100, false, "(0, 100]")),
      On<S>("direction", OneOf({"quantize", "dequantize"})),
      On<S>("backend", OneOf({"auto", "cpu", "cuda"})),
  };
  return rules;
}

// The first rule the spec breaks (null if none) and why.
template <typename Spec>
std::pair<const Rule<Spec>*, std::string> FirstBroken(const std::vector<Rule<Spec>>& rules, const Spec& spec) {
  for (const Rule<Spec>& rule : rules) {
    std::string why = rule.check(spec);
    if (!why.empty()) return {&rule, why};
  }
  return {nullptr, ""};
}

template <typename Spec>
fp8::Status Validate(const std::vector<Rule<Spec>>& rules, const Spec& spec, std::string_view prefix) {
  const auto [rule, why] = FirstBroken(rules, spec);
  if (rule == nullptr) return fp8::OkStatus();
  return fp8::InvalidArgumentError((prefix.empty() ? "" : std::string(prefix) + ".") + rule->field + ": " + why);
}

template <typename Spec>
std::vector<std::string> Ids(const std::vector<Rule<Spec>>& rules) {
  std::vector<std::string> ids;
  for (const Rule<Spec>& rule : rules) ids.push_back(rule.id);
  return ids;
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
std::string FirstBrokenTrainRule(const TrainSpec& spec) {
  const auto* rule = FirstBroken(TrainRules(), spec).first;
  return rule ? rule->id : "";
}
std::string FirstBrokenCalibrateRule(const CalibrateSpec& spec) {
  const auto* rule = FirstBroken(CalibrateRules(), spec).first;
  return rule ? rule->id : "";
}

}  // namespace fp8::jobspec
