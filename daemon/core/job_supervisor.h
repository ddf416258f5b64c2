// SPDX-License-Identifier: Apache-2.0
// JobSupervisor: the supervisor's glue. Worker events and exits (from the launcher, posted to io
// by the manager) and a periodic tick that reads the injected Clock (so tests drive time by
// hand). Each input is judged by DecideAttempt (attempt_verdict.h, pure); this unit builds its
// view of the attempt and applies the verdict: transitions, store writes, signals, and the
// progress rows and event offsets due to be written.
//
// Cancel is decided here alone: which states cancel at once, which stop their workers first,
// and how a run being stopped ends (Cancel, StopRun, OnRunExited); the launcher and recovery
// call StopRun when a run must not go on. Preemption (job_preemption.cc) stops a run the same
// way for the scheduler, with its own grace; a cancel meanwhile wins.
//
// It reaches the rest of the manager only through what it is given: the job cache, the launcher
// (signals), the clock, the JobWriter (state changes and store writes) and its Owner (a
// scheduling round when slots free up, and the tick).
//
// THREADING: every method runs on the io thread; store writes go through the JobWriter, which
// brings the completion back to io.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/status.h"
#include "daemon/launcher/launcher.h"
#include "daemon/core/attempt_verdict.h"
#include "daemon/core/clock.h"
#include "daemon/core/job_cache.h"
#include "daemon/core/job_writer.h"
#include "daemon/store/job_store.h"

namespace fp8d::core {

class JobSupervisor {
 public:
  struct Options {
    int64_t tick_ms = 50;              // timer resolution
    int64_t cancel_grace_ms = 10000;   // SIGTERM → SIGKILL
    int64_t preemption_grace_ms = 30000;  // SIGTERM → SIGKILL of a preempted attempt
    int64_t progress_flush_ms = 200;   // progress rows persisted at most this often per job
    int64_t runtime_flush_ms = 1000;   // rank event offsets persisted at most this often
    // Source of the backoff jitter, uniform in [0, 1).
    std::function<double()> uniform01;
  };
  // What the supervisor asks of the manager beyond state changes.
  class Owner {
   public:
    virtual ~Owner() = default;
    virtual void ScheduleRound() = 0;      // slots were freed, or a backoff ended
    virtual void OnTick(int64_t now) = 0;  // once per tick, after the supervisor's own work
  };

  JobSupervisor(boost::asio::io_context& io, Options options, JobCache& cache,
                launcher::Launcher& launcher, const Clock* clock, JobWriter& writer, Owner& owner);

  // ---- inputs ----
  void HandleEvent(const launcher::WorkerEvent& ev);
  void HandleExit(const launcher::WorkerExit& ex);
  void ArmTick();
  // No more inputs or ticks (shutdown): events, exits and ticks are ignored from now on.
  void Stop();

  // ---- cancel ----
  // CancelJob for a cached job: QUEUED or RETRY_WAIT → CANCELLED at once; STARTING or RUNNING
  // → CANCELLING, then StopRun once that is durable; CANCELLING or CANCELLED: nothing more.
  // `done` gets the status once what the cancel wrote is durable (FAILED_PRECONDITION for a
  // finished job, naming its state).
  void Cancel(JobEntry& e, std::function<void(fp8::Status)> done);
  // The run must end (cancelled, or failed while its workers were starting): SIGTERM its live
  // workers, or end the run when none is left. Before launch it waits: the launcher calls
  // again once the workers exist.
  void StopRun(JobEntry& e);
  // The refusal of a cancel of a finished job, naming its state.
  static fp8::Status NotCancellable(const fp8d::v1::Job& job);

  // ---- preemption (job_preemption.cc) ----
  // Stops a STARTING or RUNNING attempt for the scheduler: marks the run preempting, makes the
  // PREEMPTED intent durable (the attempt record's failure_class, which recovery reads), then
  // SIGTERMs every rank, SIGKILL after preemption_grace_ms. The ranks' ends make it PREEMPTED:
  // QUEUED again with `reason` as pending_reason, not counted against max_attempts. A no-op in
  // any other state, while preempting already, or once the attempt's outcome is decided. A
  // recovered attempt whose record holds the intent already is signalled without a new write.
  void Preempt(JobEntry& e, const std::string& reason);

  // ---- used by the launcher and recovery as well ----
  // The attempt failed: decide RETRY_WAIT or FAILED, persist, then stop its workers.
  void FailAttempt(JobEntry& e, fp8d::v1::FailureClass failure, const std::string& message);
  // SIGTERM now, SIGKILL after cancel_grace_ms (preemption_grace_ms for a preempted run; the
  // tick sends it).
  void TerminateWorkers(JobEntry& e);
  // Every rank of the run exited: persist the attempt's end, free its slots, reschedule.
  void OnRunExited(JobEntry& e);
  // Persists the attempt record with the ranks' pids and event offsets; `saved` gets the
  // write's status. A failed write marks the runtime dirty, so the tick writes it again.
  void SaveAttempt(JobEntry& e, std::function<void(fp8::Status)> saved = nullptr);
  // The same for the attempts of several jobs in one store transaction (the tick's periodic
  // offsets: one commit, whatever the number of running jobs).
  void SaveAttempts(const std::vector<std::string>& names);
  // Writes the rows of jobs with unwritten progress (`all`: regardless of progress_flush_ms).
  void FlushDirtyRows(int64_t now, bool all);

 private:
  void Tick();
  // DecideAttempt (attempt_verdict.h) on this job's view of its attempt.
  Verdict Decide(const JobEntry& e, const SupervisorInput& input, int64_t now) const;
  void SucceedAttempt(JobEntry& e);
  // The ranks' handles and event offsets as they are now, put into the attempt record (which
  // is returned), and the runtime marked clean.
  const store::AttemptRecord& RecordRuntime(JobEntry& e);
  int64_t NowMs() const { return clock_->NowMs(); }

  const Options options_;
  JobCache& cache_;
  launcher::Launcher& launcher_;
  const Clock* clock_;
  JobWriter& writer_;
  Owner& owner_;
  boost::asio::steady_timer tick_timer_;
  bool stopped_ = false;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // a tick after destruction is a no-op
};

}  // namespace fp8d::core
