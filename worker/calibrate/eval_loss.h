// SPDX-License-Identifier: Apache-2.0
// The eval loss before and after quantization, for fp8d's own GPT models (issue 5), over one
// fixed sample (stream kEvalSeed of the activations.data shards):
//   bf16        the original weights; every GEMM operand rounded to BF16 (the trainer's
//               compute);
//   fp8_weights the FP8 weights read back from the output and dequantized, float(q)·scale_inv
//               rounded to BF16 as `direction: dequantize` writes them (the recipe rounds the
//               weight operand; the extra error is ~2^-9 relative, far below FP8's 2^-4);
//               activations as in bf16: the weights' share of the loss change;
//   fp8_static  (with static scales) fp8_weights plus every layer's input cast to E4M3 with
//               its static input_scale, saturating: what activation_scheme static computes.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/calibrate/activation_calib.h"
#include "worker/data/shards.h"
#include "worker/train/model.h"

namespace fp8::calibrate {

struct EvalLossReport {
  int num_samples = 0;
  int64_t tokens = 0;
  int fp8_weights = 0;  // linear weights read back in FP8
  double loss_bf16 = 0, loss_fp8_weights = 0, rel_diff_fp8_weights = 0;
  bool has_static = false;
  double loss_fp8_static = 0, rel_diff_fp8_static = 0;
  double static_frac_saturated = 0;  // of the activations cast with static scales

  nlohmann::json ToJson() const;
};

// `model` holds the original weights and is left holding them. `weight_map` is the output's
// index (tensor → shard in `output_dir`); `cal` (may be null) the static scales, applied to the
// layers that have `<layer>.input_scale` in the output.
StatusOr<EvalLossReport> EvaluateLossBeforeAfter(train::GptModel& model, const data::TokenDataset& data,
                                                 int num_samples, const std::string& output_dir,
                                                 const nlohmann::json& weight_map,
                                                 const ActivationCalibration* cal);

}  // namespace fp8::calibrate
