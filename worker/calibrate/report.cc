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

}  // namespace fp8::calibrate
