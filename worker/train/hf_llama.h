// SPDX-License-Identifier: Apache-2.0
// The Llama family in and out of Hugging Face (the family's part of hf_model.h):
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and (its MoE fields in
// hf_qwen3_moe.h) Qwen3MoeForCausalLM. fp8d's LlamaModel
// already names its tensors as transformers does and stores nn.Linear's [out, in], so the
// weights map one to one; the work is config.json, which is read in both of transformers' rope
// styles (top-level rope_theta/rope_scaling, and 5.x's rope_parameters) and refused, naming the
// field, where it asks for something LlamaModel does not compute (sliding windows, rope kinds
// other than llama3, activations other than silu, biases on o_proj or the MLP, ...).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/hf_model.h"
#include "worker/train/spec.h"

namespace fp8::train {

// An imported Llama trains on sequences of at most this many tokens (its config's
// max_position_embeddings is often 32k-128k, which the model's seq_len sizes buffers by);
// the export writes the original max_position_embeddings back.
inline constexpr int kLlamaImportSeqLen = 2048;

// config.json names one of the five architectures (or, without "architectures", their
// model_type: llama, mistral, qwen2, qwen3, qwen3_moe).
bool IsLlamaHfConfig(const nlohmann::json& config);
// The model from such a config.json; errors name `where` (the file), the architecture and the
// field.
StatusOr<ModelConfig> LlamaConfigFromHf(const nlohmann::json& config, const std::string& where);

// The Hugging Face class an export of `cfg` is: the imported one, else Qwen3MoeForCausalLM with
// model.moe, Qwen3ForCausalLM with qk_norm, Qwen2ForCausalLM with attention_bias,
// LlamaForCausalLM otherwise.
std::string LlamaHfArchitecture(const ModelConfig& cfg);

HfLayout LlamaHfLayout(const ModelConfig& cfg);

}  // namespace fp8::train
