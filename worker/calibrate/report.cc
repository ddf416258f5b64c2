// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/report.h"

#include <cmath>
#include <cstdio>

namespace fp8::calibrate {

namespace {
std::string Shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}
}  // namespace

std::string FormatReportTable(const std::vector<TensorReport>& tensors, const nlohmann::json& summary) {
  std::string out;
  char line[512];
  size_t width = 6;
  for (const auto& t : tensors)
    if (t.quantized) width = std::max(width, t.name.size());
  std::snprintf(line, sizeof line, "%-*s %-14s %-5s %11s %23s %8s %8s %10s %8s\n", static_cast<int>(width),
                "tensor", "shape", "dtype", "amax", "scale_inv min..max", "sat%", "flush%", "rel_err", "SNR dB");
  out += line;
  out += std::string(width + 99, '-') + "\n";
  size_t copied = 0;
  for (const auto& t : tensors) {
    if (!t.quantized) {
      ++copied;
      continue;
    }
    char snr[32];
    if (std::isfinite(t.snr_db)) {
      std::snprintf(snr, sizeof snr, "%8.2f", t.snr_db);
    } else {
      std::snprintf(snr, sizeof snr, "%8s", "exact");
    }
    char range[64];
    std::snprintf(range, sizeof range, "%.3e..%.3e", t.scale_inv_min, t.scale_inv_max);
    std::snprintf(line, sizeof line, "%-*s %-14s %-5s %11.4e %23s %8.4f %8.4f %10.3e %s\n", static_cast<int>(width),
                  t.name.c_str(), Shape(t.shape).c_str(), t.dtype.c_str(), t.amax, range, 100 * t.frac_saturated,
                  100 * t.frac_flushed, t.rel_error, snr);
    out += line;
  }
  out += "\n" + std::to_string(tensors.size() - copied) + " tensors quantized, " + std::to_string(copied) +
         " copied unchanged\n";
  out += "summary: " + summary.dump() + "\n";
  return out;
}

std::string FormatActivationTable(const ActivationCalibration& cal) {
  std::string out = "\nstatic activation scales: method " + cal.method;
  if (cal.method == "percentile") {
    char p[32];
    std::snprintf(p, sizeof p, " %g", cal.percentile);
    out += p;
  }
  out += ", " + std::to_string(cal.num_samples) + " sequences (" + std::to_string(cal.tokens) + " tokens)\n";
  char line[256];
  size_t width = 5;
  for (const auto& l : cal.layers) width = std::max(width, l.layer.size());
  std::snprintf(line, sizeof line, "%-*s %12s %11s %11s %11s %9s\n", static_cast<int>(width), "layer", "values", "amax",
                "clip", "input_scale", "sat%");
  out += line;
  out += std::string(width + 60, '-') + "\n";
  for (const auto& l : cal.layers) {
    std::snprintf(line, sizeof line, "%-*s %12llu %11.4e %11.4e %11.4e %9.4f\n", static_cast<int>(width),
                  l.layer.c_str(), static_cast<unsigned long long>(l.values), l.amax, l.clip,
                  static_cast<double>(l.scale), 100 * l.frac_saturated);
    out += line;
  }
  return out;
}

std::string FormatEvalTable(const EvalLossReport& e) {
  char line[256];
  std::string out = "\neval loss over " + std::to_string(e.num_samples) + " sequences (" + std::to_string(e.tokens) +
                    " tokens):\n";
  std::snprintf(line, sizeof line, "  %-36s %10.6f\n", "bf16 (original weights)", e.loss_bf16);
  out += line;
  std::snprintf(line, sizeof line, "  %-36s %10.6f  %+8.4f%%\n", "fp8 weights, bf16 activations", e.loss_fp8_weights,
                100 * e.rel_diff_fp8_weights);
  out += line;
  if (e.has_static) {
    std::snprintf(line, sizeof line, "  %-36s %10.6f  %+8.4f%%  (%.4f%% of activations saturated)\n",
                  "fp8 weights, static fp8 activations", e.loss_fp8_static, 100 * e.rel_diff_fp8_static,
                  100 * e.static_frac_saturated);
    out += line;
  }
  return out;
}

}  // namespace fp8::calibrate
