// SPDX-License-Identifier: Apache-2.0
#include "worker/train/hf_mixtral.h"

namespace fp8::train {
using json = nlohmann::json;

Status ReadMixtralConfig(const json& c, const std::string& where, ModelConfig* m) {
  FP8_RETURN_IF_ERROR(ReadHfMoeRouting(c, kMixtralFamily, where, /*MixtralConfig's default*/ 0.001, m));
  if (!HfFieldUnset(c, "router_jitter_noise") &&
      (!c["router_jitter_noise"].is_number() || c["router_jitter_noise"].get<double>() != 0))
    return HfFieldRefused(where, c, "router_jitter_noise", "fp8d's router adds no noise to its inputs (0.0)");
  MoeConfig& e = m->moe;
  e.moe_intermediate_size = m->intermediate_size;  // MixtralBlockSparseTop2MLP's width
  e.norm_topk_prob = true;                         // MixtralSparseMoeBlock always renormalises
  e.first_dense_layers = 0;                        // and every layer has one
  return OkStatus();
}

std::string MixtralExportRefusal(const ModelConfig& cfg) {
  const std::string arch = kMixtralArchitecture;
  if (std::string r = HfMoeRoutingRefusal(cfg, kMixtralFamily); !r.empty()) return r;
  if (cfg.moe.first_dense_layers > 0)
    return arch + " has experts in every layer; this model keeps " + std::to_string(cfg.moe.first_dense_layers) +
           " dense (model.moe.first_dense_layers)";
  if (!cfg.moe.norm_topk_prob)
    return arch + " renormalises the top-k router weights; this model does not (model.moe.norm_topk_prob)";
  if (cfg.qk_norm) return arch + "'s attention has no q/k norms; this model's has (model.qk_norm)";
  if (cfg.attention_bias) return arch + "'s attention has no biases; this model's has (model.attention_bias)";
  return "";
}

void AddMixtralLayout(const ModelConfig& cfg, HfLayout* l) {
  l->refusal = MixtralExportRefusal(cfg);
  l->export_name = [](const std::string& name) { return HfMoeFileName(kMixtralFamily, name); };
  l->import_name = [llama = l->import_name](const std::string& name) {
    const std::string kept = llama(name);
    return kept.empty() ? kept : HfMoeFp8dName(kMixtralFamily, kept);
  };
  json& c = l->config;
  c["intermediate_size"] = cfg.moe.moe_intermediate_size;
  AddHfMoeRouting(cfg, kMixtralFamily, &c);
  c["router_jitter_noise"] = 0.0;
}

}  // namespace fp8::train
