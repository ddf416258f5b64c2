// SPDX-License-Identifier: Apache-2.0
// MixtralForCausalLM in and out of Hugging Face: a Llama-family member (hf_llama.h reads and
// writes its attention part, as Mistral's: no q/k norms, no biases, sliding_window null) whose
// every layer is a softmax-topk router over num_local_experts SwiGLU experts, the top
// num_experts_per_tok weights always renormalised (fp8d's norm_topk_prob true). transformers
// stores them one tensor per expert, as
//   model.layers.<l>.block_sparse_moe.gate.weight                     (the router)
//   model.layers.<l>.block_sparse_moe.experts.<e>.{w1,w3,w2}.weight    (gate, up, down)
// which fp8d keeps as mlp.gate.weight and mlp.experts.<e>.{gate,up,down}_proj.weight
// (hf_moe_common.h maps them).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/hf_model.h"
#include "worker/train/hf_moe_common.h"
#include "worker/train/spec.h"

namespace fp8::train {

inline constexpr const char* kMixtralArchitecture = kMixtralFamily.architecture;

// The experts of a Mixtral config.json, into m->moe: num_local_experts, num_experts_per_tok,
// router_aux_loss_coef (default 0.001, MixtralConfig's) and intermediate_size (each expert's
// width). Refused naming the field: router_jitter_noise other than 0 (fp8d's router adds no
// noise). Errors name `where`.
Status ReadMixtralConfig(const nlohmann::json& config, const std::string& where, ModelConfig* m);

// Why `cfg` cannot be written as MixtralForCausalLM ("" when it can): every layer sparse,
// softmax-topk renormalised, no shared experts, attention without q/k norms or biases.
std::string MixtralExportRefusal(const ModelConfig& cfg);

// A Llama-family layout made Mixtral's: the experts' config fields, the family's tensor names
// both ways, and the refusal.
void AddMixtralLayout(const ModelConfig& cfg, HfLayout* layout);

}  // namespace fp8::train
