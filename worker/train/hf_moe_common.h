// SPDX-License-Identifier: Apache-2.0
// What the two mixtures of experts fp8d reads and writes in Hugging Face form have in common:
// Qwen3MoeForCausalLM (hf_qwen3_moe.h) and MixtralForCausalLM (hf_mixtral.h) both route by a
// softmax over all experts and take the top k (Mixtral always renormalises them), balance by
// router_aux_loss_coef, and store one router and one tensor per expert projection per sparse
// layer, each under its own names. Here: the routing fields of config.json, the export refusal
// both share, the mapping between fp8d's tensor names (Qwen3-MoE's) and a family's, and the
// list of MoE tensors a config.json promises, which the calibration checks before it converts.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/spec.h"

namespace fp8::train {

// How one family names its MoE config fields and tensors. fp8d's own names are Qwen3-MoE's:
// model.layers.<l>.mlp.gate.weight and model.layers.<l>.mlp.experts.<e>.{gate,up,down}_proj.weight.
struct HfMoeFamily {
  const char* architecture;
  const char* model_type;
  const char* experts_key;  // config.json's number of experts
  // The other name a writer uses for it, read when experts_key is absent (transformers 5 saves
  // Qwen3-MoE's as num_local_experts); null: none.
  const char* experts_alias;
  const char* block;        // the layer's MoE module: "mlp", "block_sparse_moe"
  const char* projections[3];  // an expert's projections, in fp8d's order: gate, up, down
};
inline constexpr HfMoeFamily kQwen3MoeFamily = {"Qwen3MoeForCausalLM", "qwen3_moe", "num_experts", "num_local_experts",
                                                 "mlp", {"gate_proj", "up_proj", "down_proj"}};
inline constexpr HfMoeFamily kMixtralFamily = {"MixtralForCausalLM", "mixtral", "num_local_experts", nullptr,
                                               "block_sparse_moe", {"w1", "w3", "w2"}};

// config.json's field `key` is absent or null (transformers writes null for "not set").
bool HfFieldUnset(const nlohmann::json& config, const std::string& key);
// DataLoss: `where`: field "key" is <its value>; `why`.
Status HfFieldRefused(const std::string& where, const nlohmann::json& config, const std::string& key,
                      const std::string& why);

// The family config.json names (by "architectures", else "model_type"), or null.
const HfMoeFamily* HfMoeFamilyOf(const nlohmann::json& config);

// The routing both families share, into m->moe: the number of experts (family.experts_key, or
// its alias when only that is there; at most 1024), num_experts_per_tok (at most that), router_aux_loss_coef in [0, 1] (absent:
// `default_aux_loss_coef`, the family's config default); softmax-topk, no shared experts, no
// capacity limit. Errors name `where` and the field.
Status ReadHfMoeRouting(const nlohmann::json& config, const HfMoeFamily& family, const std::string& where,
                        double default_aux_loss_coef, ModelConfig* m);

// The routing fields of an export's config.json (the inverse of ReadHfMoeRouting).
void AddHfMoeRouting(const ModelConfig& cfg, const HfMoeFamily& family, nlohmann::json* config);

// Why `cfg`'s experts cannot be written as `family` ("" when they can): both route by
// softmax-topk and have no shared experts.
std::string HfMoeRoutingRefusal(const ModelConfig& cfg, const HfMoeFamily& family);

// fp8d's name of a tensor → the family's, and back. Names outside the MoE blocks are unchanged.
// A file name that is fp8d's but not the family's (Qwen3-MoE's mlp.experts in a Mixtral file)
// comes back as a name no parameter has, so the load refuses it as unexpected.
std::string HfMoeFileName(const HfMoeFamily& family, const std::string& fp8d_name);
std::string HfMoeFp8dName(const HfMoeFamily& family, const std::string& file_name);

// The router and expert tensors (the family's names) that `config` promises, layer by layer:
// empty when config.json is neither family. Reads only the layout (num_hidden_layers, the
// number of experts, Qwen3-MoE's mlp_only_layers and decoder_sparse_step, in transformers'
// meaning), so a checkpoint fp8d could not train still lists. Errors name `where` and the field.
StatusOr<std::vector<std::string>> HfMoeTensorNames(const nlohmann::json& config, const std::string& where);

}  // namespace fp8::train
