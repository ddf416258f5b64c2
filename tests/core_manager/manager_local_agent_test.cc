// End to end through real processes: JobManager + LocalAgent + fp8-test-worker, with the
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

class ManagerLocalAgentTest : public ::testing::Test {
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

  boost::asio::io_context io_;
  SystemClock clock_;
  std::string dir_;
  std::unique_ptr<JobManager> manager_;
};

TEST_F(ManagerLocalAgentTest, CrashRetryResumeSucceedWithRealWorkers) {
#ifdef FP8_TEST_WORKER
  // The worker reads its fault plan from the environment it inherits from the daemon.
  setenv("FP8_TEST_MODE", "crash_at_step", 1);
  setenv("FP8_TEST_STEPS", "6", 1);
  setenv("FP8_TEST_STEP_MS", "20", 1);
  setenv("FP8_TEST_SAVE_STEPS", "2", 1);
  setenv("FP8_TEST_CRASH_STEP", "4", 1);
  setenv("FP8_TEST_CRASH_ONLY_ATTEMPT", "1", 1);
  setenv("FP8_TEST_HEARTBEAT_MS", "100", 1);

  ManagerOptions options;
  options.data_dir = dir_ + "/data";
  options.worker_argv_prefix = {FP8_TEST_WORKER};
  options.cancel_grace_ms = 2000;
  options.tick_ms = 20;
  manager_ = NewJobManager(
      io_, options, store::NewMemoryJobStore(),
      [](agent::AgentListener* listener) {
        agent::LocalAgentOptions a;
        a.node_name = "local";
        a.cpu_slots = 2;
        a.detect_gpus = false;
        return agent::NewLocalAgent(a, listener);
      },
      &clock_);
  std::optional<fp8::Status> started;
  manager_->Start([&](fp8::Status st) { started = st; });
  ASSERT_TRUE(RunUntil([&] { return started.has_value(); }));
  ASSERT_TRUE(started->ok()) << started->ToString();

  Job job;
  job.mutable_train()->mutable_training()->set_max_steps(6);
  job.mutable_train()->set_output_dir(dir_ + "/out");
  *job.mutable_retry()->mutable_initial_backoff() = DurationFromMs(100);
  fp8d::v1::CreateJobRequest request;
  *request.mutable_job() = job;
  std::optional<fp8::StatusOr<Job>> created;
  manager_->CreateJob(request, [&](fp8::StatusOr<Job> r) { created = std::move(r); });
  ASSERT_TRUE(RunUntil([&] { return created.has_value(); }));
  ASSERT_TRUE(created->ok()) << created->status().ToString();
  const std::string name = (*created)->name();

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

  bool down = false;
  manager_->Shutdown([&] { down = true; });
  ASSERT_TRUE(RunUntil([&] { return down; }));
#endif
}

}  // namespace
}  // namespace fp8d::core
