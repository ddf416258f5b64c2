// SPDX-License-Identifier: Apache-2.0
// Compiled with -Werror=switch (lifecycle_scheduler.cmake): every switch over JobState or
// FailureClass names every enumerator and has NO default, so adding a state or a class to the
// proto breaks the build here until someone decides what it means.
#include "daemon/core/job_lifecycle.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

namespace fp8d::core {
namespace {

using fp8d::v1::CANCELLED;
using fp8d::v1::CANCELLING;
using fp8d::v1::FAILED;
using fp8d::v1::QUEUED;
using fp8d::v1::RETRY_WAIT;
using fp8d::v1::RUNNING;
using fp8d::v1::STARTING;
using fp8d::v1::SUCCEEDED;

constexpr std::array<Transition, 16> kTransitions = {{
    {QUEUED, STARTING, "(1) the scheduler reserved all ranks' slots"},
    {QUEUED, FAILED, "(4u) unschedulable (asks more ranks than the cluster has), or a dependency did not succeed"},
    {QUEUED, CANCELLED, "(6q) cancel requested while queued"},
    {STARTING, RUNNING, "(2) every rank reported started"},
    {STARTING, FAILED, "(4) permanent failure, or attempts used up"},
    {STARTING, RETRY_WAIT, "(4') retryable failure with attempts left"},
    {STARTING, CANCELLING, "(6) cancel requested while workers start"},
    {STARTING, QUEUED, "(8) preempted: requeued, not counted as an attempt"},
    {RUNNING, SUCCEEDED, "(3) every rank reported done and exited 0"},
    {RUNNING, FAILED, "(4) permanent failure, or attempts used up"},
    {RUNNING, RETRY_WAIT, "(4') retryable failure with attempts left"},
    {RUNNING, CANCELLING, "(6) cancel requested while workers run"},
    {RUNNING, QUEUED, "(8) preempted: requeued, not counted as an attempt"},
    {RETRY_WAIT, QUEUED, "(5) backoff elapsed"},
    {RETRY_WAIT, CANCELLED, "(6q) cancel requested while waiting to retry"},
    {CANCELLING, CANCELLED, "(7) every rank has exited"},
}};

int64_t DurationMs(const google::protobuf::Duration& d) {
  return d.seconds() * 1000 + d.nanos() / 1000000;
}

}  // namespace

std::span<const Transition> TransitionTable() { return kTransitions; }

const Transition* FindTransition(JobState from, JobState to) {
  for (const Transition& t : kTransitions) {
    if (t.from == from && t.to == to) return &t;
  }
  return nullptr;
}

fp8::Status CheckTransition(JobState from, JobState to) {
  if (FindTransition(from, to) != nullptr) return fp8::OkStatus();
  std::string why = IsTerminal(from) ? " (a terminal state never changes)" : "";
  return fp8::FailedPreconditionError("illegal job state transition " +
                                      fp8d::v1::JobState_Name(from) + " -> " +
                                      fp8d::v1::JobState_Name(to) + why);
}

bool IsTerminal(JobState state) {
  switch (state) {
    case fp8d::v1::SUCCEEDED:
    case fp8d::v1::FAILED:
    case fp8d::v1::CANCELLED:
      return true;
    case fp8d::v1::JOB_STATE_UNSPECIFIED:
    case fp8d::v1::QUEUED:
    case fp8d::v1::STARTING:
    case fp8d::v1::RUNNING:
    case fp8d::v1::RETRY_WAIT:
    case fp8d::v1::CANCELLING:
      return false;
    // protoc's range sentinels; never real values.
    case fp8d::v1::JobState_INT_MIN_SENTINEL_DO_NOT_USE_:
    case fp8d::v1::JobState_INT_MAX_SENTINEL_DO_NOT_USE_:
      return false;
  }
  return false;  // a number outside the enum (corrupt input): not terminal, never legal
}

bool IsRetryable(FailureClass failure) {
  switch (failure) {
    case fp8d::v1::INVALID_SPEC:
    case fp8d::v1::DATA_ERROR:
    case fp8d::v1::DEPENDENCY_FAILED:
      return false;
    case fp8d::v1::WORKER_CRASH:
    case fp8d::v1::HUNG:
    case fp8d::v1::DEADLINE_EXCEEDED:
    case fp8d::v1::NODE_LOST:
    case fp8d::v1::NUMERIC:
    case fp8d::v1::CONTROLLER_RESTART:
    case fp8d::v1::INTERNAL_ERROR:
    case fp8d::v1::RESOURCE_EXHAUSTED:  // once: see StateAfterFailure's caller
    case fp8d::v1::PREEMPTED:           // always: never counts against max_attempts
      return true;
    case fp8d::v1::FAILURE_CLASS_UNSPECIFIED:
      return false;
    case fp8d::v1::FailureClass_INT_MIN_SENTINEL_DO_NOT_USE_:
    case fp8d::v1::FailureClass_INT_MAX_SENTINEL_DO_NOT_USE_:
      return false;
  }
  return false;
}

FailureClass ClassifyExit(int exit_code, int signal) {
  if (signal != 0) return fp8d::v1::WORKER_CRASH;
  switch (exit_code) {
    case 0:
      return fp8d::v1::FAILURE_CLASS_UNSPECIFIED;
    case 64:  // EX_USAGE: the spec is invalid
      return fp8d::v1::INVALID_SPEC;
    case 65:  // EX_DATAERR
      return fp8d::v1::DATA_ERROR;
    case 70:  // EX_SOFTWARE
    case 75:  // EX_TEMPFAIL
      return fp8d::v1::INTERNAL_ERROR;
    case 76:  // stopped by SIGTERM after its checkpoint (the verdict checks it was asked for)
      return fp8d::v1::PREEMPTED;
    default:
      return fp8d::v1::WORKER_CRASH;
  }
}

int ExitCodeFor(FailureClass failure) {
  switch (failure) {
    case fp8d::v1::FAILURE_CLASS_UNSPECIFIED:
      return 0;
    case fp8d::v1::INVALID_SPEC:
      return 64;
    case fp8d::v1::DATA_ERROR:
      return 65;
    case fp8d::v1::INTERNAL_ERROR:
      return 75;
    case fp8d::v1::WORKER_CRASH:
      return 1;
    case fp8d::v1::PREEMPTED:
      return 76;
    case fp8d::v1::HUNG:
    case fp8d::v1::DEADLINE_EXCEEDED:
    case fp8d::v1::NODE_LOST:
    case fp8d::v1::NUMERIC:
    case fp8d::v1::CONTROLLER_RESTART:
    case fp8d::v1::RESOURCE_EXHAUSTED:
    case fp8d::v1::DEPENDENCY_FAILED:
      return -1;
    case fp8d::v1::FailureClass_INT_MIN_SENTINEL_DO_NOT_USE_:
    case fp8d::v1::FailureClass_INT_MAX_SENTINEL_DO_NOT_USE_:
      return -1;
  }
  return -1;
}

EffectiveRetryPolicy ResolveRetryPolicy(const fp8d::v1::RetryPolicy& policy) {
  EffectiveRetryPolicy out;
  if (policy.max_attempts() > 0) out.max_attempts = policy.max_attempts();
  if (int64_t ms = DurationMs(policy.initial_backoff()); ms > 0) out.initial_backoff_ms = ms;
  if (int64_t ms = DurationMs(policy.max_backoff()); ms > 0) out.max_backoff_ms = ms;
  // A multiplier below 1 would shrink the delay after each failure; treat it as constant.
  if (policy.multiplier() > 0) out.multiplier = std::max(1.0, policy.multiplier());
  if (policy.jitter() > 0) out.jitter = std::min(1.0, policy.jitter());
  // An initial delay above the cap is the cap (the cap wins, as its name says).
  out.initial_backoff_ms = std::min(out.initial_backoff_ms, out.max_backoff_ms);
  return out;
}

int64_t BackoffMs(const fp8d::v1::RetryPolicy& policy, int attempt, double uniform01) {
  const EffectiveRetryPolicy p = ResolveRetryPolicy(policy);
  const int exponent = std::max(attempt, 1) - 1;
  // Computed in double and capped before converting, so a large attempt cannot overflow.
  double delay = static_cast<double>(p.initial_backoff_ms) * std::pow(p.multiplier, exponent);
  const double cap = static_cast<double>(p.max_backoff_ms);
  if (!(delay < cap)) delay = cap;  // also catches inf
  const double u = std::clamp(uniform01, 0.0, 1.0);
  delay *= 1.0 + p.jitter * (2.0 * u - 1.0);
  delay = std::clamp(delay, 0.0, cap);
  return static_cast<int64_t>(std::llround(delay));
}

bool CountsAsAttempt(const fp8d::v1::Attempt& attempt) {
  return attempt.failure_class() != fp8d::v1::CONTROLLER_RESTART &&
         attempt.failure_class() != fp8d::v1::PREEMPTED && !attempt.controller_fault();
}

JobState StateAfterFailure(const fp8d::v1::RetryPolicy& policy, FailureClass failure,
                           int attempt) {
  // A preempted job did nothing wrong and has no reason to wait: back in the queue at once.
  if (failure == fp8d::v1::PREEMPTED) return fp8d::v1::QUEUED;
  const EffectiveRetryPolicy p = ResolveRetryPolicy(policy);
  if (IsRetryable(failure) && attempt < p.max_attempts) return fp8d::v1::RETRY_WAIT;
  return fp8d::v1::FAILED;
}

}  // namespace fp8d::core
