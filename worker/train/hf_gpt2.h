// SPDX-License-Identifier: Apache-2.0
// GPT-2 in and out of Hugging Face (the family's part of hf_model.h).
//
// fp8d's GPT is GPT-2 exactly (learned positions, LayerNorm eps 1e-5, tanh GELU, head tied to
// wte), so both directions are a layout question. fp8d names a tensor as GPT2Model does
// ("h.0.attn.c_attn.weight") and stores linear weights as nn.Linear, [out, in]; transformers'
// GPT2LMHeadModel prefixes "transformer." and keeps Conv1D's [in, out]. An export writes
// transformers' names and orientation; an import accepts both prefixed and bare names.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/hf_model.h"
#include "worker/train/spec.h"

namespace fp8::train {

// config.json says GPT-2 (architectures GPT2LMHeadModel/GPT2Model, or model_type gpt2).
bool IsGpt2HfConfig(const nlohmann::json& config);
// The shape from a GPT-2 config.json; a field fp8d's GPT cannot honour is refused, naming it and
// `where` (the file).
StatusOr<ModelConfig> Gpt2ConfigFromHf(const nlohmann::json& config, const std::string& where);

// The transformers name and [in, out] orientation of an fp8d tensor.
std::string HfTensorName(const std::string& fp8d_name);
bool IsConv1DWeight(const std::string& fp8d_name);

HfLayout Gpt2HfLayout(const ModelConfig& cfg);

}  // namespace fp8::train
