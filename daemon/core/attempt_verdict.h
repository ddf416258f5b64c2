// SPDX-License-Identifier: Apache-2.0
// The supervisor's decisions as one pure function: given what is known of a job's current
// attempt, one input (a worker event, a rank's exit, or a tick of the clock), the time and the
// timeouts, it says what follows. No I/O and no manager: job_supervisor.cc builds the view,
// calls DecideAttempt and applies the verdict (store writes, transitions, signals), and the
// table tests (tests/core_verdict) check every decision row by row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/launcher/launcher.h"
#include "fp8d/v1/job.pb.h"
#include "fp8d/v1/worker_event.pb.h"

namespace fp8d::core {

// One rank of the attempt, as far as it bears on the verdict.
struct RankView {
  int64_t last_seen_ms = 0;  // its last event of any kind
  bool started = false;
  bool done = false;         // reported a `done` that counts (not an interrupted one)
  bool exited = false;
  int exit_code = -1;
  int signal = 0;
  bool adopted_exit = false;  // a re-adopted process: its exit status is unknowable
};

// The job's current attempt and the job fields the supervisor reads.
struct AttemptView {
  fp8d::v1::JobState state = fp8d::v1::STARTING;  // the job's state
  bool launched = false;          // launched or adopted: supervision applies
  bool finished = false;          // an outcome was decided already
  int64_t start_ms = 0;           // the attempt deadline and the start timeout count from here
  int64_t last_progress_ms = 0;   // the progress timeout counts from here (RUNNING)
  int64_t kill_at_ms = 0;         // SIGKILL due at this time; 0 = not terminating
  bool sigkill_sent = false;
  // The scheduler asked the attempt to stop (PreemptAttempt): its ranks' ends are PREEMPTED,
  // not failures, unless a rank finished its work; no timeouts apply during the grace.
  bool preempting = false;
  std::string preempt_reason;     // e.g. "preempted by jobs/x"
  int64_t retry_at_ms = 0;        // RETRY_WAIT → QUEUED at this time
  int64_t newest_checkpoint_step = -1;  // -1: none
  std::string pending_reason;     // shown while a launcher queue holds the attempt
  std::vector<RankView> ranks;
};

// All in milliseconds; 0 (or less) means no limit.
struct Timeouts {
  int64_t attempt_deadline_ms = 0;
  int64_t heartbeat_ms = 0;
  int64_t progress_ms = 0;       // no progress while RUNNING, or not every rank started yet
  int64_t cancel_grace_ms = 0;   // SIGTERM → SIGKILL
  int64_t preemption_grace_ms = 0;  // SIGTERM → SIGKILL of a preempted attempt

  static Timeouts Of(const fp8d::v1::Timeouts& job, int64_t cancel_grace_ms,
                     int64_t preemption_grace_ms = 0);
};

struct TickInput {};
// Events and exits come from the launcher, for the rank they name (a rank of `ranks`).
using SupervisorInput =
    std::variant<const launcher::WorkerEvent*, const launcher::WorkerExit*, TickInput>;

struct Verdict {
  enum class Outcome {
    kKeepRunning,  // no outcome yet (the fields below may still ask for work)
    kSucceed,      // every rank finished: SUCCEEDED
    kFail,         // the attempt failed: `failure`, `message`; its ranks are stopped
  };
  Outcome outcome = Outcome::kKeepRunning;
  fp8d::v1::FailureClass failure = fp8d::v1::FAILURE_CLASS_UNSPECIFIED;
  // kFail: the job's error message. kKeepRunning: why an input was ignored ("" = routine).
  std::string message;
  bool uncounted = false;  // kFail: not counted against max_attempts (PREEMPTED, ...)

  // From an event of the input's rank.
  bool rank_started = false;        // `started`
  bool to_running = false;          // every rank has started: STARTING → RUNNING
  bool final_line = false;          // `done` or `error`: a line whose effect must be durable
  std::optional<bool> rank_done;    // `done`: whether it counts (false when interrupted)
  bool restart_clocks = false;      // `pending`: start, heartbeat and deadline clocks restart
  std::optional<std::string> pending_reason;  // a new reason to show
  bool clear_pending_reason = false;
  bool progress = false;            // the progress timeout restarts
  bool publish_progress = false;    // and these figures are the job's progress (rank 0)
  std::optional<fp8d::v1::WorkerEvent::Checkpoint> checkpoint;  // a newer checkpoint

  // From a tick.
  bool sigkill = false;  // the cancel (or preemption) grace is over and ranks still run
  bool requeue = false;  // RETRY_WAIT's backoff has elapsed
};

Verdict DecideAttempt(const AttemptView& attempt, const SupervisorInput& input, int64_t now_ms,
                      const Timeouts& timeouts);

// The failure class a worker's `error` event stands for.
fp8d::v1::FailureClass FailureClassOf(fp8d::v1::WorkerEvent::ErrorClass error_class);

// "12.5 s", for messages.
std::string SecondsText(int64_t ms);

}  // namespace fp8d::core
