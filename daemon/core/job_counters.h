// SPDX-License-Identifier: Apache-2.0
// JobCounters: the job figures /metrics exports as counters and histograms. They are counted
// from committed transitions as they happen, not recomputed from the jobs fp8d keeps, so they
// never go down when a job is deleted (DeleteJob, job_ttl_after_finished) and Prometheus'
// rate() stays right. They start at zero with each fp8d process (a counter reset Prometheus
// handles). Plain data and one pure function of a transition, so the rules have a table test.
//
// THREADING: the manager's io thread; a copy goes to the scrape.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <vector>

#include "fp8d/v1/job.pb.h"
#include "fp8d/v1/job_service.pb.h"

namespace fp8d::core {

// A Prometheus-style histogram kept as plain numbers: counts[i] are the observations in
// (bounds[i-1], bounds[i]], the last one those above every bound (+Inf).
// Inline: the metrics unit (daemon/api) reads these without linking the manager.
struct CountHistogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1
  double sum = 0;

  explicit CountHistogram(std::vector<double> upper_bounds)
      : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}
  // Into the first bucket whose bound is >= value (Prometheus' le).
  void Observe(double value) {
    ++counts[static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin())];
    sum += value;
  }
  uint64_t count() const { return std::accumulate(counts.begin(), counts.end(), uint64_t{0}); }
};

// 1 s to a day: queue waits and run times of jobs.
inline const std::vector<double>& JobSecondsBuckets() {
  static const std::vector<double> b = {1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600};
  return b;
}

struct KindCounters {
  uint64_t attempts_started = 0;                     // transitions into STARTING
  std::map<fp8d::v1::FailureClass, uint64_t> failures;  // attempts (or placements) that failed
  CountHistogram queue_wait{JobSecondsBuckets()};    // create → first start
  CountHistogram run_time{JobSecondsBuckets()};      // first start → terminal
};

class JobCounters {
 public:
  // Counts one committed transition: `job` as the transition left it, `event` its from/to.
  //   → STARTING                   one attempt started; the first start (start_time is this
  //                                event's time) also observes create → start in queue_wait
  //   → RETRY_WAIT or → FAILED     one failure of job.error().failure_class() (QUEUED → FAILED
  //                                too: unschedulable, DEPENDENCY_FAILED)
  //   STARTING/RUNNING → QUEUED    one failure too (an attempt taken back: PREEMPTED)
  //   → a terminal state           first start → end in run_time, for a job that started
  void Count(const fp8d::v1::Job& job, const fp8d::v1::JobEvent& event);

  // By JobKind; a kind appears once one of its jobs made a transition (the scrape shows the
  // others as zeros).
  const std::map<fp8d::v1::JobKind, KindCounters>& by_kind() const { return by_kind_; }

 private:
  std::map<fp8d::v1::JobKind, KindCounters> by_kind_;
};

// What the node offers and what attempts hold, for the capacity gauges.
struct SlotCounts {
  int64_t gpu_total = 0, gpu_used = 0;
  int64_t cpu_total = 0, cpu_used = 0;
};

// Everything the manager adds to /metrics beyond the jobs themselves.
struct ManagerFigures {
  JobCounters counters;
  // nullopt: the launcher places ranks itself (Slurm), so fp8d holds no slots of its own.
  std::optional<SlotCounts> slots;
  fp8d::v1::ListQueuesResponse queues;  // the scheduler's queues (ListQueues)
};

}  // namespace fp8d::core
