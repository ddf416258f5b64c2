// SPDX-License-Identifier: Apache-2.0
#include "worker/train/hf_llama.h"

#include <algorithm>
#include <cmath>

#include "worker/train/hf_mixtral.h"
#include "worker/train/hf_qwen3_moe.h"

namespace fp8::train {
using json = nlohmann::json;

namespace {

struct Family {
  const char* architecture;
  const char* model_type;
};
constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
    {kQwen3MoeArchitecture, "qwen3_moe"},  // its MoE fields: hf_qwen3_moe.h
    {kMixtralArchitecture, "mixtral"},     // Mistral's attention, its MoE fields: hf_mixtral.h
};

const Family* FamilyOf(const json& c) {
  if (c.contains("architectures")) {
    if (!c["architectures"].is_array()) return nullptr;
    for (const json& e : c["architectures"])
      for (const Family& f : kFamilies)
        if (e == f.architecture) return &f;
    return nullptr;
  }
  for (const Family& f : kFamilies)
    if (c.value("model_type", json()) == f.model_type) return &f;
  return nullptr;
}

const Family& FamilyNamed(const std::string& architecture) {
  for (const Family& f : kFamilies)
    if (architecture == f.architecture) return f;
  return kFamilies[0];
}

// The field is absent or null (transformers writes null for "not set").
bool Unset(const json& obj, const std::string& key) { return !obj.contains(key) || obj[key].is_null(); }

Status Refuse(const std::string& where, const json& obj, const std::string& key, const std::string& why) {
  return DataLossError(where + ": field \"" + key + "\" is " + obj[key].dump() + "; " + why);
}

// A positive number, `fallback` when unset.
StatusOr<double> PositiveNumber(const json& obj, const std::string& key, double fallback, const std::string& where,
                                const std::string& path) {
  if (Unset(obj, key)) {
    if (fallback > 0) return fallback;
    return DataLossError(where + ": field \"" + path + "\" is missing");
  }
  if (!obj[key].is_number() || !(obj[key].get<double>() > 0) || !std::isfinite(obj[key].get<double>()))
    return DataLossError(where + ": field \"" + path + "\" must be a positive number, got " + obj[key].dump());
  return obj[key].get<double>();
}

// rope_theta and the rope kind, from transformers 5's rope_parameters or the older top-level
// rope_theta / rope_scaling.
Status ReadRope(const json& c, const std::string& where, ModelConfig* m) {
  const bool v5 = c.contains("rope_parameters") && !c["rope_parameters"].is_null();
  const json& params = v5 ? c["rope_parameters"] : c;
  const std::string prefix = v5 ? "rope_parameters." : "";
  if (!params.is_object()) return DataLossError(where + ": field \"rope_parameters\" is not an object");
  FP8_ASSIGN_OR_RETURN(m->rope_theta, PositiveNumber(params, "rope_theta", v5 ? 0 : 10000, where, prefix + "rope_theta"));
  // The scaling's fields: in rope_parameters itself (5.x), or in rope_scaling.
  const json* scaling = v5 ? &params : (Unset(c, "rope_scaling") ? nullptr : &c["rope_scaling"]);
  const std::string sp = v5 ? "rope_parameters." : "rope_scaling.";
  for (const json* obj : {&c, scaling}) {
    if (obj && obj->is_object() && !Unset(*obj, "partial_rotary_factor") &&
        (!(*obj)["partial_rotary_factor"].is_number() || (*obj)["partial_rotary_factor"].get<double>() != 1.0))
      return Refuse(where, *obj, "partial_rotary_factor", "fp8d rotates every channel of a head (1.0)");
  }
  if (!scaling) return OkStatus();
  if (!scaling->is_object()) return DataLossError(where + ": field \"rope_scaling\" is not an object");
  const std::string type_key = scaling->contains("rope_type") ? "rope_type" : "type";
  const std::string type = scaling->value(type_key, std::string("default"));
  if (type == "default") return OkStatus();
  if (type != "llama3")
    return Refuse(where, *scaling, type_key,
                  "fp8d computes the default rotary frequencies and Llama-3's (llama3), no other rope kind"
                  " (field " + sp + type_key + ")");
  RopeScaling& r = m->rope_scaling;
  r.llama3 = true;
  FP8_ASSIGN_OR_RETURN(r.factor, PositiveNumber(*scaling, "factor", 0, where, sp + "factor"));
  FP8_ASSIGN_OR_RETURN(r.low_freq_factor, PositiveNumber(*scaling, "low_freq_factor", 0, where, sp + "low_freq_factor"));
  FP8_ASSIGN_OR_RETURN(r.high_freq_factor, PositiveNumber(*scaling, "high_freq_factor", 0, where, sp + "high_freq_factor"));
  FP8_ASSIGN_OR_RETURN(r.original_max_position_embeddings,
                       ConfigPositiveInt(*scaling, "original_max_position_embeddings", where));
  if (r.high_freq_factor <= r.low_freq_factor)
    return DataLossError(where + ": field \"" + sp + "high_freq_factor\" must be larger than low_freq_factor");
  return OkStatus();
}

// Fields that change the math away from what LlamaModel computes.
Status CheckSemantics(const json& c, const Family& f, const std::string& where) {
  const std::string arch = f.architecture;
  if (!Unset(c, "hidden_act") && c["hidden_act"] != "silu")
    return Refuse(where, c, "hidden_act", "fp8d's Llama MLP is SwiGLU (silu)");
  if (!Unset(c, "mlp_bias") && c["mlp_bias"] != false) return Refuse(where, c, "mlp_bias", "fp8d's Llama MLP has no biases");
  if (arch != "Qwen2ForCausalLM" && !Unset(c, "attention_bias") && c["attention_bias"] != false)
    return Refuse(where, c, "attention_bias",
                  "with it " + arch + " puts a bias on o_proj too; fp8d's attention biases are Qwen2's (q/k/v only)");
  // A sliding window that is used: Mistral's whenever set, Qwen's with use_sliding_window.
  if ((arch == "MistralForCausalLM" || arch == kMixtralArchitecture) && !Unset(c, "sliding_window"))
    return Refuse(where, c, "sliding_window", "fp8d's attention is full causal attention (null)");
  if ((arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM" || arch == kQwen3MoeArchitecture) &&
      !Unset(c, "use_sliding_window") &&
      c["use_sliding_window"] != false)
    return Refuse(where, c, "use_sliding_window", "fp8d's attention is full causal attention (false)");
  if (!Unset(c, "layer_types") && c["layer_types"].is_array())
    for (const json& t : c["layer_types"])
      if (t != "full_attention") return Refuse(where, c, "layer_types", "fp8d's layers are all full_attention");
  return OkStatus();
}

}  // namespace

bool IsLlamaHfConfig(const json& c) { return FamilyOf(c) != nullptr; }

StatusOr<ModelConfig> LlamaConfigFromHf(const json& c, const std::string& file) {
  const Family* family = FamilyOf(c);
  if (!family) return DataLossError(file + ": not a Llama-family config.json");
  const std::string where = file + " (" + family->architecture + ")";
  if (!Unset(c, "model_type") && c["model_type"] != family->model_type)
    return DataLossError(where + ": field \"model_type\" is " + c["model_type"].dump() + "; " + family->architecture +
                         "'s is " + family->model_type);
  ModelConfig m;
  m.architecture = Architecture::kLlama;
  m.hf_architecture = family->architecture;
  FP8_ASSIGN_OR_RETURN(m.d_model, ConfigPositiveInt(c, "hidden_size", where));
  FP8_ASSIGN_OR_RETURN(m.n_layer, ConfigPositiveInt(c, "num_hidden_layers", where));
  FP8_ASSIGN_OR_RETURN(m.n_head, ConfigPositiveInt(c, "num_attention_heads", where));
  FP8_ASSIGN_OR_RETURN(m.vocab_size, ConfigPositiveInt(c, "vocab_size", where));
  FP8_ASSIGN_OR_RETURN(m.intermediate_size, ConfigPositiveInt(c, "intermediate_size", where));
  FP8_ASSIGN_OR_RETURN(m.max_position_embeddings, ConfigPositiveInt(c, "max_position_embeddings", where));
  m.seq_len = std::min(m.max_position_embeddings, kLlamaImportSeqLen);
  m.n_kv_head = m.n_head;
  if (!Unset(c, "num_key_value_heads")) {
    FP8_ASSIGN_OR_RETURN(m.n_kv_head, ConfigPositiveInt(c, "num_key_value_heads", where));
  }
  if (m.n_head % m.n_kv_head != 0)
    return DataLossError(where + ": field \"num_key_value_heads\" (" + std::to_string(m.n_kv_head) +
                         ") does not divide \"num_attention_heads\" (" + std::to_string(m.n_head) + ")");
  if (!Unset(c, "head_dim")) {
    FP8_ASSIGN_OR_RETURN(m.head_dim, ConfigPositiveInt(c, "head_dim", where));
  } else if (m.d_model % m.n_head == 0) {
    m.head_dim = m.d_model / m.n_head;
  } else {
    return DataLossError(where + ": field \"head_dim\" is missing and \"hidden_size\" is not a multiple of \"num_attention_heads\"");
  }
  if (m.head_dim % 2 != 0) return DataLossError(where + ": field \"head_dim\" (" + std::to_string(m.head_dim) + ") must be even");
  // transformers' default for all four.
  FP8_ASSIGN_OR_RETURN(m.rms_norm_eps, PositiveNumber(c, "rms_norm_eps", 1e-6, where, "rms_norm_eps"));
  FP8_RETURN_IF_ERROR(CheckSemantics(c, *family, where));
  FP8_RETURN_IF_ERROR(ReadRope(c, where, &m));
  if (!Unset(c, "tie_word_embeddings")) {
    if (!c["tie_word_embeddings"].is_boolean()) return Refuse(where, c, "tie_word_embeddings", "must be true or false");
    m.tie_word_embeddings = c["tie_word_embeddings"].get<bool>();
  }
  m.attention_bias = std::string(family->architecture) == "Qwen2ForCausalLM";
  const std::string arch = family->architecture;
  m.qk_norm = arch == "Qwen3ForCausalLM" || arch == kQwen3MoeArchitecture;
  if (arch == kQwen3MoeArchitecture) FP8_RETURN_IF_ERROR(ReadQwen3MoeConfig(c, where, &m));
  if (arch == kMixtralArchitecture) FP8_RETURN_IF_ERROR(ReadMixtralConfig(c, where, &m));
  return m;
}

std::string LlamaHfArchitecture(const ModelConfig& cfg) {
  if (!cfg.hf_architecture.empty()) return cfg.hf_architecture;
  if (cfg.moe.enabled()) return kQwen3MoeArchitecture;
  if (cfg.qk_norm) return "Qwen3ForCausalLM";
  if (cfg.attention_bias) return "Qwen2ForCausalLM";
  return "LlamaForCausalLM";
}

HfLayout LlamaHfLayout(const ModelConfig& cfg) {
  const std::string arch = LlamaHfArchitecture(cfg);
  const Family& f = FamilyNamed(arch);
  HfLayout l;
  l.export_name = [](const std::string& name) { return name; };
  const bool tied = cfg.tie_word_embeddings;
  l.import_name = [tied](const std::string& name) {
    // The rotary frequencies older checkpoints keep as a buffer, and the head of a tied model
    // (some writers store it anyway).
    if (name.ends_with(".rotary_emb.inv_freq") || (tied && name == "lm_head.weight")) return std::string();
    return name;
  };
  l.transposed = [](const std::string&) { return false; };
  l.family = arch;
  json rope_scaling = nullptr;
  if (cfg.rope_scaling.llama3)
    rope_scaling = {{"rope_type", "llama3"}, {"factor", cfg.rope_scaling.factor},
                    {"low_freq_factor", cfg.rope_scaling.low_freq_factor},
                    {"high_freq_factor", cfg.rope_scaling.high_freq_factor},
                    {"original_max_position_embeddings", cfg.rope_scaling.original_max_position_embeddings}};
  json c = {
      {"architectures", {arch}},
      {"model_type", f.model_type},
      {"hidden_size", cfg.d_model},
      {"intermediate_size", cfg.intermediate_size},
      {"num_hidden_layers", cfg.n_layer},
      {"num_attention_heads", cfg.n_head},
      {"num_key_value_heads", cfg.n_kv_head},
      {"head_dim", cfg.head_dim},
      {"max_position_embeddings", cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : cfg.seq_len},
      {"vocab_size", cfg.vocab_size},
      {"rms_norm_eps", cfg.rms_norm_eps},
      {"rope_theta", cfg.rope_theta},
      {"rope_scaling", rope_scaling},
      {"tie_word_embeddings", cfg.tie_word_embeddings},
      {"hidden_act", "silu"},
      {"initializer_range", 0.02},
      // fp8d trains without dropout; fine-tuning elsewhere starts from the same behaviour.
      {"attention_dropout", 0.0},
      {"use_cache", true},
      {"torch_dtype", "float32"},
  };
  if (arch == "LlamaForCausalLM") {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
    c["pretraining_tp"] = 1;
  } else if (arch == "MistralForCausalLM" || arch == kMixtralArchitecture) {
    c["sliding_window"] = nullptr;
  } else {  // Qwen2, Qwen3, Qwen3-MoE
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    if (arch != "Qwen2ForCausalLM") c["attention_bias"] = false;
  }
  if (arch == kQwen3MoeArchitecture) {
    AddQwen3MoeConfig(cfg, &c);
    l.refusal = Qwen3MoeExportRefusal(cfg);
  } else if (cfg.moe.enabled() && arch != kMixtralArchitecture) {
    l.refusal = arch + " has no mixture of experts";
  }
  l.config = std::move(c);
  if (arch == kMixtralArchitecture) AddMixtralLayout(cfg, &l);
  l.generation_config = {{"_from_model_config", true}};
  return l;
}

}  // namespace fp8::train
