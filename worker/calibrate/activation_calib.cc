// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/activation_calib.h"

#include <map>

#include "worker/calibrate/activation_histogram.h"
#include "worker/calibrate/eval_model.h"

namespace fp8::calibrate {

using json = nlohmann::json;

json ActivationLayerStats::ToJson() const {
  return {{"layer", layer},   {"tensor", layer + kInputScaleSuffix}, {"values", values},
          {"amax", amax},     {"clip", clip},
          {"input_scale", scale}, {"frac_saturated", frac_saturated}};
}

const ActivationLayerStats* ActivationCalibration::Find(const std::string& layer) const {
  for (const auto& l : layers)
    if (l.layer == layer) return &l;
  return nullptr;
}

json ActivationCalibration::ToJson() const {
  json j = {{"method", method}, {"num_samples", num_samples}, {"tokens", tokens}, {"layers", json::array()}};
  if (method == "percentile") j["percentile"] = percentile;
  for (const auto& l : layers) j["layers"].push_back(l.ToJson());
  return j;
}

StatusOr<ActivationCalibration> CalibrateActivations(train::GptModel& model, const data::TokenDataset& data,
                                                     const ActivationOptions& opts) {
  ActivationCalibration cal;
  cal.method = opts.method;
  cal.percentile = opts.percentile;
  cal.num_samples = opts.num_samples;  // >= 1: its default and check are jobspec's
  cal.tokens = static_cast<int64_t>(cal.num_samples) * model.config().seq_len;

  std::map<std::string, AbsHistogram> hist;
  for (const std::string& name : model.LinearLayerNames()) hist.emplace(name, AbsHistogram());
  model.SetLinearInputHook([&](const std::string& layer, const float* x, int64_t m, int64_t k, float*) {
    hist.at(layer).Add(x, m * k);
    return false;  // observe only: the model computes as the trainer does
  });
  MeanLoss(model, data, kCalibrationSeed, cal.num_samples);
  model.SetLinearInputHook(nullptr);

  for (const std::string& name : model.LinearLayerNames()) {
    const AbsHistogram& h = hist.at(name);
    if (h.non_finite())
      return DataLossError("activations: the input of layer " + name + " holds " + std::to_string(h.non_finite()) +
                           " NaN/Inf values on the calibration data; the model is broken");
    ActivationLayerStats s;
    s.layer = name;
    s.values = h.count();
    s.amax = h.amax();
    if (opts.method == "percentile") {
      s.clip = h.PercentileClip(opts.percentile);
    } else if (opts.method == "mse") {
      s.clip = h.MseClip();
    } else {
      s.clip = h.MaxClip();
    }
    s.scale = StaticScaleForClip(s.clip);
    s.frac_saturated = s.values ? static_cast<double>(h.CountAbove(s.clip)) / static_cast<double>(s.values) : 0.0;
    cal.layers.push_back(s);
  }
  return cal;
}

void UseStaticInputScales(train::GptModel& model, const ActivationCalibration& cal,
                          const std::set<std::string>& layers, StaticCastCounts* counts) {
  std::map<std::string, float> scales;
  for (const auto& l : cal.layers)
    if (layers.count(l.layer)) scales[l.layer] = l.scale;
  model.SetLinearInputHook([scales, counts](const std::string& layer, const float* x, int64_t m, int64_t k,
                                            float* operand) {
    auto it = scales.find(layer);
    if (it == scales.end()) return false;
    const int64_t saturated = FakeQuantizeStatic(x, m * k, it->second, operand);
    if (counts) {
      counts->values += m * k;
      counts->saturated += saturated;
    }
    return true;
  });
}

}  // namespace fp8::calibrate
