// SPDX-License-Identifier: Apache-2.0
#include "jobspec/validate.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>

namespace fp8::jobspec {
namespace {

using fp8d::v1::CalibrateSpec;
using fp8d::v1::TrainSpec;

// Each helper returns "" when the value passes, else why not (the text after "<field>: ").
std::string Ints(int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return "";
  return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " + std::to_string(v) + ")";
}

std::string AtLeast(int64_t v, int64_t lo) {
  return v >= lo ? "" : "must be >= " + std::to_string(lo) + " (got " + std::to_string(v) + ")";
}

// Finite, and `ok` (the interval that `text` names, e.g. "(0, 10]").
std::string Real(double v, bool ok, const char* text) {
  if (!std::isfinite(v)) return "must be finite";
  return ok ? "" : std::string("must be in ") + text;
}

std::string OneOf(const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return "";
    list += std::string(list.empty() ? "" : ", ") + a;
  }
  return "must be one of " + list + " (got \"" + v + "\")";
}

std::string Path(const std::string& p, bool required) {
  if (p.empty()) return required ? "required" : "";
  if (p.size() > kMaxPathLength) return "must be at most " + std::to_string(kMaxPathLength) + " characters";
  for (unsigned char c : p) {
    if (c < 0x20 || c == 0x7f) return "must not contain control characters";
  }
  return "";
}

std::string Patterns(const google::protobuf::RepeatedPtrField<std::string>& patterns) {
  for (int i = 0; i < patterns.size(); ++i) {
    const std::string why = Path(patterns[i], true);
    if (!why.empty()) return "entry " + std::to_string(i) + ": " + why;
  }
  return "";
}

// training.report_to's entries: where the run's scalars go (worker/train/tensorboard_writer.h).
std::string ReportTo(const google::protobuf::RepeatedPtrField<std::string>& entries) {
  for (int i = 0; i < entries.size(); ++i) {
    const std::string why = OneOf(entries[i], {"none", "tensorboard"});
    if (!why.empty()) return "entry " + std::to_string(i) + ": " + why;
  }
  return "";
}

template <typename Spec>
struct Rule {
  std::string id;     // unique; every id has a case in tests/spec_cases/spec_cases.json
  std::string field;  // path below the spec, e.g. "training.learning_rate"
  std::function<std::string(const Spec&)> check;
  Rule(const char* field, std::function<std::string(const Spec&)> check) : id(field), field(field), check(check) {}
  Rule(const char* id, const char* field, std::function<std::string(const Spec&)> check)
      : id(id), field(field), check(check) {}
};

// The model rules apply to a model built from the spec, not to one loaded from init_from.
Rule<TrainSpec> OnModel(const char* id, const char* field, std::function<std::string(const fp8d::v1::ModelSpec&)> f) {
  return {id, field, [f](const TrainSpec& s) { return s.init_from().empty() ? f(s.model()) : std::string(); }};
}
Rule<TrainSpec> OnModel(const char* field, std::function<std::string(const fp8d::v1::ModelSpec&)> f) {
  return OnModel(field, field, std::move(f));
}

// The fields only the Llama family has, by name, that `m` sets.
std::string LlamaFieldsSet(const fp8d::v1::ModelSpec& m) {
  std::string set;
  auto add = [&](bool on, const char* name) {
    if (on) set += std::string(set.empty() ? "" : ", ") + name;
  };
  add(m.num_key_value_heads() != 0, "num_key_value_heads");
  add(m.intermediate_size() != 0, "intermediate_size");
  add(m.head_dim() != 0, "head_dim");
  add(m.rms_norm_eps() != 0, "rms_norm_eps");
  add(m.rope_theta() != 0, "rope_theta");
  add(m.has_rope_scaling(), "rope_scaling");
  add(m.has_tie_word_embeddings(), "tie_word_embeddings");
  add(m.has_attention_bias(), "attention_bias");
  add(m.has_qk_norm(), "qk_norm");
  add(m.has_moe(), "moe");
  return set;
}

bool ModelIsSet(const fp8d::v1::ModelSpec& m) {
  return !m.preset().empty() || m.n_layer() || m.n_head() || m.d_model() || m.seq_len() || m.vocab_size() ||
         !m.architecture().empty() || !LlamaFieldsSet(m).empty();
}

// The family of a preset ("" for a name that is none).
std::string PresetFamily(const std::string& preset) {
  if (preset == "tiny" || preset == "gpt2-124m" || preset == "gpt-1b" || preset == "gpt-2b") return "gpt2";
  if (preset == "llama-tiny" || preset == "llama-1b" || preset == "llama-3b" || preset == "qwen3-0.6b" ||
      preset == "moe-tiny")
    return "llama";
  return "";
}

// A Llama-family rule: checked only for a llama model.
Rule<TrainSpec> OnLlama(const char* id, const char* field, std::function<std::string(const fp8d::v1::ModelSpec&)> f) {
  return OnModel(id, field, [f](const fp8d::v1::ModelSpec& m) { return m.architecture() == "llama" ? f(m) : std::string(); });
}
Rule<TrainSpec> OnLlama(const char* field, std::function<std::string(const fp8d::v1::ModelSpec&)> f) {
  return OnLlama(field, field, std::move(f));
}
// A rope_scaling rule: checked only when the message is set.
Rule<TrainSpec> OnRopeScaling(const char* field, std::function<std::string(const fp8d::v1::RopeScalingSpec&)> f) {
  return OnLlama(field, [f](const fp8d::v1::ModelSpec& m) { return m.has_rope_scaling() ? f(m.rope_scaling()) : std::string(); });
}

// A model.moe rule: checked only when the message is set (on a llama model).
Rule<TrainSpec> OnMoe(const char* id, const char* field, std::function<std::string(const fp8d::v1::ModelSpec&)> f) {
  return OnLlama(id, field, [f](const fp8d::v1::ModelSpec& m) { return m.has_moe() ? f(m) : std::string(); });
}
Rule<TrainSpec> OnMoe(const char* field, std::function<std::string(const fp8d::v1::ModelSpec&)> f) {
  return OnMoe(field, field, std::move(f));
}

const std::vector<Rule<TrainSpec>>& TrainRules() {
  using T = TrainSpec;
  using M = fp8d::v1::ModelSpec;
  static const std::vector<Rule<T>> rules = {
      {"model.with_init_from", "model",
       [](const T& s) {
         return !s.init_from().empty() && ModelIsSet(s.model())
                    ? "must be left out with init_from (the shape comes from the model it names)"
                    : "";
       }},
      OnModel("model.architecture", [](const M& m) { return OneOf(m.architecture(), {"gpt2", "llama"}); }),
      OnModel("model.preset", [](const M& m) {
        return OneOf(m.preset(),
                     {"tiny", "gpt2-124m", "gpt-1b", "gpt-2b", "llama-tiny", "llama-1b", "llama-3b", "qwen3-0.6b", "moe-tiny"});
      }),
      OnModel("model.preset.family", "model.preset",
              [](const M& m) {
                const std::string family = PresetFamily(m.preset());
                return family == m.architecture() ? ""
                                                  : "is a " + family + " preset, but model.architecture is " + m.architecture();
              }),
      OnModel("model.architecture.fields", "model.architecture",
              [](const M& m) {
                const std::string set = LlamaFieldsSet(m);
                return m.architecture() == "gpt2" && !set.empty()
                           ? "gpt2 has none of the Llama family's fields (set: " + set + ")"
                           : "";
              }),
      OnModel("model.n_layer", [](const M& m) { return Ints(m.n_layer(), 1, 1024); }),
      OnModel("model.n_head", [](const M& m) { return Ints(m.n_head(), 1, 1024); }),
      OnModel("model.d_model", [](const M& m) { return Ints(m.d_model(), 1, 65536); }),
      OnModel("model.seq_len", [](const M& m) { return Ints(m.seq_len(), 1, 1 << 20); }),
      OnModel("model.vocab_size", [](const M& m) { return Ints(m.vocab_size(), 1, 262144); }),  // Llama-3, Qwen fit
      OnModel("model.d_model.multiple", "model.d_model",
              [](const M& m) {
                // A llama model with head_dim given needs no such relation (Qwen3-0.6B).
                return m.d_model() % m.n_head() == 0 || (m.architecture() == "llama" && m.head_dim() != 0)
                           ? ""
                           : "must be a multiple of n_head (" + std::to_string(m.n_head()) + ")";
              }),
      OnLlama("model.num_key_value_heads", [](const M& m) { return Ints(m.num_key_value_heads(), 1, 1024); }),
      OnLlama("model.num_key_value_heads.divides", "model.num_key_value_heads",
              [](const M& m) {
                return m.num_key_value_heads() <= 0 || m.n_head() % m.num_key_value_heads() == 0
                           ? ""
                           : "must divide model.n_head (" + std::to_string(m.n_head()) + ")";
              }),
      OnLlama("model.intermediate_size", [](const M& m) { return Ints(m.intermediate_size(), 1, 1 << 20); }),
      OnLlama("model.head_dim", [](const M& m) { return Ints(m.head_dim(), 2, 1024); }),
      OnLlama("model.head_dim.even", "model.head_dim",
              [](const M& m) { return m.head_dim() % 2 == 0 ? "" : "must be even (the rotation pairs its two halves)"; }),
      OnLlama("model.attention_bias", [](const M& m) {
        // No Hugging Face class has both, so an export could not say what the model is.
        return m.attention_bias() && m.qk_norm() ? "must be false with qk_norm (Qwen2 has the biases, Qwen3 the norms)" : "";
      }),
      OnLlama("model.rms_norm_eps",
              [](const M& m) { return Real(m.rms_norm_eps(), m.rms_norm_eps() > 0 && m.rms_norm_eps() < 1, "(0, 1)"); }),
      OnLlama("model.rope_theta",
              [](const M& m) { return Real(m.rope_theta(), m.rope_theta() > 0 && m.rope_theta() <= 1e12, "(0, 1e12]"); }),
      OnRopeScaling("model.rope_scaling.rope_type", [](const auto& r) { return OneOf(r.rope_type(), {"llama3"}); }),
      OnRopeScaling("model.rope_scaling.factor",
                    [](const auto& r) { return Real(r.factor(), r.factor() >= 1 && r.factor() <= 1e6, "[1, 1e6]"); }),
      OnRopeScaling("model.rope_scaling.low_freq_factor", [](const auto& r) {
        return Real(r.low_freq_factor(), r.low_freq_factor() > 0 && r.low_freq_factor() <= 1e6, "(0, 1e6]");
      }),
      OnRopeScaling("model.rope_scaling.high_freq_factor", [](const auto& r) {
        return Real(r.high_freq_factor(), r.high_freq_factor() > r.low_freq_factor() && r.high_freq_factor() <= 1e6,
                    "(low_freq_factor, 1e6]");
      }),
      OnRopeScaling("model.rope_scaling.original_max_position_embeddings",
                    [](const auto& r) { return Ints(r.original_max_position_embeddings(), 1, 1 << 24); }),
      OnMoe("model.moe.num_experts", [](const M& m) { return Ints(m.moe().num_experts(), 1, 1024); }),
      OnMoe("model.moe.experts_per_token", [](const M& m) { return Ints(m.moe().experts_per_token(), 1, 1024); }),
      OnMoe("model.moe.experts_per_token.at_most", "model.moe.experts_per_token",
            [](const M& m) {
              return m.moe().experts_per_token() <= m.moe().num_experts()
                         ? ""
                         : "must be at most model.moe.num_experts (" + std::to_string(m.moe().num_experts()) +
                               "), got " + std::to_string(m.moe().experts_per_token());
            }),
      OnMoe("model.moe.moe_intermediate_size", [](const M& m) { return Ints(m.moe().moe_intermediate_size(), 1, 1 << 20); }),
      OnMoe("model.moe.num_shared_experts", [](const M& m) { return Ints(m.moe().num_shared_experts(), 0, 64); }),
      OnMoe("model.moe.router", [](const M& m) { return OneOf(m.moe().router(), {"softmax-topk", "sigmoid-bias"}); }),
      OnMoe("model.moe.capacity_factor",
            [](const M& m) {
              const double v = m.moe().capacity_factor();
              return Real(v, v >= 0 && v <= 64, "[0, 64] (0: dropless)");
            }),
      OnMoe("model.moe.aux_loss_coef",
            [](const M& m) { const double v = m.moe().aux_loss_coef(); return Real(v, v >= 0 && v <= 1, "[0, 1]"); }),
      OnMoe("model.moe.aux_loss_coef.router", "model.moe.aux_loss_coef",
            [](const M& m) {
              return m.moe().router() == "sigmoid-bias" && m.moe().aux_loss_coef() != 0
                         ? "must be 0 with router sigmoid-bias (its bias balances the load, not a loss)"
                         : "";
            }),
      OnMoe("model.moe.bias_update_rate",
            [](const M& m) { const double v = m.moe().bias_update_rate(); return Real(v, v >= 0 && v <= 1, "[0, 1]"); }),
      OnMoe("model.moe.bias_update_rate.router", "model.moe.bias_update_rate",
            [](const M& m) {
              return m.moe().router() == "softmax-topk" && m.moe().bias_update_rate() != 0
                         ? "must be 0 with router softmax-topk (it has no bias; aux_loss_coef balances it)"
                         : "";
            }),
      OnMoe("model.moe.first_dense_layers",
            [](const M& m) { return Ints(m.moe().first_dense_layers(), 0, std::max(0, m.n_layer() - 1)); }),
      // The CUDA model has no MoE layer yet; fp8-worker keeps the same refusal for an init_from
      // model (train_main.cc).
      {"model.moe.backend", "model.moe",
       [](const T& s) {
         return s.init_from().empty() && s.model().has_moe() && s.backend() == "cuda"
                    ? "the cuda backend does not run MoE yet"
                    : "";
       }},
      // An export writes Qwen3MoeForCausalLM, which has neither.
      {"training.export.moe", "training.export",
       [](const T& s) {
         if (!s.init_from().empty() || !s.model().has_moe() || s.training().export_() != "hf") return std::string();
         if (s.model().moe().router() == "sigmoid-bias")
           return std::string("hf writes Qwen3MoeForCausalLM, which routes by softmax-topk, not model.moe.router sigmoid-bias");
         if (s.model().moe().num_shared_experts() > 0)
           return std::string("hf writes Qwen3MoeForCausalLM, which has no shared experts (model.moe.num_shared_experts)");
         if (!s.model().qk_norm() || s.model().attention_bias())
           return std::string("hf writes Qwen3MoeForCausalLM, whose attention has q/k norms and no biases "
                              "(model.qk_norm true, model.attention_bias false)");
         return std::string();
       }},
      {"init_from", [](const T& s) { return Path(s.init_from(), false); }},
      {"data.train", [](const T& s) { return Path(s.data().train(), true); }},
      {"data.val", [](const T& s) { return Path(s.data().val(), false); }},
      {"precision.recipe", [](const T& s) { return OneOf(s.precision().recipe(), {"bf16", "fp8-tensorwise", "fp8-blockwise"}); }},
      {"precision.amax_history_len", [](const T& s) { return Ints(s.precision().amax_history_len(), 1, 1024); }},
      {"precision.margin", [](const T& s) { return Ints(s.precision().margin(), 0, 64); }},
      {"precision.scale_format", [](const T& s) { return OneOf(s.precision().scale_format(), {"fp32", "ue8m0"}); }},
      {"precision.amax_compute_algo",
       [](const T& s) { return OneOf(s.precision().amax_compute_algo(), {"max", "most_recent"}); }},
      {"training.max_steps", [](const T& s) { return AtLeast(s.training().max_steps(), 1); }},
      {"training.per_device_train_batch_size",
       [](const T& s) { return AtLeast(s.training().per_device_train_batch_size(), 1); }},
      {"training.gradient_accumulation_steps",
       [](const T& s) { return AtLeast(s.training().gradient_accumulation_steps(), 1); }},
      {"training.learning_rate",
       [](const T& s) { const double v = s.training().learning_rate(); return Real(v, v > 0 && v <= 10, "(0, 10]"); }},
      {"training.lr_scheduler_type",
       [](const T& s) { return OneOf(s.training().lr_scheduler_type(), {"cosine", "linear", "constant"}); }},
      {"training.warmup_steps", [](const T& s) { return Ints(s.training().warmup_steps(), 0, s.training().max_steps()); }},
      {"training.weight_decay",
       [](const T& s) { const double v = s.training().weight_decay(); return Real(v, v >= 0, "[0, inf)"); }},
      {"training.adam_beta1",
       [](const T& s) { const double v = s.training().adam_beta1(); return Real(v, v >= 0 && v < 1, "[0, 1)"); }},
      {"training.adam_beta2",
       [](const T& s) { const double v = s.training().adam_beta2(); return Real(v, v >= 0 && v < 1, "[0, 1)"); }},
      {"training.adam_epsilon",
       [](const T& s) { const double v = s.training().adam_epsilon(); return Real(v, v > 0, "(0, inf)"); }},
      {"training.max_grad_norm",
       [](const T& s) { const double v = s.training().max_grad_norm(); return Real(v, v >= 0, "[0, inf)"); }},
      {"training.seed", [](const T& s) { return AtLeast(s.training().seed(), 0); }},
      {"training.logging_steps", [](const T& s) { return AtLeast(s.training().logging_steps(), 1); }},
      {"training.eval_steps", [](const T& s) { return AtLeast(s.training().eval_steps(), 1); }},
      {"training.save_steps", [](const T& s) { return AtLeast(s.training().save_steps(), 1); }},
      {"training.save_total_limit", [](const T& s) { return AtLeast(s.training().save_total_limit(), 1); }},
      {"training.export",
       [](const T& s) { return s.training().export_().empty() ? "" : OneOf(s.training().export_(), {"hf"}); }},
      {"training.report_to", [](const T& s) { return ReportTo(s.training().report_to()); }},
      // As in Hugging Face's TrainingArguments: "none" means no reporting, so it stands alone.
      {"training.report_to.none", "training.report_to",
       [](const T& s) {
         const auto& r = s.training().report_to();
         return r.size() > 1 && std::find(r.begin(), r.end(), "none") != r.end() ? "none must be the only entry"
                                                                                 : std::string();
       }},
      {"output_dir", [](const T& s) { return Path(s.output_dir(), true); }},
      {"backend", [](const T& s) { return OneOf(s.backend(), {"auto", "cpu", "cuda"}); }},
  };
  return rules;
}

// resources.expert_parallel beside the train spec it runs (job.resources and job.train). The
// worker checks the same against the model it resolved (a mixture of experts from init_from too)
// and its ranks (worker/train/moe_dispatch.h, CheckExpertParallel).
struct ExpertParallelJob {
  const TrainSpec& train;
  const fp8d::v1::Resources& resources;
  int degree() const { return resources.expert_parallel(); }
  // The ranks the job gets (job.proto: ranks, or nodes × ranks_per_node; 0 = 1).
  int64_t ranks() const {
    if (resources.ranks() != 0) return resources.ranks();
    if (resources.nodes() != 0) return int64_t{resources.nodes()} * std::max(1, resources.ranks_per_node());
    return 1;
  }
};

const std::vector<Rule<ExpertParallelJob>>& ExpertParallelRules() {
  using J = ExpertParallelJob;
  static const std::vector<Rule<J>> rules = {
      {"resources.expert_parallel", [](const J& j) { return Ints(j.degree(), 0, 1024); }},
      {"resources.expert_parallel.moe", "resources.expert_parallel",
       [](const J& j) {
         const bool built_dense = j.train.init_from().empty() && !j.train.model().has_moe();
         return j.degree() > 1 && built_dense
                    ? "more than 1 needs a mixture of experts (model.moe) (got " + std::to_string(j.degree()) + ")"
                    : std::string();
       }},
      {"resources.expert_parallel.ranks", "resources.expert_parallel",
       [](const J& j) {
         return j.degree() > 1 && j.ranks() % j.degree() != 0
                    ? "must divide the ranks (" + std::to_string(j.ranks()) + ") (got " + std::to_string(j.degree()) + ")"
                    : std::string();
       }},
      {"resources.expert_parallel.num_experts", "resources.expert_parallel",
       [](const J& j) {
         if (j.degree() <= 1 || !j.train.init_from().empty() || !j.train.model().has_moe()) return std::string();
         const int experts = j.train.model().moe().num_experts();
         return experts % j.degree() != 0 ? "must divide model.moe.num_experts (" + std::to_string(experts) + ") (got " +
                                                std::to_string(j.degree()) + ")"
                                          : std::string();
       }},
      // fp8-tensorwise keeps one amax per expert weight, input and gradient a step, from the one
      // cast each rank makes of each expert; a rank computing an expert for its group casts it
      // once per member.
      {"resources.expert_parallel.recipe", "resources.expert_parallel",
       [](const J& j) {
         return j.degree() > 1 && j.train.precision().recipe() == "fp8-tensorwise"
                    ? "more than 1 runs with precision.recipe bf16 or fp8-blockwise, not fp8-tensorwise (got " +
                          std::to_string(j.degree()) + ")"
                    : std::string();
       }},
  };
  return rules;
}

const std::vector<Rule<CalibrateSpec>>& CalibrateRules() {
  using C = CalibrateSpec;
  static const std::vector<Rule<C>> rules = {
      {"input", [](const C& s) { return Path(s.input(), true); }},
      {"output_dir", [](const C& s) { return Path(s.output_dir(), true); }},
      // The output replaces output_dir as a whole (calibrate.cc stages it next to it).
      {"output_dir.replaceable", "output_dir",
       [](const C& s) {
         std::string d = s.output_dir();
         while (d.size() > 1 && d.back() == '/') d.pop_back();
         return d == "/" || d == "." || d == ".." ? "\"" + d + "\" cannot be replaced by the output" : "";
       }},
      {"weights.granularity", [](const C& s) { return OneOf(s.weights().granularity(), {"block", "channel", "tensor"}); }},
      // E5M2 has too few mantissa bits for weights; the kernels use it for gradients only.
      {"weights.fmt", [](const C& s) { return OneOf(s.weights().fmt(), {"e4m3"}); }},
      {"weights.scale_format", [](const C& s) { return OneOf(s.weights().scale_format(), {"fp32", "ue8m0"}); }},
      {"weights.include", [](const C& s) { return Patterns(s.weights().include()); }},
      {"weights.exclude", [](const C& s) { return Patterns(s.weights().exclude()); }},
      {"activations.data", [](const C& s) { return Path(s.activations().data(), false); }},
      {"activations.data.direction", "activations.data",
       [](const C& s) {
         return !s.activations().data().empty() && s.direction() != "quantize"
                    ? "static activation scales are calibrated by direction quantize only"
                    : "";
       }},
      {"activations.num_samples", [](const C& s) { return Ints(s.activations().num_samples(), 1, 1 << 30); }},
      {"activations.method", [](const C& s) { return OneOf(s.activations().method(), {"max", "percentile", "mse"}); }},
      {"activations.percentile",
       [](const C& s) { const double v = s.activations().percentile(); return Real(v, v > 0 && v <= 100, "(0, 100]"); }},
      {"direction", [](const C& s) { return OneOf(s.direction(), {"quantize", "dequantize"}); }},
      {"backend", [](const C& s) { return OneOf(s.backend(), {"auto", "cpu", "cuda"}); }},
      {"output_format", [](const C& s) { return OneOf(s.output_format(), {"auto", "compressed-tensors", "deepseek"}); }},
      // vLLM's and SGLang's fp8 loaders (quantization/fp8.py) read `weight_scale_inv` only for
      // block weights: per-tensor and per-channel weights there want `weight_scale`.
      {"output_format.granularity", "output_format",
       [](const C& s) {
         return s.output_format() == "deepseek" && s.weights().granularity() != "block"
                    ? "deepseek holds block weights only (got weights.granularity \"" + s.weights().granularity() +
                          "\"); use compressed-tensors or auto"
                    : std::string();
       }},
      // Fp8Config in the same files raises for block weights with activation_scheme static.
      {"output_format.activations", "output_format",
       [](const C& s) {
         return s.output_format() == "deepseek" && !s.activations().data().empty()
                    ? "deepseek holds dynamic activations only (vLLM's and SGLang's fp8 loaders refuse block "
                      "weights with static activation scales); leave activations.data out, or use "
                      "compressed-tensors with weights.granularity channel or tensor"
                    : std::string();
       }},
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

fp8::Status ValidateExpertParallel(const TrainSpec& train, const fp8d::v1::Resources& resources, std::string_view prefix) {
  return Validate(ExpertParallelRules(), ExpertParallelJob{train, resources}, prefix);
}

std::vector<std::string> ExpertParallelRuleIds() { return Ids(ExpertParallelRules()); }
std::string FirstBrokenExpertParallelRule(const TrainSpec& train, const fp8d::v1::Resources& resources) {
  const auto* rule = FirstBroken(ExpertParallelRules(), ExpertParallelJob{train, resources}).first;
  return rule ? rule->id : "";
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
