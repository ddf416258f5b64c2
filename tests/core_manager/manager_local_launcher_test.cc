// SPDX-License-Identifier: Apache-2.0
// End to end through real processes: JobManager + LocalLauncher + fp8-test-worker, with the
// system clock. The worker crashes in attempt 1 after writing a checkpoint; the manager must
// retry after the backoff, resume attempt 2 from that checkpoint, and finish SUCCEEDED. A
// preempted worker checkpoints on SIGTERM and the next attempt resumes from exactly there; one
// that ignores SIGTERM is killed after the grace and resumes from its periodic checkpoint.
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager.h"
#include "tests/core_manager/manager_harness.h"

namespace fp8d::core {
namespace {

using fp8d::v1::Job;

class ManagerLocalLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef FP8_TEST_WORKER
    GTEST_SKIP() << "fp8-test-worker is not built";
#else
    std::string tmpl = (std::filesystem::temp_directory_path() / "fp8d-manager-e2e-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
#endif
  }
  void TearDown() override {
    manager_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  bool RunUntil(const std::function<bool()>& pred, int timeout_ms = 60000) {
    const auto limit = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > limit) return false;
      io_.restart();
      io_.run_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  fp8::StatusOr<Job> Get(const std::string& name, bool full) {
    fp8d::v1::GetJobRequest request;
    request.set_name(name);
    request.set_view(full ? fp8d::v1::JOB_VIEW_FULL : fp8d::v1::JOB_VIEW_BASIC);
    std::optional<fp8::StatusOr<Job>> out;
    manager_->GetJob(request, [&](fp8::StatusOr<Job> r) { out = std::move(r); });
    if (!RunUntil([&] { return out.has_value(); })) return fp8::InternalError("timeout");
    return std::move(*out);
  }

  void StartManager(std::unique_ptr<store::JobStore> store) {
    ManagerOptions options;
    options.data_dir = dir_ + "/data";
    options.worker_argv_prefix = {worker_};
    options.cancel_grace_ms = 2000;
    options.preemption_grace_ms = preemption_grace_ms_;
    options.tick_ms = 20;
    manager_ = NewJobManager(
        io_, options, std::move(store),
        [](launcher::LauncherListener* listener) {
          launcher::LocalLauncherOptions a;
          a.node_name = "local";
          a.cpu_slots = 2;
          a.detect_gpus = false;
          return launcher::NewLocalLauncher(a, listener);
        },
        &clock_);
    std::optional<fp8::Status> started;
    manager_->Start([&](fp8::Status st) { started = st; });
    ASSERT_TRUE(RunUntil([&] { return started.has_value(); }));
    ASSERT_TRUE(started->ok()) << started->ToString();
  }

  void StopManager() {
    bool down = false;
    manager_->Shutdown([&] { down = true; });
    ASSERT_TRUE(RunUntil([&] { return down; }));
    manager_.reset();
  }

  std::string CreateTrainJob(int64_t steps, int max_attempts = 0) {
    Job job;
    job.mutable_train()->mutable_training()->set_max_steps(steps);
    job.mutable_train()->set_output_dir(dir_ + "/out");
    *job.mutable_retry()->mutable_initial_backoff() = DurationFromMs(100);
    job.mutable_retry()->set_max_attempts(max_attempts);
    fp8d::v1::CreateJobRequest request;
    *request.mutable_job() = job;
    std::optional<fp8::StatusOr<Job>> created;
    manager_->CreateJob(request, [&](fp8::StatusOr<Job> r) { created = std::move(r); });
    EXPECT_TRUE(RunUntil([&] { return created.has_value(); }));
    EXPECT_TRUE(created->ok()) << created->status().ToString();
    return created->ok() ? (*created)->name() : "";
  }

  // The worker reads its fault plan from the environment it inherits from the daemon.
  static void SetWorkerEnv(const char* mode, int steps, int step_ms, int save_steps) {
    setenv("FP8_TEST_MODE", mode, 1);
    setenv("FP8_TEST_STEPS", std::to_string(steps).c_str(), 1);
    setenv("FP8_TEST_STEP_MS", std::to_string(step_ms).c_str(), 1);
    setenv("FP8_TEST_SAVE_STEPS", std::to_string(save_steps).c_str(), 1);
    setenv("FP8_TEST_HEARTBEAT_MS", "100", 1);
    unsetenv("FP8_TEST_CRASH_STEP");
    unsetenv("FP8_TEST_CRASH_ONLY_ATTEMPT");
    unsetenv("FP8_TEST_STEP_LOG");
  }

  // <output_dir>/steps.log (FP8_TEST_STEP_LOG): attempt → the steps it ran, in order.
  std::map<int, std::vector<int>> StepsByAttempt() const {
    std::map<int, std::vector<int>> out;
    std::ifstream in(dir_ + "/out/steps.log");
    int attempt = 0, rank = 0, step = 0;
    long pid = 0;
    while (in >> attempt >> rank >> step >> pid) out[attempt].push_back(step);
    return out;
  }

  // Runs until the job's rank 0 reported `step` (or more), then preempts it.
  void PreemptAtStep(const std::string& name, int64_t step) {
    ASSERT_TRUE(RunUntil([&] {
      auto j = Get(name, false);
      return j.ok() && j->state() == fp8d::v1::RUNNING && j->progress().step() >= step;
    }));
    testing::ManagerTest::PreemptIn(*manager_, name, "preempted by jobs/urgent");
  }

  fp8::StatusOr<Job> WaitFinished(const std::string& name) {
    if (!RunUntil([&] {
          auto j = Get(name, false);
          return j.ok() && IsTerminal(j->state());
        })) {
      return fp8::InternalError("job did not finish");
    }
    return Get(name, true);
  }

  int64_t preemption_grace_ms_ = 10000;

  boost::asio::io_context io_;
  SystemClock clock_;
#ifdef FP8_TEST_WORKER
  std::string worker_ = FP8_TEST_WORKER;
#else
  std::string worker_;
#endif
  std::string dir_;
  std::unique_ptr<JobManager> manager_;
};

TEST_F(ManagerLocalLauncherTest, CrashRetryResumeSucceedWithRealWorkers) {
#ifdef FP8_TEST_WORKER
  SetWorkerEnv("crash_at_step", 6, 20, 2);
  setenv("FP8_TEST_CRASH_STEP", "4", 1);
  setenv("FP8_TEST_CRASH_ONLY_ATTEMPT", "1", 1);
  StartManager(store::NewMemoryJobStore());
  const std::string name = CreateTrainJob(6);

  ASSERT_TRUE(RunUntil([&] {
    auto j = Get(name, false);
    return j.ok() && IsTerminal(j->state());
  })) << "job did not finish";
  auto full = Get(name, true);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->state(), fp8d::v1::SUCCEEDED) << full->error().message();
  ASSERT_EQ(full->attempts_size(), 2);
  EXPECT_EQ(full->attempts(0).failure_class(), fp8d::v1::WORKER_CRASH);
  EXPECT_EQ(full->attempts(1).resumed_from(), dir_ + "/out/checkpoints/step-2");
  EXPECT_GE(full->checkpoint().step(), 2);
  EXPECT_EQ(full->progress().step(), 6);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/data/jobs/" + JobIdOf(name) + "/attempt-2/rank-0.log"));

  StopManager();
#endif
}

// The daemon restarts while a worker runs: the new manager (on the same SQLite file) re-adopts
// the worker from the saved pid and event offset, and the job finishes in its first attempt.
TEST_F(ManagerLocalLauncherTest, RestartReadoptsRunningWorkerFromSqlite) {
#ifdef FP8_TEST_WORKER
  SetWorkerEnv("succeed", 40, 50, 10);
  const std::string db = dir_ + "/fp8d.db";
  auto opened = store::OpenSqliteJobStore(db);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  StartManager(std::move(*opened));
  const std::string name = CreateTrainJob(40);
  ASSERT_TRUE(RunUntil([&] {
    auto j = Get(name, false);
    return j.ok() && j->state() == fp8d::v1::RUNNING && j->progress().step() >= 3;
  }));
  StopManager();

  auto reopened = store::OpenSqliteJobStore(db);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  StartManager(std::move(*reopened));
  ASSERT_TRUE(RunUntil([&] {
    auto j = Get(name, false);
    return j.ok() && IsTerminal(j->state());
  })) << "job did not finish";
  auto full = Get(name, true);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->state(), fp8d::v1::SUCCEEDED) << full->error().message();
  EXPECT_EQ(full->attempts_size(), 1) << "re-adopted, not restarted";
  EXPECT_EQ(full->progress().step(), 40);
  EXPECT_EQ(full->result().fields().at("final_step").number_value(), 40);
  StopManager();
#endif
}

}  // namespace
}  // namespace fp8d::core

namespace fp8d::core {
namespace {

// Preempted mid-run: the worker stops at the step boundary, writes that step's checkpoint and
// exits 76; the job is requeued (attempt PREEMPTED, not counted: max_attempts is 1), resumes
// from that checkpoint and finishes, every step run exactly once.
TEST_F(ManagerLocalLauncherTest, PreemptedWorkerCheckpointsAndResumesWithNoStepRunTwice) {
#ifdef FP8_TEST_WORKER
  SetWorkerEnv("succeed", 40, 50, 1000);  // no periodic checkpoint: only SIGTERM writes one
  setenv("FP8_TEST_STEP_LOG", "1", 1);
  StartManager(store::NewMemoryJobStore());
  const std::string name = CreateTrainJob(40, /*max_attempts=*/1);
  PreemptAtStep(name, 13);
  auto full = WaitFinished(name);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->state(), fp8d::v1::SUCCEEDED) << full->error().message();
  ASSERT_EQ(full->attempts_size(), 2);
  EXPECT_EQ(full->attempts(0).failure_class(), fp8d::v1::PREEMPTED);
  EXPECT_EQ(full->attempts(0).ranks(0).exit_status(), 76);

  const auto steps = StepsByAttempt();
  ASSERT_EQ(steps.size(), 2u);
  const std::vector<int>& first = steps.at(1);
  const std::vector<int>& second = steps.at(2);
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(second.empty());
  const int stopped_at = first.back();
  EXPECT_GE(stopped_at, 13);
  EXPECT_EQ(full->attempts(1).resumed_from(), dir_ + "/out/checkpoints/step-" + std::to_string(stopped_at))
      << "resumed from the preemption's checkpoint";
  std::vector<int> all = first;
  all.insert(all.end(), second.begin(), second.end());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<int>(i + 1)) << "step run twice or skipped";
  EXPECT_EQ(all.size(), 40u);
  StopManager();
#endif
}

// A worker that ignores SIGTERM is SIGKILLed after the preemption grace; the next attempt
// resumes from its last periodic checkpoint (losing at most one save interval).
TEST_F(ManagerLocalLauncherTest, PreemptedWorkerIgnoringSigtermIsKilledAndResumesFromPeriodicCheckpoint) {
#ifdef FP8_TEST_WORKER
  SetWorkerEnv("ignore_sigterm", 40, 50, 10);
  setenv("FP8_TEST_STEP_LOG", "1", 1);
  preemption_grace_ms_ = 400;
  StartManager(store::NewMemoryJobStore());
  const std::string name = CreateTrainJob(40, /*max_attempts=*/1);
  PreemptAtStep(name, 13);
  auto full = WaitFinished(name);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->state(), fp8d::v1::SUCCEEDED) << full->error().message();
  ASSERT_EQ(full->attempts_size(), 2);
  EXPECT_EQ(full->attempts(0).failure_class(), fp8d::v1::PREEMPTED);
  EXPECT_EQ(full->attempts(0).ranks(0).exit_status(), 128 + SIGKILL);

  const auto steps = StepsByAttempt();
  ASSERT_EQ(steps.size(), 2u);
  const int reached = steps.at(1).back();
  const int periodic = reached / 10 * 10;
  ASSERT_GE(periodic, 10);
  EXPECT_EQ(full->attempts(1).resumed_from(), dir_ + "/out/checkpoints/step-" + std::to_string(periodic));
  EXPECT_EQ(steps.at(2).front(), periodic + 1);
  EXPECT_EQ(steps.at(2).back(), 40);
  StopManager();
#endif
}

}  // namespace
}  // namespace fp8d::core

namespace fp8d::core {
namespace {

// fp8d dies (no Shutdown) while a preempted worker that ignores SIGTERM still runs: the next
// fp8d, on the same SQLite file, reads the PREEMPTED intent from the attempt record, re-adopts
// the worker and stops it again (SIGKILL after the grace), then runs the job's next attempt
// from the periodic checkpoint. The two attempts never run at the same time, and the
// preemption is not counted (max_attempts 1).
TEST_F(ManagerLocalLauncherTest, CrashDuringAPreemptionFinishesTheJobWithoutRunningItTwice) {
#ifdef FP8_TEST_WORKER
  SetWorkerEnv("ignore_sigterm", 40, 50, 10);
  setenv("FP8_TEST_STEP_LOG", "1", 1);
  const std::string db = dir_ + "/fp8d.db";
  auto opened = store::OpenSqliteJobStore(db);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  StartManager(std::move(*opened));
  const std::string name = CreateTrainJob(40, /*max_attempts=*/1);
  PreemptAtStep(name, 13);
  ASSERT_TRUE(RunUntil([&] {  // the intent is durable: SIGTERM went out
    auto j = Get(name, true);
    return j.ok() && j->attempts_size() == 1 && j->attempts(0).failure_class() == fp8d::v1::PREEMPTED;
  }));
  RunUntil([] { return false; }, 200);
  manager_.reset();  // a crash: nothing more is written, the worker runs on

  preemption_grace_ms_ = 500;
  auto reopened = store::OpenSqliteJobStore(db);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  StartManager(std::move(*reopened));
  auto full = WaitFinished(name);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->state(), fp8d::v1::SUCCEEDED) << full->error().message();
  ASSERT_EQ(full->attempts_size(), 2);
  EXPECT_EQ(full->attempts(0).failure_class(), fp8d::v1::PREEMPTED);

  // steps.log in write order: every line of attempt 1 before the first of attempt 2.
  std::ifstream in(dir_ + "/out/steps.log");
  int attempt = 0, rank = 0, step = 0, last_attempt = 0;
  long pid = 0;
  int first_of_second = 0, last_of_first = 0;
  while (in >> attempt >> rank >> step >> pid) {
    EXPECT_GE(attempt, last_attempt) << "attempt 1 ran a step after attempt 2 had started";
    last_attempt = attempt;
    if (attempt == 1) last_of_first = step;
    if (attempt == 2 && first_of_second == 0) first_of_second = step;
  }
  ASSERT_GE(last_of_first, 13);
  EXPECT_EQ(first_of_second, last_of_first / 10 * 10 + 1) << "resumed from the last periodic checkpoint";
  EXPECT_EQ(step, 40);
  StopManager();
#endif
}

}  // namespace
}  // namespace fp8d::core
