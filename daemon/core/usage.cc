// SPDX-License-Identifier: Apache-2.0
// SumUsage (usage.h).
#include "daemon/core/usage.h"

#include <algorithm>
#include <map>

namespace fp8d::core {

fp8::StatusOr<std::vector<fp8d::v1::UsageRow>> SumUsage(const std::vector<store::AttemptUsage>& attempts,
                                                         int64_t since_ms, int64_t now_ms, const std::string& by) {
  const bool by_queue = by == "queue";
  if (!by_queue && by != "owner" && !by.empty()) {
    return fp8::InvalidArgumentError("by: must be owner or queue, got '" + by + "'");
  }
  std::map<std::string, fp8d::v1::UsageRow> rows;
  for (const store::AttemptUsage& a : attempts) {
    const int64_t start = std::max(a.start_ms, since_ms);
    const int64_t end = a.end_ms != 0 ? std::min(a.end_ms, now_ms) : now_ms;
    if (a.start_ms <= 0 || end <= start) continue;
    std::string key = by_queue ? (a.queue.empty() ? "default" : a.queue) : a.owner;
    fp8d::v1::UsageRow& row = rows[key];
    row.set_key(std::move(key));
    const double seconds = static_cast<double>(end - start) / 1000.0;
    row.set_gpu_seconds(row.gpu_seconds() + seconds * a.gpu_ranks);
    row.set_cpu_slot_seconds(row.cpu_slot_seconds() + seconds * a.cpu_ranks);
    row.set_attempts(row.attempts() + 1);
  }
  std::vector<fp8d::v1::UsageRow> out;
  out.reserve(rows.size());
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  return out;
}

}  // namespace fp8d::core
