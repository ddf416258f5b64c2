// SPDX-License-Identifier: Apache-2.0
#include "worker/train/hf_qwen3_moe.h"

#include "worker/train/hf_model.h"
#include "worker/train/hf_moe_common.h"

namespace fp8::train {
using json = nlohmann::json;

Status ReadQwen3MoeConfig(const json& c, const std::string& where, ModelConfig* m) {
  MoeConfig& e = m->moe;
  FP8_RETURN_IF_ERROR(ReadHfMoeRouting(c, kQwen3MoeFamily, where, /*Qwen3MoeConfig's default*/ 0.001, m));
  FP8_ASSIGN_OR_RETURN(e.moe_intermediate_size, ConfigPositiveInt(c, "moe_intermediate_size", where));
  e.norm_topk_prob = false;  // Qwen3MoeConfig's default
  if (!HfFieldUnset(c, "norm_topk_prob")) {
    if (!c["norm_topk_prob"].is_boolean()) return HfFieldRefused(where, c, "norm_topk_prob", "must be true or false");
    e.norm_topk_prob = c["norm_topk_prob"].get<bool>();
  }
  if (!HfFieldUnset(c, "decoder_sparse_step") && c["decoder_sparse_step"] != 1)
    return HfFieldRefused(where, c, "decoder_sparse_step", "fp8d's MoE layers are every layer after the dense ones (1)");
  // mlp_only_layers: the dense layers; fp8d's are the first ones.
  e.first_dense_layers = 0;
  if (!HfFieldUnset(c, "mlp_only_layers")) {
    const json& dense = c["mlp_only_layers"];
    if (!dense.is_array()) return HfFieldRefused(where, c, "mlp_only_layers", "must be a list of layer indices");
    for (size_t i = 0; i < dense.size(); ++i)
      if (dense[i] != static_cast<int>(i))
        return HfFieldRefused(where, c, "mlp_only_layers", "fp8d keeps only the first layers dense ([0, 1, ..., k-1])");
    e.first_dense_layers = static_cast<int>(dense.size());
    if (e.first_dense_layers >= m->n_layer)
      return HfFieldRefused(where, c, "mlp_only_layers", "leaves no MoE layer (num_hidden_layers " + std::to_string(m->n_layer) + ")");
  }
  return OkStatus();
}

std::string Qwen3MoeExportRefusal(const ModelConfig& cfg) {
  const std::string arch = kQwen3MoeArchitecture;
  if (std::string r = HfMoeRoutingRefusal(cfg, kQwen3MoeFamily); !r.empty()) return r;
  if (!cfg.qk_norm) return arch + "'s attention has q/k norms; this model's has none (model.qk_norm)";
  if (cfg.attention_bias) return arch + "'s attention has no q/k/v biases; this model's has (model.attention_bias)";
  return "";
}

void AddQwen3MoeConfig(const ModelConfig& cfg, json* c) {
  const MoeConfig& e = cfg.moe;
  json dense = json::array();
  for (int l = 0; l < e.first_dense_layers; ++l) dense.push_back(l);
  AddHfMoeRouting(cfg, kQwen3MoeFamily, c);
  (*c)["moe_intermediate_size"] = e.moe_intermediate_size;
  (*c)["norm_topk_prob"] = e.norm_topk_prob;
  (*c)["decoder_sparse_step"] = 1;
  (*c)["mlp_only_layers"] = dense;
}

}  // namespace fp8::train
