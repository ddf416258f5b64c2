// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/job_counters.h"

#include <algorithm>

#include "daemon/core/job_lifecycle.h"

namespace fp8d::core {
namespace {

double Seconds(const google::protobuf::Timestamp& t) { return t.seconds() + t.nanos() * 1e-9; }

bool SameTime(const google::protobuf::Timestamp& a, const google::protobuf::Timestamp& b) {
  return a.seconds() == b.seconds() && a.nanos() == b.nanos();
}

bool HoldsSlots(fp8d::v1::JobState s) { return s == fp8d::v1::STARTING || s == fp8d::v1::RUNNING; }

}  // namespace

void JobCounters::Count(const fp8d::v1::Job& job, const fp8d::v1::JobEvent& event) {
  const fp8d::v1::JobState to = event.to_state();
  KindCounters& k = by_kind_[job.kind()];
  if (to == fp8d::v1::STARTING) {
    ++k.attempts_started;
    if (job.has_start_time() && job.has_create_time() && SameTime(job.start_time(), event.time())) {
      k.queue_wait.Observe(std::max(0.0, Seconds(job.start_time()) - Seconds(job.create_time())));
    }
  }
  const bool failed = to == fp8d::v1::RETRY_WAIT || to == fp8d::v1::FAILED ||
                      (to == fp8d::v1::QUEUED && HoldsSlots(event.from_state()));
  if (failed) ++k.failures[job.error().failure_class()];
  if (IsTerminal(to) && job.has_start_time() && job.has_end_time()) {
    k.run_time.Observe(std::max(0.0, Seconds(job.end_time()) - Seconds(job.start_time())));
  }
}

}  // namespace fp8d::core
