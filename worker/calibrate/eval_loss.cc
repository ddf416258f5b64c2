// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/eval_loss.h"

#include <set>
#include <vector>

#include "worker/calibrate/eval_model.h"

namespace fp8::calibrate {

using json = nlohmann::json;

json EvalLossReport::ToJson() const {
  json j = {{"num_samples", num_samples},
            {"tokens", tokens},
            {"fp8_weights", fp8_weights},
            {"loss_bf16", loss_bf16},
            {"loss_fp8_weights", loss_fp8_weights},
            {"rel_diff_fp8_weights", rel_diff_fp8_weights}};
  if (has_static) {
    j["loss_fp8_static"] = loss_fp8_static;
    j["rel_diff_fp8_static"] = rel_diff_fp8_static;
    j["static_frac_saturated"] = static_frac_saturated;
  }
  return j;
}

StatusOr<EvalLossReport> EvaluateLossBeforeAfter(train::GptModel& model, const data::TokenDataset& data,
                                                 int num_samples, const std::string& output_dir,
                                                 const json& weight_map, const ActivationCalibration* cal) {
  EvalLossReport r;
  r.num_samples = num_samples;
  r.tokens = static_cast<int64_t>(num_samples) * model.config().seq_len;
  auto rel = [&](double loss) { return r.loss_bf16 != 0 ? (loss - r.loss_bf16) / r.loss_bf16 : 0.0; };

  model.SetLinearInputHook(nullptr);
  r.loss_bf16 = MeanLoss(model, data, kEvalSeed, num_samples);

  const std::vector<float> original = model.params();
  auto restore = [&] {
    model.params() = original;
    model.SetLinearInputHook(nullptr);
  };
  auto fp8 = LoadDequantizedWeights(output_dir, weight_map, &model);
  if (!fp8.ok()) {
    restore();
    return fp8.status();
  }
  r.fp8_weights = *fp8;
  r.loss_fp8_weights = MeanLoss(model, data, kEvalSeed, num_samples);
  r.rel_diff_fp8_weights = rel(r.loss_fp8_weights);

  if (cal) {
    std::set<std::string> layers;
    for (const auto& l : cal->layers)
      if (weight_map.contains(l.layer + kInputScaleSuffix) || weight_map.contains("transformer." + l.layer + kInputScaleSuffix))
        layers.insert(l.layer);
    StaticCastCounts counts;
    UseStaticInputScales(model, *cal, layers, &counts);
    r.has_static = true;
    r.loss_fp8_static = MeanLoss(model, data, kEvalSeed, num_samples);
    r.rel_diff_fp8_static = rel(r.loss_fp8_static);
    r.static_frac_saturated = counts.values ? static_cast<double>(counts.saturated) / counts.values : 0.0;
  }
  restore();
  return r;
}

}  // namespace fp8::calibrate
