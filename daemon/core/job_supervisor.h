// JobSupervisor: the supervisor's glue. Worker events and exits (from the agent, posted to io
// by the manager) and a periodic tick that reads the injected Clock (so tests drive time by
// hand). Each input is judged by DecideAttempt (attempt_verdict.h, pure); this unit builds its
// view of the attempt and applies the verdict: transitions, store writes, signals, and the
// progress rows and event offsets due to be written.
//
// It reaches the rest of the manager only through what it is given: the job cache, the agent
// (signals), the clock, and Hooks for the store thread, transitions, scheduling, eviction and
// the retention sweep.
//
// THREADING: every method runs on the io thread; store writes go through `store_write`, which
// brings the completion back to io (not if the manager is gone by then).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/status.h"
#include "daemon/agent/agent.h"
#include "daemon/core/attempt_verdict.h"
#include "daemon/core/clock.h"
#include "daemon/core/job_cache.h"
#include "daemon/store/job_store.h"

namespace fp8d::core {

class JobSupervisor {
 public:
  struct Options {
    int64_t tick_ms = 50;              // timer resolution
    int64_t cancel_grace_ms = 10000;   // SIGTERM → SIGKILL
    int64_t progress_flush_ms = 200;   // progress rows persisted at most this often per job
    int64_t runtime_flush_ms = 1000;   // rank event offsets persisted at most this often
  };
  using StoreWork = std::function<fp8::Status(store::JobStore&)>;
  struct Hooks {
    // Runs `work` on the store thread and `then` with its status on io.
    std::function<void(StoreWork work, std::function<void(fp8::Status)> then)> store_write;
    // The manager's one way to change a job's state (job_transitions.cc): check, persist
    // (with `extra` in the same store task), publish, then `after` with the write's status.
    std::function<void(JobEntry& e, fp8d::v1::JobState to, const std::string& message,
                       std::function<void(fp8::Status)> after, StoreWork extra)>
        transition;
    std::function<void()> schedule;                           // a scheduling round
    std::function<void(const std::string& name)> maybe_evict;  // drop a finished job if it may go
    std::function<double()> uniform01;                        // backoff jitter
    std::function<void(int64_t now)> sweep_finished;          // retention, once per tick
  };

  JobSupervisor(boost::asio::io_context& io, Options options, JobCache& cache,
                agent::Agent& agent, const Clock* clock, Hooks hooks);

  // ---- inputs ----
  void HandleEvent(const agent::WorkerEvent& ev);
  void HandleExit(const agent::WorkerExit& ex);
  void ArmTick();
  // No more inputs or ticks (shutdown): events, exits and ticks are ignored from now on.
  void Stop();

  // ---- used by scheduling and recovery as well ----
  // The attempt failed: decide RETRY_WAIT or FAILED, persist, then stop its workers.
  void FailAttempt(JobEntry& e, fp8d::v1::FailureClass failure, const std::string& message);
  // SIGTERM now, SIGKILL after cancel_grace_ms (the tick sends it).
  void TerminateWorkers(JobEntry& e);
  // Every rank of the run exited: persist the attempt's end, free its slots, reschedule.
  void OnRunExited(JobEntry& e);
  // Persists the attempt record with the ranks' pids and event offsets; `saved` gets the
  // write's status. A failed write marks the runtime dirty, so the tick writes it again.
  void SaveAttempt(JobEntry& e, std::function<void(fp8::Status)> saved = nullptr);
  // Writes the rows of jobs with unwritten progress (`all`: regardless of progress_flush_ms).
  void FlushDirtyRows(int64_t now, bool all);

 private:
  void Tick();
  // DecideAttempt (attempt_verdict.h) on this job's view of its attempt.
  Verdict Decide(const JobEntry& e, const SupervisorInput& input, int64_t now) const;
  void SucceedAttempt(JobEntry& e);
  int64_t NowMs() const { return clock_->NowMs(); }

  const Options options_;
  JobCache& cache_;
  agent::Agent& agent_;
  const Clock* clock_;
  Hooks hooks_;
  boost::asio::steady_timer tick_timer_;
  bool stopped_ = false;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // a tick after destruction is a no-op
};

}  // namespace fp8d::core
