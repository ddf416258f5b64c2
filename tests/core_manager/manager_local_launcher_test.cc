// End to end through real processes: JobManager + LocalLauncher + fp8-test-worker, with the
// system clock. The worker crashes in attempt 1 after writing a checkpoint; the manager must
// retry after the backoff, resume attempt 2 from that checkpoint, and finish SUCCEEDED.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager.h"

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

  std::string CreateTrainJob(int64_t steps) {
    Job job;
    job.mutable_train()->mutable_training()->set_max_steps(steps);
    job.mutable_train()->set_output_dir(dir_ + "/out");
    *job.mutable_retry()->mutable_initial_backoff() = DurationFromMs(100);
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
  }

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
