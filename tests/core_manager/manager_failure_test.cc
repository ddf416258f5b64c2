// SPDX-License-Identifier: Apache-2.0
// JobManager failure paths: crash → RETRY_WAIT with backoff → resumed from the checkpoint →
// FAILED when attempts are used up; permanent exits; HUNG by heartbeat and by progress;
// attempt deadline; NUMERIC; launch failure; garbage lines.
#include <csignal>

#include "daemon/core/job_fields.h"
#include "tests/core_manager/manager_harness.h"

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;

TEST_F(ManagerTest, CrashRetriesAfterBackoffFromCheckpointThenFails) {
  StartManager();
  Job spec = TrainJob();
  spec.mutable_retry()->set_max_attempts(2);
  const std::string name = CreateRunning(spec);
  Emit(name, 1, 0, {{"type", "checkpoint"}, {"step", 10}, {"path", "/ck/step-10"}, {"checksum", "c10"}});
  Exit(name, 1, 0, -1, SIGKILL);
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  Job waiting = *Get(name);
  EXPECT_EQ(waiting.error().failure_class(), fp8d::v1::WORKER_CRASH);
  EXPECT_EQ(waiting.attempt(), 1);
  EXPECT_TRUE(launcher_->Signals().empty()) << "nothing left to signal: the only rank is gone";

  // Backoff: initial 1 s, no jitter. Not a millisecond early.
  clock_.Advance(999);
  RunFor(30);
  EXPECT_EQ(launcher_->LaunchCount(), 1u);
  EXPECT_EQ(StateOf(name), fp8d::v1::RETRY_WAIT);
  clock_.Advance(1);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  const launcher::LaunchRequest second = launcher_->Launch(1);
  EXPECT_EQ(second.attempt, 2);
  EXPECT_EQ(second.resume_from, "/ck/step-10");
  EXPECT_EQ(second.attempt_dir, data_dir_ + "/jobs/" + JobIdOf(name) + "/attempt-2");

  Emit(name, 2, 0, {{"type", "started"}});
  ASSERT_TRUE(WaitState(name, fp8d::v1::RUNNING));
  Exit(name, 2, 0, 1);
  ASSERT_TRUE(WaitState(name, fp8d::v1::FAILED));
  Job failed = *Get(name, /*full=*/true);
  EXPECT_EQ(failed.error().failure_class(), fp8d::v1::WORKER_CRASH);
  EXPECT_EQ(failed.error().code(), 13);
  EXPECT_NE(failed.error().message().find("exited with code 1"), std::string::npos)
      << failed.error().message();
  ASSERT_EQ(failed.attempts_size(), 2);
  EXPECT_EQ(failed.attempts(0).failure_class(), fp8d::v1::WORKER_CRASH);
  EXPECT_EQ(failed.attempts(0).ranks(0).exit_status(), 128 + SIGKILL);
  EXPECT_EQ(failed.attempts(1).resumed_from(), "/ck/step-10");
  EXPECT_EQ(failed.attempts(1).ranks(0).exit_status(), 1);
  RunFor(20);
  EXPECT_EQ(launcher_->LaunchCount(), 2u);
}

TEST_F(ManagerTest, BackoffGrowsWithEachAttempt) {
  StartManager();
  Job spec = TrainJob();
  spec.mutable_retry()->set_max_attempts(3);
  const std::string name = CreateRunning(spec);
  Exit(name, 1, 0, 70);  // internal error: retryable
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  EXPECT_EQ(Get(name)->error().failure_class(), fp8d::v1::INTERNAL_ERROR);
  clock_.Advance(1000);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  Exit(name, 2, 0, 75);
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  clock_.Advance(1999);  // second backoff is 2 s
  RunFor(30);
  EXPECT_EQ(launcher_->LaunchCount(), 2u);
  clock_.Advance(1);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 3; }));
}

TEST_F(ManagerTest, PermanentExitFailsWithoutRetry) {
  StartManager();
  const std::string a = CreateRunning(TrainJob());
  Emit(a, 1, 0, {{"type", "error"}, {"class", "INVALID_SPEC"}, {"message", "training.max_steps: must be > 0"}});
  Exit(a, 1, 0, 64);
  ASSERT_TRUE(WaitState(a, fp8d::v1::FAILED));
  Job job = *Get(a);
  EXPECT_EQ(job.error().failure_class(), fp8d::v1::INVALID_SPEC);
  EXPECT_EQ(job.error().code(), 3);
  EXPECT_NE(job.error().message().find("max_steps"), std::string::npos) << job.error().message();

  // Exit 65 without an error line: classified from the exit code alone.
  const std::string b = CreateRunning(TrainJob());
  Exit(b, 1, 0, 65);
  ASSERT_TRUE(WaitState(b, fp8d::v1::FAILED));
  EXPECT_EQ(Get(b)->error().failure_class(), fp8d::v1::DATA_ERROR);
  clock_.Advance(120'000);
  RunFor(30);
  EXPECT_EQ(launcher_->LaunchCount(), 2u) << "no retries of permanent failures";
}

TEST_F(ManagerTest, ExitZeroWithoutDoneIsACrash) {
  StartManager();
  Job spec = TrainJob();
  spec.mutable_retry()->set_max_attempts(1);
  const std::string name = CreateRunning(spec);
  Exit(name, 1, 0, 0);
  ASSERT_TRUE(WaitState(name, fp8d::v1::FAILED));
  EXPECT_EQ(Get(name)->error().failure_class(), fp8d::v1::WORKER_CRASH);
}

TEST_F(ManagerTest, MissingHeartbeatIsHungAndTheGroupIsKilled) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  clock_.Advance(30'000);  // exactly the timeout: not yet
  RunFor(30);
  EXPECT_EQ(StateOf(name), fp8d::v1::RUNNING);
  clock_.Advance(1);
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  Job job = *Get(name);
  EXPECT_EQ(job.error().failure_class(), fp8d::v1::HUNG);
  EXPECT_NE(job.error().message().find("heartbeat"), std::string::npos) << job.error().message();
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
  EXPECT_FALSE(HasSignal(name, 1, SIGKILL));

  // A wedged worker ignores SIGTERM: SIGKILL after the grace period (5 s here).
  clock_.Advance(4'999);
  RunFor(30);
  EXPECT_FALSE(HasSignal(name, 1, SIGKILL));
  clock_.Advance(1);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGKILL); }));
  // The backoff (1 s) is over, but the next attempt waits until the old one has exited.
  EXPECT_EQ(launcher_->LaunchCount(), 1u);
  Exit(name, 1, 0, -1, SIGKILL);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  EXPECT_EQ(launcher_->Launch(1).attempt, 2);
}

TEST_F(ManagerTest, NoProgressWithinProgressTimeoutIsHung) {
  StartManager();
  Job spec = TrainJob();
  *spec.mutable_timeouts()->mutable_progress_timeout() = DurationFromMs(10'000);
  const std::string name = CreateRunning(spec);
  clock_.Advance(6'000);
  Emit(name, 1, 0, {{"type", "progress"}, {"step", 1}, {"total_steps", 10}});
  // Events are handled when io runs, at the clock's time then: let it, before time moves.
  ASSERT_TRUE(RunUntil([&] { return Get(name)->progress().step() == 1; }));
  clock_.Advance(6'000);
  Emit(name, 1, 0, {{"type", "heartbeat"}});
  RunFor(30);
  EXPECT_EQ(StateOf(name), fp8d::v1::RUNNING);
  clock_.Advance(4'000);  // 10 s since the last progress, heartbeats still coming
  Emit(name, 1, 0, {{"type", "heartbeat"}});
  RunFor(30);
  EXPECT_EQ(StateOf(name), fp8d::v1::RUNNING);
  clock_.Advance(1);
  Emit(name, 1, 0, {{"type", "heartbeat"}});
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  Job job = *Get(name);
  EXPECT_EQ(job.error().failure_class(), fp8d::v1::HUNG);
  EXPECT_NE(job.error().message().find("no progress"), std::string::npos) << job.error().message();
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
}

TEST_F(ManagerTest, RankThatNeverStartsIsHungAfterProgressTimeout) {
  StartManager();
  Job spec = TrainJob();
  *spec.mutable_timeouts()->mutable_heartbeat_timeout() = DurationFromMs(1'000'000);
  *spec.mutable_timeouts()->mutable_progress_timeout() = DurationFromMs(20'000);
  auto created = Create(spec);
  ASSERT_TRUE(created.ok());
  const std::string name = created->name();
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 1; }));
  ASSERT_TRUE(WaitState(name, fp8d::v1::STARTING));
  // The launch completes on the launcher thread and is posted back: the timeout counts from
  // then, so wait until the manager has recorded the pid before moving the clock.
  ASSERT_TRUE(RunUntil([&] {
    auto job = Get(name, /*full=*/true);
    return job.ok() && job->attempts_size() == 1 && job->attempts(0).ranks_size() == 1 &&
           job->attempts(0).ranks(0).pid() != 0;
  }));
  clock_.Advance(20'000);
  RunFor(30);
  EXPECT_EQ(StateOf(name), fp8d::v1::STARTING);
  clock_.Advance(1);
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  EXPECT_EQ(Get(name)->error().failure_class(), fp8d::v1::HUNG);
  EXPECT_NE(Get(name)->error().message().find("started"), std::string::npos);
}

TEST_F(ManagerTest, AttemptDeadlineExceeded) {
  StartManager();
  Job spec = TrainJob();
  *spec.mutable_timeouts()->mutable_attempt_deadline() = DurationFromMs(5'000);
  spec.mutable_retry()->set_max_attempts(1);
  const std::string name = CreateRunning(spec);
  clock_.Advance(5'001);
  ASSERT_TRUE(WaitState(name, fp8d::v1::FAILED));
  Job job = *Get(name);
  EXPECT_EQ(job.error().failure_class(), fp8d::v1::DEADLINE_EXCEEDED);
  EXPECT_EQ(job.error().code(), 4);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
}

TEST_F(ManagerTest, NumericRetriesFromAnEarlierCheckpoint) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  Emit(name, 1, 0, {{"type", "checkpoint"}, {"step", 10}, {"path", "/ck/step-10"}});
  Emit(name, 1, 0, {{"type", "checkpoint"}, {"step", 20}, {"path", "/ck/step-20"}});
  Emit(name, 1, 0, {{"type", "progress"}, {"step", 25}, {"loss", nullptr}});
  Emit(name, 1, 0, {{"type", "error"}, {"class", "NUMERIC"}, {"message", "loss is NaN at step 25"}});
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  EXPECT_EQ(Get(name)->error().failure_class(), fp8d::v1::NUMERIC);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
  Exit(name, 1, 0, 75);
  clock_.Advance(1'000);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  EXPECT_EQ(launcher_->Launch(1).resume_from, "/ck/step-10");
  EXPECT_EQ(Get(name)->checkpoint().path(), "/ck/step-20") << "the newest is still reported";
}

TEST_F(ManagerTest, LaunchFailureFailsTheAttempt) {
  launcher_->launch_status = fp8::NotFoundError("fp8-worker: no such file");
  StartManager();
  Job spec = TrainJob();
  spec.mutable_retry()->set_max_attempts(1);
  auto created = Create(spec);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(WaitState(created->name(), fp8d::v1::FAILED));
  Job job = *Get(created->name());
  EXPECT_EQ(job.error().failure_class(), fp8d::v1::INTERNAL_ERROR);
  EXPECT_NE(job.error().message().find("no such file"), std::string::npos) << job.error().message();
}

TEST_F(ManagerTest, GarbageLinesAreNotFatal) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  EmitGarbage(name, 1, 0, "Segmentation fault? no, just a print()");
  Emit(name, 1, 0, {{"type", "progress"}, {"step", 2}});
  ASSERT_TRUE(RunUntil([&] { return Get(name)->progress().step() == 2; }));
  EXPECT_EQ(StateOf(name), fp8d::v1::RUNNING);
  FinishAttempt(name, 1, 1);
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED));
}

TEST_F(ManagerTest, OneRankFailingStopsTheWholeGang) {
  StartManager();
  const std::string name = CreateRunning(TrainJob(2));
  Exit(name, 1, 1, -1, SIGSEGV);
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));
  EXPECT_NE(Get(name)->error().message().find("rank 1"), std::string::npos);
  Emit(name, 1, 0, {{"type", "done"}, {"result", {{"interrupted", true}}}});
  Exit(name, 1, 0, 75);
  clock_.Advance(1'000);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  EXPECT_EQ(launcher_->Launch(1).slots.size(), 2u);
}

}  // namespace
}  // namespace fp8d::core::testing
