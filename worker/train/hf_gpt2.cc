// SPDX-License-Identifier: Apache-2.0
#include "worker/train/hf_gpt2.h"

#include <cmath>

namespace fp8::train {
using json = nlohmann::json;

namespace {

constexpr const char* kTransformerPrefix = "transformer.";

// Fields of a GPT-2 config.json that change the math: each must be what fp8d's GPT computes.
Status CheckGpt2Semantics(const json& c, const std::string& where) {
  auto bad = [&](const std::string& key, const std::string& why) {
    return DataLossError(where + ": field \"" + key + "\" is " + c[key].dump() + "; " + why);
  };
  if (c.contains("activation_function") && c["activation_function"] != "gelu_new" &&
      c["activation_function"] != "gelu_pytorch_tanh")
    return bad("activation_function", "fp8d's GPT uses GPT-2's tanh GELU (gelu_new)");
  if (c.contains("layer_norm_epsilon") &&
      (!c["layer_norm_epsilon"].is_number() || std::fabs(c["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12))
    return bad("layer_norm_epsilon", "fp8d's GPT uses 1e-5");
  if (c.contains("tie_word_embeddings") && c["tie_word_embeddings"] == false)
    return bad("tie_word_embeddings", "fp8d's GPT ties the head to wte");
  if (c.contains("scale_attn_weights") && c["scale_attn_weights"] == false)
    return bad("scale_attn_weights", "fp8d's GPT scales attention scores by 1/sqrt(head_dim)");
  if (c.contains("scale_attn_by_inverse_layer_idx") && c["scale_attn_by_inverse_layer_idx"] == true)
    return bad("scale_attn_by_inverse_layer_idx", "fp8d's GPT does not scale attention by layer");
  if (c.contains("n_inner") && !c["n_inner"].is_null() &&
      !(c["n_inner"].is_number_integer() && c["n_inner"].get<int64_t>() == 4 * c.value("n_embd", int64_t{0})))
    return bad("n_inner", "fp8d's GPT's MLP is 4·n_embd wide");
  return OkStatus();
}

json HfConfig(const ModelConfig& m) {
  json c = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"n_embd", m.d_model},
      {"n_layer", m.n_layer},
      {"n_head", m.n_head},
      {"n_positions", m.seq_len},
      {"n_ctx", m.seq_len},
      {"vocab_size", m.vocab_size},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      // fp8d trains without dropout; fine-tuning elsewhere starts from the same behaviour.
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"use_cache", true},
      {"torch_dtype", "float32"},
  };
  // GPT-2's tokenizer (50257 ids, or padded to 50304) ends its text with <|endoftext|> = 50256.
  if (m.vocab_size >= 50257) c["bos_token_id"] = c["eos_token_id"] = 50256;
  return c;
}

json GenerationConfig(const ModelConfig& m) {
  json gen = {{"_from_model_config", true}};
  if (m.vocab_size >= 50257) gen["bos_token_id"] = gen["eos_token_id"] = 50256;
  return gen;
}

}  // namespace

bool IsGpt2HfConfig(const json& c) {
  if (c.contains("architectures")) {
    bool gpt2 = false;
    if (c["architectures"].is_array())
      for (const json& e : c["architectures"]) gpt2 = gpt2 || e == "GPT2LMHeadModel" || e == "GPT2Model";
    return gpt2;
  }
  return c.value("model_type", json()) == "gpt2";
}

StatusOr<ModelConfig> Gpt2ConfigFromHf(const json& c, const std::string& where) {
  if (c.contains("model_type") && c["model_type"] != "gpt2")
    return DataLossError(where + ": field \"model_type\" is " + c["model_type"].dump() + "; GPT2LMHeadModel's is gpt2");
  FP8_RETURN_IF_ERROR(CheckGpt2Semantics(c, where));
  ModelConfig m;
  m.preset = "";
  FP8_ASSIGN_OR_RETURN(m.n_layer, ConfigPositiveInt(c, "n_layer", where));
  FP8_ASSIGN_OR_RETURN(m.n_head, ConfigPositiveInt(c, "n_head", where));
  FP8_ASSIGN_OR_RETURN(m.d_model, ConfigPositiveInt(c, "n_embd", where));
  FP8_ASSIGN_OR_RETURN(m.seq_len, ConfigPositiveInt(c, c.contains("n_positions") ? "n_positions" : "n_ctx", where));
  FP8_ASSIGN_OR_RETURN(m.vocab_size, ConfigPositiveInt(c, "vocab_size", where));
  if (m.d_model % m.n_head != 0)
    return DataLossError(where + ": field \"n_embd\" (" + std::to_string(m.d_model) + ") is not a multiple of \"n_head\" (" +
                         std::to_string(m.n_head) + ")");
  return m;
}

std::string HfTensorName(const std::string& fp8d_name) { return kTransformerPrefix + fp8d_name; }

bool IsConv1DWeight(const std::string& n) {
  return n.ends_with(".weight") && (n.find(".attn.c_attn.") != std::string::npos ||
                                    n.find(".attn.c_proj.") != std::string::npos ||
                                    n.find(".mlp.c_fc.") != std::string::npos ||
                                    n.find(".mlp.c_proj.") != std::string::npos);
}

HfLayout Gpt2HfLayout(const ModelConfig& cfg) {
  HfLayout l;
  l.export_name = HfTensorName;
  l.import_name = [](const std::string& file_name) {
    // Prefixed (GPT2LMHeadModel) and bare (GPT2Model) names alike.
    std::string name = file_name;
    if (name.starts_with(kTransformerPrefix)) name = name.substr(std::string(kTransformerPrefix).size());
    // The causal-mask buffers older GPT-2 checkpoints carry, and the tied head.
    if (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") || name == "lm_head.weight") return std::string();
    return name;
  };
  l.transposed = IsConv1DWeight;
  l.family = "GPT-2";
  l.config = HfConfig(cfg);
  l.generation_config = GenerationConfig(cfg);
  return l;
}

}  // namespace fp8::train
