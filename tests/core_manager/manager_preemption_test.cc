// SPDX-License-Identifier: Apache-2.0
// JobManager: preemption (job_preemption.cc) with the FakeLauncher and the ManualClock. The
// intent is durable before SIGTERM; the rank's exit requeues the job with the reason, the attempt
// ends PREEMPTED without counting against max_attempts, the next attempt resumes from the
// newest checkpoint; SIGKILL after the grace; a cancel meanwhile wins; a crash of fp8d in the
// middle finishes the job without running any attempt twice.
#include <csignal>

#include "daemon/core/job_fields.h"
#include "tests/core_manager/manager_harness.h"

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;

constexpr char kReason[] = "preempted by jobs/urgent";

class PreemptionTest : public ManagerTest {
 protected:
  ManagerOptions WithGrace() const {
    ManagerOptions o = Options();
    o.preemption_grace_ms = 3000;
    return o;
  }
  // A job that may make one attempt only: a preemption that counted would fail it.
  Job OneAttemptJob(int ranks = 1) const {
    Job job = TrainJob(ranks);
    job.mutable_retry()->set_max_attempts(1);
    return job;
  }
  fp8d::v1::Attempt AttemptOf(const std::string& name, int number) {
    auto job = Get(name, /*full=*/true);
    EXPECT_TRUE(job.ok());
    for (const auto& a : job->attempts()) {
      if (a.number() == number) return a;
    }
    ADD_FAILURE() << name << " has no attempt " << number;
    return {};
  }
  // The worker's side of a SIGTERM: the step's checkpoint, `preempted`, an interrupted `done`,
  // exit 76 (fp8-worker's order).
  void StopAtStep(const std::string& name, int attempt, int rank, int step) {
    const std::string path = "/ck/step-" + std::to_string(step);
    if (rank == 0) Emit(name, attempt, 0, {{"type", "checkpoint"}, {"step", step}, {"path", path}});
    Emit(name, attempt, rank, {{"type", "preempted"}, {"step", step}, {"checkpoint", rank == 0 ? path : ""}});
    Emit(name, attempt, rank, {{"type", "done"}, {"result", {{"interrupted", true}}}});
    Exit(name, attempt, rank, 76);
  }
  // Starts attempt `attempt` (launch number `launch`) of a requeued job and waits for RUNNING.
  void StartNext(const std::string& name, size_t launch, int attempt, int ranks = 1) {
    ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() > launch; }));
    ASSERT_EQ(launcher_->Launch(launch).attempt, attempt);
    for (int r = 0; r < ranks; ++r) Emit(name, attempt, r, {{"type", "started"}, {"rank", r}});
    ASSERT_TRUE(WaitState(name, fp8d::v1::RUNNING));
  }
};

TEST_F(PreemptionTest, CheckpointsRequeuesWithTheReasonAndResumesWithoutCountingAttempts) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string name = CreateRunning(OneAttemptJob());
  Emit(name, 1, 0, {{"type", "checkpoint"}, {"step", 4}, {"path", "/ck/step-4"}});

  Preempt(name, kReason);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
  // The intent was durable before the signal: the stored attempt says PREEMPTED already.
  EXPECT_EQ(AttemptOf(name, 1).failure_class(), fp8d::v1::PREEMPTED);
  EXPECT_EQ(StateOf(name), fp8d::v1::RUNNING) << "running until its ranks end";
  Preempt(name, "preempted by jobs/other");  // asked already: nothing more
  RunFor(20);
  EXPECT_EQ(SignalCount(name, 1, SIGTERM), 1);

  StopAtStep(name, 1, 0, 6);
  // Back in the queue with the reason, then placed at once on the freed slot.
  StartNext(name, 1, 2);
  const fp8d::v1::Attempt first = AttemptOf(name, 1);
  EXPECT_EQ(first.failure_class(), fp8d::v1::PREEMPTED);
  EXPECT_NE(first.failure_message().find(kReason), std::string::npos) << first.failure_message();
  EXPECT_TRUE(first.has_end_time());
  EXPECT_EQ(launcher_->Launch(1).resume_from, "/ck/step-6") << "the preemption's checkpoint";
  Job full = *Get(name, /*full=*/true);
  bool requeued_with_reason = false;
  for (const auto& ev : full.events()) {
    if (ev.from_state() == fp8d::v1::RUNNING && ev.to_state() == fp8d::v1::QUEUED) {
      requeued_with_reason = ev.message().find(kReason) != std::string::npos;
    }
  }
  EXPECT_TRUE(requeued_with_reason);

  // Preempted again: max_attempts 1 still does not stop it.
  Preempt(name, kReason);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 2, SIGTERM); }));
  StopAtStep(name, 2, 0, 8);
  StartNext(name, 2, 3);
  EXPECT_EQ(launcher_->Launch(2).resume_from, "/ck/step-8");
  FinishAttempt(name, 3, 1);
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED));
  EXPECT_EQ(Get(name)->attempt(), 3);
}

TEST_F(PreemptionTest, QueuedJobShowsTheReasonWhileItWaits) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string name = CreateRunning(OneAttemptJob());
  Preempt(name, kReason);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
  const std::string blocker = [&] {
    Job j = TrainJob();
    j.set_priority(10);  // placed before the preempted job when the slot frees
    auto created = Create(j);
    EXPECT_TRUE(created.ok());
    return created->name();
  }();
  RunFor(10);
  StopAtStep(name, 1, 0, 3);
  ASSERT_TRUE(WaitState(name, fp8d::v1::QUEUED));
  // The blocker was queued first, so it takes the slot; the preempted job waits, saying why.
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  EXPECT_EQ(launcher_->Launch(1).job_id, JobIdOf(blocker));
  Job job = *Get(name);
  EXPECT_EQ(job.state(), fp8d::v1::QUEUED);
  EXPECT_EQ(job.pending_reason(), kReason);
  EXPECT_FALSE(job.has_error()) << "a preemption is not an error of the job";
}

TEST_F(PreemptionTest, RankIgnoringSigtermIsKilledAfterTheGraceAndResumesFromItsPeriodicCheckpoint) {
  launcher_->slots = {launcher::Slot{"node-a", -1}, launcher::Slot{"node-a", -1}};
  StartManager(WithGrace());
  const std::string name = CreateRunning(OneAttemptJob(2));
  Emit(name, 1, 0, {{"type", "checkpoint"}, {"step", 10}, {"path", "/ck/step-10"}});
  Preempt(name, kReason);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));

  // Rank 1 stops at once; rank 0 ignores SIGTERM. No timeout applies during the grace.
  StopAtStep(name, 1, 1, 11);
  ASSERT_TRUE(WaitState(name, fp8d::v1::QUEUED));
  clock_.Advance(2'999);
  RunFor(30);
  EXPECT_FALSE(HasSignal(name, 1, SIGKILL));
  EXPECT_EQ(launcher_->LaunchCount(), 1u) << "rank 0 still holds its slot";
  clock_.Advance(1);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGKILL); }));
  Exit(name, 1, 0, -1, SIGKILL);
  StartNext(name, 1, 2, 2);
  EXPECT_EQ(launcher_->Launch(1).resume_from, "/ck/step-10") << "rank 0 wrote none on SIGTERM";
  EXPECT_EQ(AttemptOf(name, 1).failure_class(), fp8d::v1::PREEMPTED);
  FinishAttempt(name, 2, 2);
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED));
}

// Without its intent in the store a restart could not tell the attempt was being preempted:
// no SIGTERM until the intent is durable; a refused write leaves the attempt running.
TEST_F(PreemptionTest, NoSignalUntilTheIntentIsDurable) {
  StartManager();
  const std::string name = CreateRunning(OneAttemptJob());
  *fail_writes_ = true;
  Preempt(name, kReason);
  RunFor(50);
  EXPECT_FALSE(HasSignal(name, 1, SIGTERM));
  *fail_writes_ = false;
  RunFor(20);
  EXPECT_FALSE(HasSignal(name, 1, SIGTERM)) << "the refused preemption is not sent later";
  EXPECT_EQ(StateOf(name), fp8d::v1::RUNNING);
  EXPECT_NE(AttemptOf(name, 1).failure_class(), fp8d::v1::PREEMPTED);
  Preempt(name, kReason);  // the scheduler asks again
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
  EXPECT_EQ(AttemptOf(name, 1).failure_class(), fp8d::v1::PREEMPTED);
  StopAtStep(name, 1, 0, 3);
  StartNext(name, 1, 2);
}

TEST_F(PreemptionTest, CancelDuringThePreemptionWins) {
  StartManager(WithGrace());
  const std::string name = CreateRunning(OneAttemptJob());
  Preempt(name, kReason);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
  auto cancelling = Cancel(name);
  ASSERT_TRUE(cancelling.ok()) << cancelling.status().ToString();
  EXPECT_EQ(cancelling->state(), fp8d::v1::CANCELLING);
  StopAtStep(name, 1, 0, 5);
  ASSERT_TRUE(WaitState(name, fp8d::v1::CANCELLED));
  RunFor(20);
  EXPECT_EQ(launcher_->LaunchCount(), 1u);
  EXPECT_NE(AttemptOf(name, 1).failure_class(), fp8d::v1::PREEMPTED) << "it was cancelled";
}

TEST_F(PreemptionTest, AttemptThatFinishesWithinTheGraceSucceeds) {
  StartManager(WithGrace());
  const std::string name = CreateRunning(OneAttemptJob());
  Preempt(name, kReason);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
  FinishAttempt(name, 1, 1);  // its last step was done when SIGTERM came
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED));
  EXPECT_EQ(AttemptOf(name, 1).failure_class(), fp8d::v1::FAILURE_CLASS_UNSPECIFIED);
}

TEST_F(PreemptionTest, Exit76WithoutAPreemptionIsACrash) {
  StartManager();
  const std::string name = CreateRunning(OneAttemptJob());
  Exit(name, 1, 0, 76);
  ASSERT_TRUE(WaitState(name, fp8d::v1::FAILED));
  EXPECT_EQ(Get(name)->error().failure_class(), fp8d::v1::WORKER_CRASH);
}

TEST_F(PreemptionTest, OnlyAStartedOrRunningAttemptIsPreempted) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string running = CreateRunning(OneAttemptJob());
  auto queued = Create(TrainJob());
  ASSERT_TRUE(queued.ok());
  RunFor(10);
  Preempt(queued->name(), kReason);
  RunFor(20);
  EXPECT_EQ(StateOf(queued->name()), fp8d::v1::QUEUED);
  EXPECT_NE(Get(queued->name())->pending_reason(), kReason);
  EXPECT_TRUE(launcher_->Signals().empty());
  FinishAttempt(running, 1, 1);
  ASSERT_TRUE(WaitState(running, fp8d::v1::SUCCEEDED));
  Preempt(running, kReason);  // finished: nothing to stop
  RunFor(20);
  EXPECT_EQ(StateOf(running), fp8d::v1::SUCCEEDED);
  EXPECT_FALSE(HasSignal(running, 1, SIGTERM));
}

TEST_F(PreemptionTest, CrashDuringThePreemptionFinishesItAfterTheRestart) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string name = CreateRunning(OneAttemptJob());
  Emit(name, 1, 0, {{"type", "checkpoint"}, {"step", 4}, {"path", "/ck/step-4"}});
  Preempt(name, kReason);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
  RunFor(20);  // the checkpoint row is written

  CrashAndRestartManager();  // the worker lives on (adopt_status OK)
  ASSERT_EQ(launcher_->AdoptCount(), 1u);
  EXPECT_EQ(StateOf(name), fp8d::v1::RUNNING);
  // The new daemon knows from the record that the attempt was being preempted: SIGTERM again.
  ASSERT_TRUE(RunUntil([&] { return SignalCount(name, 1, SIGTERM) == 2; }));
  EXPECT_EQ(launcher_->LaunchCount(), 1u) << "no second copy beside the adopted worker";
  // The adopted worker stopped at step 6 (its exit status is unknowable).
  Emit(name, 1, 0, {{"type", "checkpoint"}, {"step", 6}, {"path", "/ck/step-6"}});
  Emit(name, 1, 0, {{"type", "preempted"}, {"step", 6}, {"checkpoint", "/ck/step-6"}});
  Emit(name, 1, 0, {{"type", "done"}, {"result", {{"interrupted", true}}}});
  Exit(name, 1, 0, -1, 0, /*adopted=*/true);
  StartNext(name, 1, 2);
  EXPECT_EQ(launcher_->Launch(1).resume_from, "/ck/step-6");
  EXPECT_EQ(AttemptOf(name, 1).failure_class(), fp8d::v1::PREEMPTED);
  FinishAttempt(name, 2, 1);
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED)) << "max_attempts 1: the preemption did not count";
  EXPECT_EQ(launcher_->LaunchCount(), 2u);
}

TEST_F(PreemptionTest, CrashDuringThePreemptionWithTheWorkerGoneRequeuesUncounted) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string name = CreateRunning(OneAttemptJob());
  Preempt(name, kReason);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
  launcher_->adopt_status = fp8::NotFoundError("pid 4000 is gone");
  CrashAndRestartManager();
  StartNext(name, 1, 2);
  FinishAttempt(name, 2, 1);
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED)) << "max_attempts 1: neither end counted";
  EXPECT_EQ(launcher_->LaunchCount(), 2u);
}

}  // namespace
}  // namespace fp8d::core::testing
