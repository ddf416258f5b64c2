// SPDX-License-Identifier: Apache-2.0
// The plan of a calibration run: what happens to each input tensor (copied, quantized with its
// scale, dequantized, dropped), decided and checked before anything is written.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/calibrate/activation_calib.h"
#include "worker/calibrate/model_input.h"
#include "worker/calibrate/spec.h"
#include "worker/safetensors/safetensors.h"

namespace fp8::calibrate {

// A weight's scale is `<name>` + the layout's suffix: `<layer>.weight_scale_inv` in DeepSeek-V3's
// layout, `<layer>.weight_scale` in compressed-tensors' (both float(q)·scale dequantizes).
inline constexpr const char* kScaleInvSuffix = "_scale_inv";
inline constexpr const char* kCompressedScaleSuffix = "_scale";
const char* ScaleSuffix(OutputFormat f);
inline constexpr std::string_view kHfPrefix = "transformer.";  // transformers' GPT2LMHeadModel

// What happens to one input tensor.
struct Action {
  enum Kind { kCopy, kQuantize, kDequantize, kDrop } kind = kCopy;
  const safetensors::TensorInfo* tensor = nullptr;
  std::string scale_name;         // kQuantize: the scale written; kDequantize: the scale read
  const safetensors::TensorInfo* scale = nullptr;  // kDequantize
  size_t scale_shard = 0;             // kDequantize: shard holding the scale
  std::string input_scale_name;       // kQuantize with static activation scales
  float input_scale = 0;
};

struct Plan {
  std::vector<std::vector<Action>> shards;  // per input shard, in its data order
  std::vector<std::string> not_converted;   // modules of 2-D *.weight left in high precision
  // Selected tensors whose shape is not a whole number of 128x128 blocks (block granularity).
  std::vector<nlohmann::json> unaligned;
  // What an engine refuses in the layout as a whole ({"engines", "message"}), e.g. block
  // weights with static activation scales.
  std::vector<nlohmann::json> layout_warnings;
  int64_t total_tensors = 0;
};

// Quantize: the selected 2-D weights (CalibrateOptions::weights), each with a new scale.
// InvalidArgument for a tensor that cannot be quantized, a pattern that matches nothing, or a
// model that already holds the scales.
StatusOr<Plan> PlanQuantize(const ModelInput& in, const CalibrateOptions& opts);

// Dequantize: every FP8 tensor to BF16 with its `_scale_inv` (DeepSeek) or `_scale`
// (compressed-tensors); the scales, and the input scales of those layers, are dropped.
StatusOr<Plan> PlanDequantize(const ModelInput& in, const std::string& input);

// Every quantized linear weight whose layer was calibrated gets `<layer>.input_scale`.
Status AddInputScales(const ModelInput& in, const ActivationCalibration& cal, Plan* plan);

}  // namespace fp8::calibrate
