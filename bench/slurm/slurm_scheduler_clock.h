// SPDX-License-Identifier: Apache-2.0
// When Slurm 22.05's slurmctld will next look at a batch job, read from its own log, so a bench
// can submit every job at the same moment of Slurm's scheduling cycle.
//
// sbatch does not start a job: the submit RPC only counts a request (proc_req.c,
// `queue_job_scheduler`). slurmctld's background thread wakes every ~1 s (controller.c,
// `_slurmctld_background`: 10 × usleep(100 ms) plus its own work) and runs the scheduler when a
// request is counted and at least `batch_sched_delay` (default 3 s, whole seconds of time())
// have passed since the last scheduler run it started. The end of every job also counts a
// request, so the job after it waits up to 3 s longer or not at all depending on when it comes.
// A bench that submits at arbitrary moments measures that phase, not the submitter.
//
// From `scontrol setdebug debug` on, every scheduler run logs "sched: Running job scheduler",
// and every start logs "sched: Allocate JobId=<id>", with millisecond timestamps. The wake-ups
// are evenly spaced, so one allocation and the spacing of two give every later wake-up.
#pragma once

#include <chrono>
#include <map>
#include <ios>
#include <optional>
#include <string>

namespace fp8d::bench {

using WallTime = std::chrono::system_clock::time_point;

class SlurmSchedulerClock {
 public:
  explicit SlurmSchedulerClock(std::string slurmctld_log) : log_(std::move(slurmctld_log)) {}

  // The time slurmctld logged "sched: Allocate JobId=<id>", if it has.
  std::optional<WallTime> AllocationOf(const std::string& slurm_job_id);
  // The time of the latest "sched: Running job scheduler" line.
  std::optional<WallTime> LastSchedulerRun();

  // Adds an observed wake-up (an allocation's time): the latest one anchors the cycle, and the
  // one before it, a whole number of wake-ups earlier, sets its period.
  void Observe(WallTime wake_up);
  bool ready() const { return anchor_.has_value(); }
  // The first wake-up at or after `t`. Needs ready().
  WallTime NextWakeUpAfter(WallTime t) const;
  // The first wake-up at which a counted request is run: after `not_before`, and at least
  // `batch_sched_delay` after the last scheduler run (with margin for time()'s whole seconds).
  WallTime NextSchedulingWakeUp(WallTime not_before);
  double period_seconds() const { return period_; }

 private:
  // Reads the lines logged since the last call (the log only grows).
  void ReadNewLines();

  std::string log_;
  std::streamoff read_ = 0;  // bytes of the log already read, up to the last whole line
  std::map<std::string, WallTime> allocations_;  // by Slurm job id
  std::optional<WallTime> last_run_;
  std::optional<WallTime> anchor_;
  double period_ = 1.0015;  // seconds; measured as soon as two wake-ups are seen
};

// "[2026-12-01T19:33:25.942] ..." → that time (slurmctld logs local time). Nullopt if the line
// does not start with such a stamp.
std::optional<WallTime> ParseSlurmLogTime(const std::string& line);

}  // namespace fp8d::bench
