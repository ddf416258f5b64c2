// SPDX-License-Identifier: Apache-2.0
#include "bench/trainer_cuda/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

namespace fp8::train::cuda {
namespace {

// The kind of an operation, from its label: GEMMs, standalone FP8 casts, casts fused into a
// producer, host gaps, everything else.
std::string KindOf(const std::string& label) {
  if (label.find("GEMM") != std::string::npos) return "GEMMs";
  if (label.find("(fused)") != std::string::npos) return "fused producer + cast";
  if (label.find("cast") != std::string::npos && label.find("adamw") == std::string::npos) return "FP8 casts";
  if (label.find("host gap") != std::string::npos || label == "(tail)") return "host gaps";
  if (label.find("attention") != std::string::npos) return "attention";
  if (label.find("adamw") != std::string::npos || label == "grad norm") return "optimizer";
  return "other";
}

}  // namespace

void PrintStepProfile(const std::vector<OpTimer::Total>& totals, int dropped) {
  double all = 0;
  for (const OpTimer::Total& t : totals) all += t.ms;
  std::vector<OpTimer::Total> sorted = totals;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  std::printf("  %-42s %7s %10s %7s\n", "operation", "count", "ms", "share");
  for (const OpTimer::Total& t : sorted)
    std::printf("  %-42s %7d %10.3f %6.1f%%\n", t.label.c_str(), t.count, t.ms, 100 * t.ms / all);
  std::map<std::string, double> kinds;
  for (const OpTimer::Total& t : totals) kinds[KindOf(t.label)] += t.ms;
  std::printf("  by kind:");
  for (const auto& [kind, ms] : kinds) std::printf("  %s %.2f ms (%.1f%%);", kind.c_str(), ms, 100 * ms / all);
  std::printf("\n  sum of marks %.2f ms%s\n", all, dropped ? " (marks dropped: the table is incomplete)" : "");
}

}  // namespace fp8::train::cuda
