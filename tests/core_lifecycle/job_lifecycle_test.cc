// SPDX-License-Identifier: Apache-2.0
// docs/design.md §2's state machine, checked pair by pair: the expected edges are written here a
// second time, independently of the table in job_lifecycle.cc, so a wrong edit to either shows.
#include "daemon/core/job_lifecycle.h"

#include <set>
#include <utility>

#include <gtest/gtest.h>

namespace fp8d::core {
namespace {

using namespace fp8d::v1;  // NOLINT: the enumerators read like the design doc

const JobState kAllStates[] = {JOB_STATE_UNSPECIFIED, QUEUED,     STARTING,
                               RUNNING,               SUCCEEDED,  FAILED,
                               RETRY_WAIT,            CANCELLING, CANCELLED};

const std::set<std::pair<JobState, JobState>> kLegal = {
    {QUEUED, STARTING},       {QUEUED, FAILED},         {QUEUED, CANCELLED},
    {STARTING, RUNNING},      {STARTING, FAILED},       {STARTING, RETRY_WAIT},
    {STARTING, CANCELLING},   {RUNNING, SUCCEEDED},     {RUNNING, FAILED},
    {RUNNING, RETRY_WAIT},    {RUNNING, CANCELLING},    {RETRY_WAIT, QUEUED},
    {RETRY_WAIT, CANCELLED},  {CANCELLING, CANCELLED},
    // (8) preempted: back in the queue, with no backoff.
    {STARTING, QUEUED},       {RUNNING, QUEUED},
};

TEST(JobLifecycle, EveryPairOfStatesMatchesTheDesign) {
  int checked = 0;
  for (JobState from : kAllStates) {
    for (JobState to : kAllStates) {
      const bool legal = kLegal.count({from, to}) > 0;
      fp8::Status st = CheckTransition(from, to);
      SCOPED_TRACE(JobState_Name(from) + " -> " + JobState_Name(to));
      EXPECT_EQ(st.ok(), legal) << st.ToString();
      EXPECT_EQ(FindTransition(from, to) != nullptr, legal);
      if (!legal) {
        EXPECT_EQ(st.code(), fp8::StatusCode::kFailedPrecondition);
        EXPECT_NE(st.message().find(JobState_Name(from)), std::string::npos) << st.message();
        EXPECT_NE(st.message().find(JobState_Name(to)), std::string::npos) << st.message();
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 81);
}

TEST(JobLifecycle, TableHasEachEdgeOnceWithAReason) {
  std::set<std::pair<JobState, JobState>> seen;
  for (const Transition& t : TransitionTable()) {
    EXPECT_TRUE(seen.insert({t.from, t.to}).second)
        << "duplicate " << JobState_Name(t.from) << " -> " << JobState_Name(t.to);
    ASSERT_NE(t.reason, nullptr);
    EXPECT_GT(std::string(t.reason).size(), 3u);
  }
  EXPECT_EQ(seen, kLegal);
}

TEST(JobLifecycle, TerminalStatesNeverChangeAndNonTerminalCanBeCancelled) {
  for (JobState s : kAllStates) {
    const bool terminal = s == SUCCEEDED || s == FAILED || s == CANCELLED;
    EXPECT_EQ(IsTerminal(s), terminal) << JobState_Name(s);
    if (terminal) {
      for (JobState to : kAllStates) EXPECT_FALSE(CheckTransition(s, to).ok());
      EXPECT_NE(CheckTransition(s, QUEUED).message().find("terminal"), std::string::npos);
    } else if (s != JOB_STATE_UNSPECIFIED) {
      // Design §2 (6): any non-terminal state can be cancelled, directly or via CANCELLING.
      const bool cancellable = CheckTransition(s, CANCELLED).ok() || CheckTransition(s, CANCELLING).ok();
      EXPECT_TRUE(cancellable) << JobState_Name(s);
    }
  }
  EXPECT_FALSE(IsTerminal(static_cast<JobState>(42)));
  EXPECT_FALSE(CheckTransition(static_cast<JobState>(42), QUEUED).ok());
}

TEST(JobLifecycle, RetryableClasses) {
  EXPECT_FALSE(IsRetryable(INVALID_SPEC));
  EXPECT_FALSE(IsRetryable(DATA_ERROR));
  EXPECT_FALSE(IsRetryable(FAILURE_CLASS_UNSPECIFIED));
  for (FailureClass c : {WORKER_CRASH, HUNG, DEADLINE_EXCEEDED, NODE_LOST, NUMERIC,
                         CONTROLLER_RESTART, INTERNAL_ERROR, PREEMPTED}) {
    EXPECT_TRUE(IsRetryable(c)) << FailureClass_Name(c);
  }
}

TEST(JobLifecycle, ClassifyExit) {
  EXPECT_EQ(ClassifyExit(0, 0), FAILURE_CLASS_UNSPECIFIED);
  EXPECT_EQ(ClassifyExit(64, 0), INVALID_SPEC);
  EXPECT_EQ(ClassifyExit(65, 0), DATA_ERROR);
  EXPECT_EQ(ClassifyExit(70, 0), INTERNAL_ERROR);
  EXPECT_EQ(ClassifyExit(75, 0), INTERNAL_ERROR);
  EXPECT_EQ(ClassifyExit(76, 0), PREEMPTED);     // the verdict checks it was asked for
  EXPECT_EQ(ClassifyExit(76, 15), WORKER_CRASH); // killed, not stopped at a step
  EXPECT_EQ(ClassifyExit(1, 0), WORKER_CRASH);
  EXPECT_EQ(ClassifyExit(137, 0), WORKER_CRASH);
  EXPECT_EQ(ClassifyExit(0, 9), WORKER_CRASH);   // SIGKILL
  EXPECT_EQ(ClassifyExit(64, 11), WORKER_CRASH); // a signal wins over a stale code
}

TEST(JobLifecycle, ExitCodeForRoundTrips) {
  for (FailureClass c : {FAILURE_CLASS_UNSPECIFIED, INVALID_SPEC, DATA_ERROR, WORKER_CRASH,
                         INTERNAL_ERROR, PREEMPTED}) {
    const int code = ExitCodeFor(c);
    ASSERT_GE(code, 0) << FailureClass_Name(c);
    EXPECT_EQ(ClassifyExit(code, 0), c) << FailureClass_Name(c);
  }
  for (FailureClass c : {HUNG, DEADLINE_EXCEEDED, NODE_LOST, NUMERIC, CONTROLLER_RESTART}) {
    EXPECT_EQ(ExitCodeFor(c), -1) << FailureClass_Name(c);
  }
}

RetryPolicy Policy(int64_t initial_ms, int64_t max_ms, double multiplier, double jitter) {
  RetryPolicy p;
  p.mutable_initial_backoff()->set_seconds(initial_ms / 1000);
  p.mutable_initial_backoff()->set_nanos(static_cast<int32_t>(initial_ms % 1000) * 1000000);
  p.mutable_max_backoff()->set_seconds(max_ms / 1000);
  p.mutable_max_backoff()->set_nanos(static_cast<int32_t>(max_ms % 1000) * 1000000);
  p.set_multiplier(multiplier);
  p.set_jitter(jitter);
  return p;
}

TEST(JobLifecycle, BackoffDefaultsAreOneSecondDoublingToSixty) {
  RetryPolicy defaults;
  // uniform01 = 0.5 is the middle of the jitter range: no jitter.
  EXPECT_EQ(BackoffMs(defaults, 1, 0.5), 1000);
  EXPECT_EQ(BackoffMs(defaults, 2, 0.5), 2000);
  EXPECT_EQ(BackoffMs(defaults, 3, 0.5), 4000);
  EXPECT_EQ(BackoffMs(defaults, 6, 0.5), 32000);
  EXPECT_EQ(BackoffMs(defaults, 7, 0.5), 60000);     // 64 s capped at 60 s
  EXPECT_EQ(BackoffMs(defaults, 1000, 0.5), 60000);  // no overflow
  EXPECT_EQ(BackoffMs(defaults, 0, 0.5), 1000);      // attempt < 1 reads as 1
  // Jitter 0.2: [0.8x, 1.2x], and never above the cap.
  EXPECT_EQ(BackoffMs(defaults, 1, 0.0), 800);
  EXPECT_EQ(BackoffMs(defaults, 1, 1.0), 1200);
  EXPECT_EQ(BackoffMs(defaults, 7, 0.0), 48000);
  EXPECT_EQ(BackoffMs(defaults, 7, 1.0), 60000);
}

TEST(JobLifecycle, BackoffFollowsThePolicy) {
  RetryPolicy p = Policy(250, 10000, 3.0, 0.5);
  EXPECT_EQ(BackoffMs(p, 1, 0.5), 250);
  EXPECT_EQ(BackoffMs(p, 2, 0.5), 750);
  EXPECT_EQ(BackoffMs(p, 3, 0.5), 2250);
  EXPECT_EQ(BackoffMs(p, 5, 0.5), 10000);
  EXPECT_EQ(BackoffMs(p, 2, 0.0), 375);    // 750 * 0.5
  EXPECT_EQ(BackoffMs(p, 2, 1.0), 1125);   // 750 * 1.5
  // Out-of-range randoms are clamped rather than trusted.
  EXPECT_EQ(BackoffMs(p, 2, -3.0), 375);
  EXPECT_EQ(BackoffMs(p, 2, 7.0), 1125);
  // Monotonic without jitter.
  int64_t prev = 0;
  for (int a = 1; a < 20; ++a) {
    const int64_t d = BackoffMs(p, a, 0.5);
    EXPECT_GE(d, prev);
    prev = d;
  }
}

TEST(JobLifecycle, ResolveRetryPolicyFillsDefaults) {
  EffectiveRetryPolicy d = ResolveRetryPolicy(RetryPolicy());
  EXPECT_EQ(d.max_attempts, 3);
  EXPECT_EQ(d.initial_backoff_ms, 1000);
  EXPECT_EQ(d.max_backoff_ms, 60000);
  EXPECT_DOUBLE_EQ(d.multiplier, 2.0);
  EXPECT_DOUBLE_EQ(d.jitter, 0.2);
  // initial above the cap: the cap wins; multiplier below 1: constant delay.
  EffectiveRetryPolicy odd = ResolveRetryPolicy(Policy(5000, 2000, 0.5, 3.0));
  EXPECT_EQ(odd.initial_backoff_ms, 2000);
  EXPECT_DOUBLE_EQ(odd.multiplier, 1.0);
  EXPECT_DOUBLE_EQ(odd.jitter, 1.0);
}

TEST(JobLifecycle, StateAfterFailure) {
  RetryPolicy p;  // 3 attempts
  EXPECT_EQ(StateAfterFailure(p, WORKER_CRASH, 1), RETRY_WAIT);
  EXPECT_EQ(StateAfterFailure(p, HUNG, 2), RETRY_WAIT);
  EXPECT_EQ(StateAfterFailure(p, HUNG, 3), FAILED);
  EXPECT_EQ(StateAfterFailure(p, INVALID_SPEC, 1), FAILED);
  EXPECT_EQ(StateAfterFailure(p, DATA_ERROR, 1), FAILED);
  p.set_max_attempts(1);
  EXPECT_EQ(StateAfterFailure(p, WORKER_CRASH, 1), FAILED);
  // Preempted: straight back to the queue, whatever the attempts used.
  EXPECT_EQ(StateAfterFailure(p, PREEMPTED, 1), QUEUED);
  EXPECT_EQ(StateAfterFailure(p, PREEMPTED, 7), QUEUED);
}

TEST(JobLifecycle, AttemptsThatDoNotCount) {
  Attempt a;
  a.set_failure_class(WORKER_CRASH);
  EXPECT_TRUE(CountsAsAttempt(a));
  for (FailureClass c : {CONTROLLER_RESTART, PREEMPTED}) {
    a.set_failure_class(c);
    EXPECT_FALSE(CountsAsAttempt(a)) << FailureClass_Name(c);
  }
  a.set_failure_class(INTERNAL_ERROR);
  a.set_controller_fault(true);
  EXPECT_FALSE(CountsAsAttempt(a));
}

}  // namespace
}  // namespace fp8d::core
