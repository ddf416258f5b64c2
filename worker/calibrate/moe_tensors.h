// SPDX-License-Identifier: Apache-2.0
// A mixture-of-experts checkpoint must be whole before it is converted: the calibration reads
// one tensor at a time and never builds the model, so without this check a checkpoint missing
// an expert would convert into an output no loader accepts.
#pragma once

#include "common/status.h"
#include "worker/calibrate/model_input.h"

namespace fp8::calibrate {

// When the input's config.json is Qwen3MoeForCausalLM or MixtralForCausalLM: every router and
// expert projection it promises (worker/train/hf_moe_common.h, HfMoeTensorNames) is in the
// input, or InvalidArgument naming the first missing tensor. Other inputs pass unchecked.
Status CheckMoeTensors(const ModelInput& in);

}  // namespace fp8::calibrate
