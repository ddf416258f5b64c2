// SPDX-License-Identifier: Apache-2.0
// A store that refuses writes (a full disk): a state change is published and acted on only once
// its write has committed; the write is retried until it does; controller-side launch errors
// do not count as attempts.
#include <csignal>

#include "daemon/core/job_fields.h"
#include "tests/core_manager/manager_harness.h"

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;

bool Saw(const WatchRecord& watch, fp8d::v1::JobState state) {
  for (const Job& j : watch.updates) {
    if (j.state() == state) return true;
  }
  return false;
}

TEST_F(ManagerTest, AFailedTerminalWriteIsRetriedAndPublishedOnlyOnceItCommits) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  auto watch = WatchJob(name);
  ASSERT_TRUE(RunUntil([&] { return !watch->updates.empty(); }));

  *fail_writes_ = true;
  FinishAttempt(name, 1, 1);
  RunFor(500);  // several failed tries
  EXPECT_EQ(Get(name)->state(), fp8d::v1::RUNNING) << "GetJob answered a state never written";
  EXPECT_FALSE(Saw(*watch, fp8d::v1::SUCCEEDED)) << "a watcher saw a state never written";
  EXPECT_EQ(Cancel(name).status().code(), fp8::StatusCode::kUnavailable);

  *fail_writes_ = false;
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED));
  ASSERT_TRUE(RunUntil([&] { return Saw(*watch, fp8d::v1::SUCCEEDED); }));
  auto stored = store_->GetJob(name);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state(), fp8d::v1::SUCCEEDED);
  auto events = store_->ListEvents(name);
  ASSERT_TRUE(events.ok());
  int succeeded = 0;
  for (const auto& e : *events) succeeded += e.to_state() == fp8d::v1::SUCCEEDED;
  EXPECT_EQ(succeeded, 1) << "the retried write duplicated its event";
}

TEST_F(ManagerTest, TheLaunchWaitsForItsIntentToBeDurable) {
  StartManager();
  *fail_writes_ = true;
  auto created = Create(TrainJob());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  RunFor(500);
  EXPECT_EQ(launcher_->LaunchCount(), 0u) << "workers started before STARTING was written";
  EXPECT_EQ(Get(created->name())->state(), fp8d::v1::QUEUED);
  *fail_writes_ = false;
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 1; }));
  EXPECT_EQ(store_->GetJob(created->name())->state(), fp8d::v1::STARTING);
}

TEST_F(ManagerTest, AControllerSideLaunchErrorIsRetriedWithoutCountingAnAttempt) {
  StartManager();
  {
    std::lock_guard<std::mutex> lock(launcher_->mu);
    launcher_->launch_status = fp8::UnavailableError("writing spec.json.tmp: No space left on device");
  }
  Job spec = TrainJob();
  spec.mutable_retry()->set_max_attempts(1);
  auto created = Create(spec);
  ASSERT_TRUE(created.ok());
  const std::string name = created->name();
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT)) << "max_attempts 1, but this one must not count";
  {
    std::lock_guard<std::mutex> lock(launcher_->mu);
    launcher_->launch_status = fp8::OkStatus();
  }
  clock_.Advance(1000);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  Emit(name, 2, 0, {{"type", "started"}});
  ASSERT_TRUE(WaitState(name, fp8d::v1::RUNNING));
  FinishAttempt(name, 2, 1);
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED));
  Job job = *Get(name, /*full=*/true);
  ASSERT_EQ(job.attempts_size(), 2);
  EXPECT_TRUE(job.attempts(0).controller_fault());
  EXPECT_FALSE(job.attempts(1).controller_fault());
}

TEST_F(ManagerTest, ARankNeverStartedAfterARestartIsRetriedWithoutCountingAnAttempt) {
  StartManager();
  Job spec = TrainJob(2);
  spec.mutable_retry()->set_max_attempts(1);
  auto created = Create(spec);
  ASSERT_TRUE(created.ok());
  const std::string name = created->name();
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 1; }));
  Emit(name, 1, 0, {{"type", "started"}});
  // What recovery's adopt reports for a rank with neither a process nor an events file.
  launcher::WorkerExit never;
  never.job_id = JobIdOf(name);
  never.attempt = 1;
  never.rank = 1;
  never.adopted = true;
  never.never_started = true;
  launcher_->listener->OnWorkerExit(never);
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT)) << "max_attempts 1, but this one must not count";
  EXPECT_EQ(Get(name)->error().failure_class(), fp8d::v1::CONTROLLER_RESTART);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); })) << "rank 0 was left running";
  Exit(name, 1, 0, -1, SIGTERM);
  clock_.Advance(1000);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  Emit(name, 2, 0, {{"type", "started"}});
  Emit(name, 2, 1, {{"type", "started"}});
  ASSERT_TRUE(WaitState(name, fp8d::v1::RUNNING));
  FinishAttempt(name, 2, 2);
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED));
}

TEST_F(ManagerTest, OutOfMemoryAtTheSameStepTwiceIsPermanent) {
  StartManager();
  Job spec = TrainJob();
  spec.mutable_retry()->set_max_attempts(5);
  const std::string name = CreateRunning(spec);
  Emit(name, 1, 0, {{"type", "progress"}, {"step", 7}, {"total_steps", 10}});
  Emit(name, 1, 0, {{"type", "error"}, {"class", "RESOURCE_EXHAUSTED"}, {"message", "out of memory"}});
  Exit(name, 1, 0, 75);
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT)) << "the first out-of-memory is retried";
  clock_.Advance(1000);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  Emit(name, 2, 0, {{"type", "started"}});
  ASSERT_TRUE(WaitState(name, fp8d::v1::RUNNING));
  Emit(name, 2, 0, {{"type", "progress"}, {"step", 7}, {"total_steps", 10}});
  Emit(name, 2, 0, {{"type", "error"}, {"class", "RESOURCE_EXHAUSTED"}, {"message", "out of memory"}});
  Exit(name, 2, 0, 75);
  ASSERT_TRUE(WaitState(name, fp8d::v1::FAILED));
  Job job = *Get(name, /*full=*/true);
  EXPECT_EQ(job.error().failure_class(), fp8d::v1::RESOURCE_EXHAUSTED);
  ASSERT_EQ(job.attempts_size(), 2);
  EXPECT_EQ(job.attempts(1).failure_step(), 7);
}

TEST_F(ManagerTest, TotalsAboveTwoToTheFiftyThreeStayExact) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  const int64_t big = (int64_t{1} << 60) + 1;  // not representable as a double
  Emit(name, 1, 0, {{"type", "progress"}, {"step", big - 1}, {"total_steps", big}});
  ASSERT_TRUE(RunUntil([&] { return Get(name)->progress().total_steps() == big; }));
  EXPECT_EQ(Get(name)->progress().step(), big - 1);
}

}  // namespace
}  // namespace fp8d::core::testing
