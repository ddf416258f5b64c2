// SPDX-License-Identifier: Apache-2.0
// Static activation calibration (issue 5) for fp8d's GPT models: forward passes over a fixed
// sample of the calibration shards, the input of every FP8 linear layer (qkv, attention
// projection, fc, fc projection of each block) gathered into an |x| histogram, and one
// per-tensor input scale per layer chosen by `max`, `percentile` or `mse` (activation_histogram.h
// says how each is computed). The scales are written as `<layer>.input_scale` (F32 scalar),
// the vLLM / Hugging Face layout for activation_scheme: static.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/calibrate/spec.h"
#include "worker/data/shards.h"
#include "worker/train/model.h"

namespace fp8::calibrate {

struct ActivationLayerStats {
  std::string layer;          // "h.0.attn.c_attn": the tensor is `<layer>.input_scale`
  uint64_t values = 0;        // activations seen
  double amax = 0;
  double clip = 0;            // the |x| mapped to 448
  float scale = 0;            // input_scale = clip / 448 (x ≈ fp8(x / scale) · scale)
  double frac_saturated = 0;  // calibration values above the clip (the cast clamps them)

  nlohmann::json ToJson() const;
};

struct ActivationCalibration {
  std::string method;
  double percentile = 0;  // method percentile only
  int num_samples = 0;
  int64_t tokens = 0;
  std::vector<ActivationLayerStats> layers;  // forward order

  const ActivationLayerStats* Find(const std::string& layer) const;
  nlohmann::json ToJson() const;
};

inline constexpr const char* kInputScaleSuffix = ".input_scale";

// Runs `model` over sequences 0 .. num_samples-1 of stream kCalibrationSeed and picks each
// linear layer's scale. DataLoss naming the layer when its activations are not finite.
StatusOr<ActivationCalibration> CalibrateActivations(train::GptModel& model, const data::TokenDataset& data,
                                                     const ActivationOptions& opts);

struct StaticCastCounts {
  int64_t values = 0, saturated = 0;
};

// From now on, the inputs of `layers` go through FP8 with their static scale (saturating),
// as a serving engine with activation_scheme static computes; other layers keep the model's
// recipe. `counts` (optional; must outlive the hook) adds up the cast and clamped elements.
void UseStaticInputScales(train::GptModel& model, const ActivationCalibration& cal,
                          const std::set<std::string>& layers, StaticCastCounts* counts = nullptr);

}  // namespace fp8::calibrate
