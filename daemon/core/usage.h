// SPDX-License-Identifier: Apache-2.0
// Accounting (GetUsage): GPU-seconds and CPU-slot-seconds of stored attempts, per owner or
// per queue. Pure: the store lists the attempts (JobStore::ListAttemptUsage), this sums them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/store/job_store.h"
#include "fp8d/v1/job_service.pb.h"

namespace fp8d::core {

// Each attempt counts its time inside [since_ms, now_ms] (since_ms 0: from its start; an
// attempt not ended yet: up to now_ms) times its GPU ranks and its CPU ranks. Rows by `by`:
// "owner" (also for "") or "queue" (an empty Job.queue is `default`), sorted by key; an
// attempt with no time in the window is not counted. INVALID_ARGUMENT naming `by` otherwise.
fp8::StatusOr<std::vector<fp8d::v1::UsageRow>> SumUsage(const std::vector<store::AttemptUsage>& attempts,
                                                         int64_t since_ms, int64_t now_ms, const std::string& by);

}  // namespace fp8d::core
