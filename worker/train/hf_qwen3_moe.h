// SPDX-License-Identifier: Apache-2.0
// Qwen3MoeForCausalLM, the Llama family's mixture of experts in and out of Hugging Face (the
// rest of the family is hf_llama.h, which reads the attention part of its config.json): Qwen3's
// attention (q/k norms) and, in every layer not in mlp_only_layers, a softmax-topk router
// (mlp.gate.weight) over num_experts SwiGLU experts (mlp.experts.<e>.{gate,up,down}_proj.weight,
// one tensor per expert as transformers writes them). fp8d's names are these, so the weights map
// one to one; a missing expert is a missing tensor named by hf_model.cc. What it shares with
// Mixtral (the routing fields, the export refusal of other routers) is hf_moe_common.h.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/hf_moe_common.h"
#include "worker/train/spec.h"

namespace fp8::train {

inline constexpr const char* kQwen3MoeArchitecture = kQwen3MoeFamily.architecture;

// model.moe from config.json: num_experts, num_experts_per_tok, moe_intermediate_size,
// norm_topk_prob, router_aux_loss_coef; decoder_sparse_step must be 1 and mlp_only_layers the
// first layers (fp8d's first_dense_layers), or the field is refused by name. Errors name
// `where` (the file and architecture).
Status ReadQwen3MoeConfig(const nlohmann::json& config, const std::string& where, ModelConfig* m);

// Why `cfg` cannot be written as Qwen3MoeForCausalLM ("" when it can): it routes by softmax-topk
// with q/k norms, no attention biases and no shared experts.
std::string Qwen3MoeExportRefusal(const ModelConfig& cfg);

// The MoE fields of an export's config.json, added to `config`.
void AddQwen3MoeConfig(const ModelConfig& cfg, nlohmann::json* config);

}  // namespace fp8::train
