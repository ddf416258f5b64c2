// SPDX-License-Identifier: Apache-2.0
// Fixture for JobManager tests: a manager on a memory store with a FakeLauncher and a
// ManualClock, driven from the test thread (which is the io thread: the test only calls the
// manager between io.run_for slices). Waits are "until a condition holds", bounded by a
// generous wall-clock limit that only a bug reaches; time as the manager sees it moves only
// when the test advances the ManualClock.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "daemon/core/job_manager.h"
#include "tests/core_manager/fake_launcher.h"

namespace fp8d::core::testing {

struct WatchRecord {
  std::vector<fp8d::v1::Job> updates;
  bool ended = false;
  fp8::Status end_status;
  int64_t id = 0;
};

class ManagerTest : public ::testing::Test {
 public:
  // JobManagerImpl::PreemptAttempt on one of `manager`'s jobs (a NewJobManager), as a
  // scheduling round would call it; a job not in its cache (finished) is left alone. Called on
  // the manager's io thread.
  static void PreemptIn(JobManager& manager, const std::string& name, const std::string& reason);

 protected:
  void SetUp() override;
  void TearDown() override;

  ManagerOptions Options() const;
  void StartManager();
  void StartManager(ManagerOptions options);
  // Shutdown + destroy (workers "keep running" in the FakeLauncher's world), then Start again on
  // the same store.
  void RestartManager();
  // Destroys the manager without Shutdown (a crash, as far as the manager can tell), then
  // starts a new one on the same store.
  void CrashAndRestartManager();

  bool RunUntil(const std::function<bool()>& pred, int timeout_ms = 20000);
  void RunFor(int ms);

  fp8::StatusOr<fp8d::v1::Job> Create(fp8d::v1::Job job, const std::string& request_id = "");
  fp8::StatusOr<fp8d::v1::Job> Get(const std::string& name, bool full = false);
  fp8::StatusOr<fp8d::v1::Job> Cancel(const std::string& name);
  fp8::StatusOr<fp8d::v1::ListJobsResponse> List(int page_size, const std::string& token = "");
  fp8d::v1::JobState StateOf(const std::string& name);
  // Waits until the job's (durable, published) state is `state`.
  bool WaitState(const std::string& name, fp8d::v1::JobState state);
  std::shared_ptr<WatchRecord> WatchJob(const std::string& name, int64_t since_version = 0);

  // The workers' side, as the launcher would report it.
  void Emit(const std::string& name, int attempt, int rank, nlohmann::json event);
  void EmitGarbage(const std::string& name, int attempt, int rank, const std::string& line);
  void Exit(const std::string& name, int attempt, int rank, int exit_code, int signal = 0,
            bool adopted = false);
  int64_t Offset(const std::string& name, int attempt, int rank);

  fp8d::v1::Job TrainJob(int ranks = 1) const;
  mutable int train_jobs_made_ = 0;  // TrainJob gives each job its own output_dir
  // Creates the job and waits for launch number `launch_index` (0-based across the test),
  // then reports `started` from every rank and waits for RUNNING. Returns the name.
  std::string CreateRunning(fp8d::v1::Job job);
  // Every rank: done, exit 0.
  void FinishAttempt(const std::string& name, int attempt, int ranks);
  bool HasSignal(const std::string& name, int attempt, int sig) const;
  // JobManagerImpl::PreemptAttempt on the job, as a scheduling round would call it.
  void Preempt(const std::string& name, const std::string& reason);
  // How many times `sig` went to the attempt's ranks.
  int SignalCount(const std::string& name, int attempt, int sig) const;

  boost::asio::io_context io_;
  ManualClock clock_{1'800'000'000'000};
  std::shared_ptr<FakeLauncherState> launcher_ = std::make_shared<FakeLauncherState>();
  std::shared_ptr<store::JobStore> store_;
  std::shared_ptr<std::atomic<int>> create_calls_ = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> update_jobs_calls_ = std::make_shared<std::atomic<int>>(0);
  // Set: the store refuses writes after creation (a full disk).
  std::shared_ptr<std::atomic<bool>> fail_writes_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<JobManager> manager_;
  std::string data_dir_;
  std::map<std::string, int64_t> offsets_;
};

}  // namespace fp8d::core::testing
