// SPDX-License-Identifier: Apache-2.0
// report.txt: the per-tensor round-trip numbers of report.json as a table people can read, and
// for fp8d's GPT models the static activation scales and the eval loss before / after.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/calibrate/activation_calib.h"
#include "worker/calibrate/eval_loss.h"
#include "worker/calibrate/tensor_convert.h"

namespace fp8::calibrate {

std::string FormatReportTable(const std::vector<TensorReport>& tensors, const nlohmann::json& summary);
// Static activation scales: per layer amax, clip, input_scale, saturated fraction.
std::string FormatActivationTable(const ActivationCalibration& cal);
// Eval loss before / after quantization.
std::string FormatEvalTable(const EvalLossReport& eval);

}  // namespace fp8::calibrate
