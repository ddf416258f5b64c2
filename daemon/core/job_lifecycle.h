// SPDX-License-Identifier: Apache-2.0
// The job state machine (docs/design.md §2): the ONE place that says which state changes are legal,
// which failures are retried, how a worker's exit maps to a failure class, and how long to
// back off before the next attempt. Pure functions, no I/O.
//
//               (1)             (2)             (3)
//   QUEUED ─────────► STARTING ──────► RUNNING ──────► SUCCEEDED
//    ▲   │              │   │            │   │
//    │   │(4u)          │   └────(4)─────┴───┼───────► FAILED   permanent failure or attempts
//    │   └──────────────┼────────────────────┼───────► FAILED   used up; (4u) can never fit
//    │(5)               │(4')                │(4')
//   RETRY_WAIT ◄────────┴────────────────────┘                  retryable failure, attempts left
//
//   QUEUED, RETRY_WAIT ──(6q)──► CANCELLED                     nothing runs: cancel at once
//   STARTING, RUNNING  ──(6)───► CANCELLING ──(7)──► CANCELLED  wait for every rank to exit
//   STARTING, RUNNING  ──(8)───► QUEUED                        preempted: back in the queue
//
// (1) the scheduler reserved all ranks' slots (gang placement); (2) every rank reported
// `started`; (3) every rank reported `done` and exited 0; (4) a permanent failure or a
// retryable one with no attempts left; (4u) the job asks more ranks than the cluster has, so
// it can never be placed, or a job waiting on depends_on has a dependency that ended FAILED or
// CANCELLED or was deleted (DEPENDENCY_FAILED); (4') a retryable failure with attempts left (also how recovery
// requeues an attempt whose workers died while the controller was down: CONTROLLER_RESTART);
// (5) backoff elapsed; (6) cancel requested; (7) every rank has exited; (8) the scheduler
// preempted the attempt for other work (job_preemption.cc) and a rank ended: PREEMPTED, not
// counted against max_attempts, no backoff, the next attempt resumes from the newest checkpoint
// (a cancel during the preemption takes (6) and wins).
//
// Terminal states (SUCCEEDED, FAILED, CANCELLED) never change again. A self-transition
// (X → X) is not a transition and is refused; progress updates keep the state and do not go
// through CheckTransition.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::core {

using fp8d::v1::FailureClass;
using fp8d::v1::JobState;

struct Transition {
  JobState from;
  JobState to;
  const char* reason;  // the numbered edge of the diagram above, in words
};

// Every legal transition, exactly once.
std::span<const Transition> TransitionTable();

// The table entry for from → to, or nullptr when the transition is illegal.
const Transition* FindTransition(JobState from, JobState to);

// OK when from → to is in the table; FAILED_PRECONDITION naming both states otherwise.
fp8::Status CheckTransition(JobState from, JobState to);

// SUCCEEDED, FAILED, CANCELLED. UNSPECIFIED (never stored) is not terminal.
bool IsTerminal(JobState state);

// INVALID_SPEC and DATA_ERROR are permanent; every other class is retried by policy.
// UNSPECIFIED is not retryable (it is not a failure).
bool IsRetryable(FailureClass failure);

// Worker exit → failure class (docs/design.md §4). `signal` is the terminating signal, 0 if
// the worker exited normally. exit 0 without a signal → FAILURE_CLASS_UNSPECIFIED (success);
// 64 → INVALID_SPEC; 65 → DATA_ERROR; 70 or 75 → INTERNAL_ERROR; 76 (stopped by SIGTERM after
// its checkpoint) → PREEMPTED, which the verdict keeps only when the daemon asked for the
// preemption (else WORKER_CRASH); any signal or other non-zero code → WORKER_CRASH.
FailureClass ClassifyExit(int exit_code, int signal);

// The exit code a worker uses to report `failure` (the inverse of ClassifyExit where one
// exists): INVALID_SPEC 64, DATA_ERROR 65, INTERNAL_ERROR 75, PREEMPTED 76, WORKER_CRASH 1
// (any other non-zero code), UNSPECIFIED 0. Classes the controller decides itself (HUNG, NODE_LOST, ...)
// have no exit code: -1.
int ExitCodeFor(FailureClass failure);

// Retry policy with proto3's "0 means the default" resolved.
struct EffectiveRetryPolicy {
  int32_t max_attempts = 3;
  int64_t initial_backoff_ms = 1000;
  int64_t max_backoff_ms = 60000;
  double multiplier = 2.0;
  double jitter = 0.2;
};
EffectiveRetryPolicy ResolveRetryPolicy(const fp8d::v1::RetryPolicy& policy);

// Delay before attempt `attempt + 1`, after attempt `attempt` (1-based) failed:
//   initial * multiplier^(attempt-1), capped at max_backoff, then scaled by
//   1 + jitter * (2*uniform01 - 1) and capped again, so the result is in [0, max_backoff].
// `uniform01` is a random number in [0, 1) supplied by the caller (deterministic in tests);
// 0.5 means no jitter.
int64_t BackoffMs(const fp8d::v1::RetryPolicy& policy, int attempt, double uniform01);

// What a failed attempt leads to: QUEUED for PREEMPTED (whatever the attempts), RETRY_WAIT
// when `failure` is retryable and fewer than max_attempts attempts were made (`attempt` is the
// 1-based number of the one that failed), FAILED otherwise.
// False for an attempt that ended for the controller's reasons, not the job's: its workers
// were gone after a controller restart (CONTROLLER_RESTART), the scheduler preempted it
// (PREEMPTED), or the controller could not write the attempt's own files (controller_fault).
bool CountsAsAttempt(const fp8d::v1::Attempt& attempt);

JobState StateAfterFailure(const fp8d::v1::RetryPolicy& policy, FailureClass failure,
                           int attempt);

}  // namespace fp8d::core
