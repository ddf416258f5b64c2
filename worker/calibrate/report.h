// report.txt: the per-tensor round-trip numbers of report.json as a table people can read.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/calibrate/tensor_convert.h"

namespace fp8::calibrate {

std::string FormatReportTable(const std::vector<TensorReport>& tensors, const nlohmann::json& summary);

}  // namespace fp8::calibrate
