// SPDX-License-Identifier: Apache-2.0
// JobManager: cancellation (queued, running with SIGTERM → SIGKILL, finished jobs) and
// start-up recovery (re-adopting live workers; requeueing, uncounted, when they are gone).
#include <csignal>
#include <optional>

#include <boost/asio/post.hpp>

#include "daemon/core/job_fields.h"
#include "daemon/core/new_job.h"
#include "tests/core_manager/manager_harness.h"

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;

TEST_F(ManagerTest, CancelQueuedJobIsImmediateAndIdempotent) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string running = CreateRunning(TrainJob());
  auto queued = Create(TrainJob());
  ASSERT_TRUE(queued.ok());
  RunFor(20);
  ASSERT_EQ(StateOf(queued->name()), fp8d::v1::QUEUED);
  auto cancelled = Cancel(queued->name());
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->state(), fp8d::v1::CANCELLED);
  auto again = Cancel(queued->name());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->state(), fp8d::v1::CANCELLED);
  // It never runs, even when the slot frees up.
  FinishAttempt(running, 1, 1);
  ASSERT_TRUE(WaitState(running, fp8d::v1::SUCCEEDED));
  RunFor(20);
  EXPECT_EQ(launcher_->LaunchCount(), 1u);
}

TEST_F(ManagerTest, CancelRunningJobTermsThenKillsThenCancels) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  auto next = Create(TrainJob());
  ASSERT_TRUE(next.ok());
  auto rec = WatchJob(name);

  auto cancelling = Cancel(name);
  ASSERT_TRUE(cancelling.ok()) << cancelling.status().ToString();
  EXPECT_EQ(cancelling->state(), fp8d::v1::CANCELLING);
  EXPECT_TRUE(HasSignal(name, 1, SIGTERM));
  EXPECT_FALSE(HasSignal(name, 1, SIGKILL));
  auto twice = Cancel(name);
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->state(), fp8d::v1::CANCELLING);

  clock_.Advance(4'999);
  RunFor(30);
  EXPECT_FALSE(HasSignal(name, 1, SIGKILL));
  // Heartbeats stop while it dies: no HUNG verdict for a job being cancelled.
  clock_.Advance(40'000);
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGKILL); }));
  EXPECT_EQ(StateOf(name), fp8d::v1::CANCELLING);
  EXPECT_EQ(launcher_->LaunchCount(), 1u) << "the slot is held until the rank exits";
  Exit(name, 1, 0, -1, SIGKILL);
  ASSERT_TRUE(WaitState(name, fp8d::v1::CANCELLED));
  ASSERT_TRUE(RunUntil([&] { return rec->ended; }));
  EXPECT_EQ(rec->updates.back().state(), fp8d::v1::CANCELLED);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  EXPECT_EQ(launcher_->Launch(1).job_id, JobIdOf(next->name()));
  EXPECT_EQ(Cancel(name)->state(), fp8d::v1::CANCELLED);
}

TEST_F(ManagerTest, CancelBeforeTheWorkersStartLaunchesNothing) {
  StartManager();
  // The create's answer runs in the handler that then places the job (STARTING in memory, its
  // write queued). A cancel posted from the answer runs before that write's completion, which
  // is what would launch the workers.
  std::string name;
  std::optional<fp8::StatusOr<Job>> reply;
  fp8d::v1::CreateJobRequest create;
  *create.mutable_job() = TrainJob();
  manager_->CreateJob(create, [&](fp8::StatusOr<Job> created) {
    ASSERT_TRUE(created.ok());
    name = created->name();
    boost::asio::post(io_, [&] {
      fp8d::v1::CancelJobRequest request;
      request.set_name(name);
      manager_->CancelJob(request, [&](fp8::StatusOr<Job> r) { reply = std::move(r); });
    });
  });
  ASSERT_TRUE(RunUntil([&] { return reply.has_value(); }));
  ASSERT_TRUE(reply->ok()) << reply->status().ToString();
  EXPECT_TRUE((*reply)->state() == fp8d::v1::CANCELLING || (*reply)->state() == fp8d::v1::CANCELLED);
  ASSERT_TRUE(WaitState(name, fp8d::v1::CANCELLED));
  RunFor(20);
  EXPECT_EQ(launcher_->LaunchCount(), 0u);
  Job full = *Get(name, /*full=*/true);
  std::vector<fp8d::v1::JobState> to;
  for (const auto& ev : full.events()) to.push_back(ev.to_state());
  ASSERT_GE(to.size(), 3u);
  EXPECT_EQ(std::vector<fp8d::v1::JobState>(to.end() - 3, to.end()),
            (std::vector<fp8d::v1::JobState>{fp8d::v1::STARTING, fp8d::v1::CANCELLING,
                                             fp8d::v1::CANCELLED}));
}

TEST_F(ManagerTest, CancelFinishedJobIsFailedPrecondition) {
  StartManager();
  const std::string failed = CreateRunning(TrainJob());
  Exit(failed, 1, 0, 64);
  ASSERT_TRUE(WaitState(failed, fp8d::v1::FAILED));
  EXPECT_EQ(Cancel(failed).status().code(), fp8::StatusCode::kFailedPrecondition);

  const std::string ok = CreateRunning(TrainJob());
  FinishAttempt(ok, 1, 1);
  ASSERT_TRUE(WaitState(ok, fp8d::v1::SUCCEEDED));
  EXPECT_EQ(Cancel(ok).status().code(), fp8::StatusCode::kFailedPrecondition);

  EXPECT_EQ(Cancel("jobs/nope").status().code(), fp8::StatusCode::kNotFound);
}

TEST_F(ManagerTest, CancelDuringRetryWaitIsImmediate) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  Exit(name, 1, 0, -1, SIGKILL);
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  auto cancelled = Cancel(name);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), fp8d::v1::CANCELLED);
  clock_.Advance(10'000);
  RunFor(30);
  EXPECT_EQ(launcher_->LaunchCount(), 1u);
}

TEST_F(ManagerTest, RecoveryReadoptsLiveWorkersAndKeepsSupervising) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  Emit(name, 1, 0, {{"type", "heartbeat"}});
  Emit(name, 1, 0, {{"type", "progress"}, {"step", 3}, {"total_steps", 10}});
  ASSERT_TRUE(RunUntil([&] { return Get(name)->progress().step() == 3; }));
  const int64_t offset = Offset(name, 1, 0);

  RestartManager();  // adopt_status OK: the workers survived
  ASSERT_EQ(launcher_->AdoptCount(), 1u);
  {
    std::lock_guard<std::mutex> lock(launcher_->mu);
    const auto& adopt = launcher_->adopts[0];
    EXPECT_EQ(adopt.job_id, JobIdOf(name));
    EXPECT_EQ(adopt.attempt, 1);
    EXPECT_EQ(adopt.attempt_dir, data_dir_ + "/jobs/" + JobIdOf(name) + "/attempt-1");
    ASSERT_EQ(adopt.ranks.size(), 1u);
    EXPECT_EQ(adopt.ranks[0].handle, "fake:4000") << "the launcher's handle, passed through as is";
    EXPECT_EQ(adopt.ranks[0].events_offset, offset) << "reads on where the old daemon stopped";
  }
  EXPECT_EQ(StateOf(name), fp8d::v1::RUNNING);
  EXPECT_EQ(Get(name)->progress().step(), 3) << "progress survived the restart";
  EXPECT_EQ(launcher_->LaunchCount(), 1u);

  // Supervision continues: the adopted worker finishes (exit status unknowable: the done
  // line decides).
  Emit(name, 1, 0, {{"type", "done"}, {"result", {{"final_loss", 0.5}}}});
  Exit(name, 1, 0, -1, 0, /*adopted=*/true);
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED));
  EXPECT_DOUBLE_EQ(Get(name)->result().fields().at("final_loss").number_value(), 0.5);
}

TEST_F(ManagerTest, AdoptedWorkerInterruptedBySigtermIsNotASuccess) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  RestartManager();
  // SIGTERM reached the worker while no daemon watched: it checkpointed, reported an
  // interrupted `done` and exited 75, which an adopted exit cannot show. The events decide.
  Emit(name, 1, 0, {{"type", "done"}, {"result", {{"interrupted", true}}}});
  Exit(name, 1, 0, -1, 0, /*adopted=*/true);
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  EXPECT_EQ(Get(name)->error().failure_class(), fp8d::v1::WORKER_CRASH);
}

TEST_F(ManagerTest, ProgressIsWrittenInBatchesAndSurvivesACrash) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  auto rec = WatchJob(name);
  ASSERT_TRUE(RunUntil([&] { return !rec->updates.empty(); }));
  for (int step = 1; step <= 5; ++step) Emit(name, 1, 0, {{"type", "progress"}, {"step", step}});
  // Watchers get every step at once; the store gets them at most every 200 ms per job.
  ASSERT_TRUE(RunUntil([&] { return rec->updates.back().progress().step() == 5; }));
  RunFor(30);
  EXPECT_EQ(update_jobs_calls_->load(), 0);
  clock_.Advance(200);
  ASSERT_TRUE(RunUntil([&] { return update_jobs_calls_->load() == 1; }));
  RunFor(30);
  EXPECT_EQ(update_jobs_calls_->load(), 1) << "nothing new: no second write";

  CrashAndRestartManager();  // no Shutdown: only what was written survives
  ASSERT_EQ(launcher_->AdoptCount(), 1u);
  EXPECT_EQ(StateOf(name), fp8d::v1::RUNNING);
  EXPECT_EQ(Get(name)->progress().step(), 5);
}

TEST_F(ManagerTest, RecoveredWorkerThatStillHangsIsDetected) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  RestartManager();
  clock_.Advance(30'001);
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  EXPECT_EQ(Get(name)->error().failure_class(), fp8d::v1::HUNG);
}

TEST_F(ManagerTest, RecoveryRequeuesWhenWorkersAreGoneWithoutCountingTheAttempt) {
  StartManager();
  Job spec = TrainJob();
  spec.mutable_retry()->set_max_attempts(1);
  const std::string name = CreateRunning(spec);
  Emit(name, 1, 0, {{"type", "checkpoint"}, {"step", 4}, {"path", "/ck/step-4"}});
  ASSERT_TRUE(RunUntil([&] { return Get(name)->checkpoint().step() == 4; }));

  launcher_->adopt_status = fp8::NotFoundError("pid 4000 is gone");
  RestartManager();
  // max_attempts is 1, yet the job runs again: the lost attempt does not count.
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  const launcher::LaunchRequest second = launcher_->Launch(1);
  EXPECT_EQ(second.attempt, 2);
  EXPECT_EQ(second.resume_from, "/ck/step-4");
  Job full = *Get(name, /*full=*/true);
  ASSERT_EQ(full.attempts_size(), 2);
  EXPECT_EQ(full.attempts(0).failure_class(), fp8d::v1::CONTROLLER_RESTART);
  bool saw_retry_wait = false;
  for (const auto& ev : full.events()) {
    if (ev.from_state() == fp8d::v1::RUNNING && ev.to_state() == fp8d::v1::RETRY_WAIT)
      saw_retry_wait = true;
  }
  EXPECT_TRUE(saw_retry_wait);

  // The second attempt is the first counted one: its crash uses the single attempt up.
  Emit(name, 2, 0, {{"type", "started"}});
  ASSERT_TRUE(WaitState(name, fp8d::v1::RUNNING));
  Exit(name, 2, 0, -1, SIGKILL);
  ASSERT_TRUE(WaitState(name, fp8d::v1::FAILED));
  EXPECT_EQ(Get(name)->error().failure_class(), fp8d::v1::WORKER_CRASH);
}

TEST_F(ManagerTest, RecoveryFinishesStoppingWorkersOfAFailedAttempt) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  clock_.Advance(30'001);  // HUNG: SIGTERM sent, the wedged worker does not exit
  ASSERT_TRUE(WaitState(name, fp8d::v1::RETRY_WAIT));
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGTERM); }));

  CrashAndRestartManager();  // the SIGKILL that was due is lost with the old daemon
  ASSERT_EQ(launcher_->AdoptCount(), 1u);
  size_t terms = 0;
  for (const auto& s : launcher_->Signals()) terms += s.sig == SIGTERM;
  EXPECT_EQ(terms, 2u);
  clock_.Advance(5'000);  // grace over, backoff over
  ASSERT_TRUE(RunUntil([&] { return HasSignal(name, 1, SIGKILL); }));
  RunFor(30);
  EXPECT_EQ(launcher_->LaunchCount(), 1u) << "no new attempt beside the old workers";
  Exit(name, 1, 0, -1, 0, /*adopted=*/true);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  EXPECT_EQ(launcher_->Launch(1).attempt, 2);
  Job full = *Get(name, /*full=*/true);
  ASSERT_GE(full.attempts_size(), 1);
  EXPECT_TRUE(full.attempts(0).has_end_time());
  EXPECT_EQ(full.attempts(0).failure_class(), fp8d::v1::HUNG);
}

TEST_F(ManagerTest, RecoveryFinishesACancelWhoseWorkersAreGone) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  ASSERT_EQ(Cancel(name)->state(), fp8d::v1::CANCELLING);
  launcher_->adopt_status = fp8::NotFoundError("gone");
  RestartManager();
  ASSERT_TRUE(WaitState(name, fp8d::v1::CANCELLED));
}

TEST_F(ManagerTest, RecoveryKeepsCancellingAnAdoptedJob) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  ASSERT_EQ(Cancel(name)->state(), fp8d::v1::CANCELLING);
  RestartManager();
  EXPECT_EQ(StateOf(name), fp8d::v1::CANCELLING);
  size_t terms = 0;
  for (const auto& s : launcher_->Signals()) terms += s.sig == SIGTERM;
  EXPECT_EQ(terms, 2u) << "SIGTERM again after the restart";
  Exit(name, 1, 0, -1, 0, /*adopted=*/true);
  ASSERT_TRUE(WaitState(name, fp8d::v1::CANCELLED));
}

TEST_F(ManagerTest, RecoveryRequeuedJobKeepsItsPlaceInTheQueue) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string running = CreateRunning(TrainJob());
  auto queued = Create(TrainJob());
  ASSERT_TRUE(queued.ok());
  launcher_->adopt_status = fp8::NotFoundError("gone");
  RestartManager();
  // The running job's workers are gone: both jobs need the one slot again, FIFO.
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  EXPECT_EQ(launcher_->Launch(1).job_id, JobIdOf(running));
  EXPECT_EQ(StateOf(queued->name()), fp8d::v1::QUEUED);
}

TEST_F(ManagerTest, RecoveryOfADeepQueueCachesEveryJobInCreationOrder) {
  // More jobs than one recovery chunk (4096 are handed from the store thread to io at a time):
  // every chunk must arrive whole and in order.
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  std::vector<store::CreateRequest> requests;
  for (int i = 0; i < 9000; ++i) {
    store::CreateRequest r;
    r.job = TrainJob();
    ASSERT_TRUE(PrepareNewJob(&r.job, data_dir_, 1764600000000).ok());
    requests.push_back(std::move(r));
  }
  auto created = store_->CreateJobs(std::move(requests));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  StartManager();
  // FIFO across the whole queue: the oldest job gets the one slot.
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 1; }));
  EXPECT_EQ(launcher_->Launch(0).job_id, JobIdOf((*created)[0].job.name()));
  // Cancelling a queued job is immediate only for a job in the manager's cache (otherwise it
  // answers UNAVAILABLE "being recovered"): the jobs on both sides of each chunk boundary and
  // the last one are there.
  for (size_t i : {size_t{1}, size_t{4095}, size_t{4096}, size_t{8191}, size_t{8192}, size_t{8999}}) {
    auto cancelled = Cancel((*created)[i].job.name());
    ASSERT_TRUE(cancelled.ok()) << i << ": " << cancelled.status().ToString();
    EXPECT_EQ(cancelled->state(), fp8d::v1::CANCELLED) << i;
  }
  EXPECT_EQ(StateOf((*created)[2].job.name()), fp8d::v1::QUEUED);
}

}  // namespace
}  // namespace fp8d::core::testing
