#include "worker/train/hf_qwen3_moe.h"

#include <cmath>

#include "worker/train/hf_model.h"

namespace fp8::train {
using json = nlohmann::json;

namespace {

bool Unset(const json& obj, const std::string& key) { return !obj.contains(key) || obj[key].is_null(); }

Status Refuse(const std::string& where, const json& obj, const std::string& key, const std::string& why) {
  return DataLossError(where + ": field \"" + key + "\" is " + obj[key].dump() + "; " + why);
}

}  // namespace

Status ReadQwen3MoeConfig(const json& c, const std::string& where, ModelConfig* m) {
  MoeConfig& e = m->moe;
  FP8_ASSIGN_OR_RETURN(e.num_experts, ConfigPositiveInt(c, "num_experts", where));
  if (e.num_experts > 1024) return Refuse(where, c, "num_experts", "fp8d takes at most 1024 experts");
  FP8_ASSIGN_OR_RETURN(e.experts_per_token, ConfigPositiveInt(c, "num_experts_per_tok", where));
  if (e.experts_per_token > e.num_experts)
    return Refuse(where, c, "num_experts_per_tok", "must be at most \"num_experts\" (" + std::to_string(e.num_experts) + ")");
  FP8_ASSIGN_OR_RETURN(e.moe_intermediate_size, ConfigPositiveInt(c, "moe_intermediate_size", where));
  e.norm_topk_prob = false;  // Qwen3MoeConfig's default
  if (!Unset(c, "norm_topk_prob")) {
    if (!c["norm_topk_prob"].is_boolean()) return Refuse(where, c, "norm_topk_prob", "must be true or false");
    e.norm_topk_prob = c["norm_topk_prob"].get<bool>();
  }
  if (!Unset(c, "decoder_sparse_step") && c["decoder_sparse_step"] != 1)
    return Refuse(where, c, "decoder_sparse_step", "fp8d's MoE layers are every layer after the dense ones (1)");
  // mlp_only_layers: the dense layers; fp8d's are the first ones.
  e.first_dense_layers = 0;
  if (!Unset(c, "mlp_only_layers")) {
    const json& dense = c["mlp_only_layers"];
    if (!dense.is_array()) return Refuse(where, c, "mlp_only_layers", "must be a list of layer indices");
    for (size_t i = 0; i < dense.size(); ++i)
      if (dense[i] != static_cast<int>(i))
        return Refuse(where, c, "mlp_only_layers", "fp8d keeps only the first layers dense ([0, 1, ..., k-1])");
    e.first_dense_layers = static_cast<int>(dense.size());
    if (e.first_dense_layers >= m->n_layer)
      return Refuse(where, c, "mlp_only_layers", "leaves no MoE layer (num_hidden_layers " + std::to_string(m->n_layer) + ")");
  }
  e.aux_loss_coef = 0.001;  // Qwen3MoeConfig's default
  if (!Unset(c, "router_aux_loss_coef")) {
    const json& v = c["router_aux_loss_coef"];
    if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > 1)
      return Refuse(where, c, "router_aux_loss_coef", "must be a number in [0, 1]");
    e.aux_loss_coef = v.get<double>();
  }
  e.router = MoeRouter::kSoftmaxTopK;
  e.num_shared_experts = 0;
  e.capacity_factor = 0;
  e.bias_update_rate = 0;
  return OkStatus();
}

std::string Qwen3MoeExportRefusal(const ModelConfig& cfg) {
  const std::string arch = kQwen3MoeArchitecture;
  if (cfg.moe.router != MoeRouter::kSoftmaxTopK)
    return arch + " routes by softmax-topk; this model's router is " + MoeRouterName(cfg.moe.router);
  if (cfg.moe.num_shared_experts > 0) return arch + " has no shared experts; this model has " +
                                             std::to_string(cfg.moe.num_shared_experts);
  if (!cfg.qk_norm) return arch + "'s attention has q/k norms; this model's has none (model.qk_norm)";
  if (cfg.attention_bias) return arch + "'s attention has no q/k/v biases; this model's has (model.attention_bias)";
  return "";
}

void AddQwen3MoeConfig(const ModelConfig& cfg, json* c) {
  const MoeConfig& e = cfg.moe;
  json dense = json::array();
  for (int l = 0; l < e.first_dense_layers; ++l) dense.push_back(l);
  (*c)["num_experts"] = e.num_experts;
  (*c)["num_experts_per_tok"] = e.experts_per_token;
  (*c)["moe_intermediate_size"] = e.moe_intermediate_size;
  (*c)["norm_topk_prob"] = e.norm_topk_prob;
  (*c)["decoder_sparse_step"] = 1;
  (*c)["mlp_only_layers"] = dense;
  (*c)["router_aux_loss_coef"] = e.aux_loss_coef;
  (*c)["output_router_logits"] = false;
}

}  // namespace fp8::train
