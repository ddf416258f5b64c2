// The JobManager: the API's commands, the wiring of the units, recovery and shutdown.
//   job_manager.cc      construction and the commands from the API (create, get, list, cancel,
//                       watch, log source)
//   job_scheduling.cc   scheduler rounds: the snapshot of slots and queue, the pure planner
//   job_recovery.cc     Start (recovery before SERVING) and Shutdown
//   job_retention.cc    DeleteJob and the job_ttl_after_finished sweep
// and the units it wires together, each its own file and test (docs/architecture.md):
//   StoreThread (the store thread), JobCache (the jobs in memory), JobWriter (the one way a
//   state changes), CreateBatcher (group commit), JobAdmission (backend and output-dir checks),
//   JobSupervisor (events, exits, the tick, cancel), AttemptLauncher (launch and re-adoption).
//
// THREADING: everything here runs on the io_context's thread, one handler at a time, so the
// in-memory state needs no locks. Blocking work goes to two BlockingWorker threads (the store
// thread for SQLite, the launcher thread for spawning and re-adopting processes) and its
// result is posted back to io. Launcher callbacks arrive on the launcher's observer thread and are posted to
// io as well. Every posted completion holds a weak reference to its unit's alive token, so a
// completion that arrives after the manager is gone does nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "daemon/core/attempt_launcher.h"
#include "daemon/core/create_batcher.h"
#include "daemon/core/job_admission.h"
#include "daemon/core/job_cache.h"
#include "daemon/core/job_manager.h"
#include "daemon/core/job_supervisor.h"
#include "daemon/core/job_writer.h"
#include "daemon/core/store_thread.h"
#include "daemon/core/watch_hub.h"

namespace fp8d::core {

using fp8d::v1::FailureClass;
using fp8d::v1::Job;
using fp8d::v1::JobState;

class JobManagerImpl final : public JobManager,
                             private launcher::LauncherListener,
                             private JobSupervisor::Owner {
 public:
  JobManagerImpl(boost::asio::io_context& io, ManagerOptions options,
                 std::unique_ptr<store::JobStore> store, LauncherFactory make_launcher,
                 const Clock* clock);
  ~JobManagerImpl() override;

  void Start(std::function<void(Status)> done) override;
  void Shutdown(std::function<void()> done) override;
  using JobManager::CreateJob;
  void CreateJob(fp8d::v1::CreateJobRequest request, std::optional<std::string> output_dir_key,
                 std::function<void(StatusOr<Job>)> done) override;
  void GetJob(fp8d::v1::GetJobRequest request, std::function<void(StatusOr<Job>)> done) override;
  void ListJobs(fp8d::v1::ListJobsRequest request,
                std::function<void(StatusOr<fp8d::v1::ListJobsResponse>)> done) override;
  void CancelJob(fp8d::v1::CancelJobRequest request,
                 std::function<void(StatusOr<Job>)> done) override;
  void DeleteJob(fp8d::v1::DeleteJobRequest request,
                 std::function<void(StatusOr<google::protobuf::Empty>)> done) override;
  int64_t Watch(const std::string& name, int64_t since_version,
                std::function<void(const Job&)> on_update,
                std::function<void(Status)> on_end) override;
  void Unwatch(int64_t subscription) override;
  void RankLog(const std::string& name, int rank, int attempt,
               std::function<void(StatusOr<RankLogSource>, bool job_terminal)> done) override;
  ActiveCounts CountActive() const override;

 private:
  // ---- launcher listener (the launcher's observer thread): post to io ----
  void OnWorkerEvent(launcher::WorkerEvent event) override;
  void OnWorkerExit(launcher::WorkerExit exit) override;
  // ---- supervisor owner ----
  void ScheduleRound() override { Schedule(); }
  void OnTick(int64_t now) override { SweepFinishedJobs(now); }

  // Runs `fn` on io later (not inside the current handler), if the manager still exists.
  void Defer(std::function<void()> fn);
  JobEntry* Find(const std::string& name) { return cache_.Find(name); }
  // Answers with the job as watchers last saw it: from the cache, else from the store.
  void ReplyCurrent(const std::string& name, std::function<void(StatusOr<Job>)> done);
  int64_t NowMs() const { return clock_->NowMs(); }
  double Uniform01();

  // ---- scheduling (job_scheduling.cc) ----
  void Schedule();

  // ---- retention (job_retention.cc) ----
  // Deletes finished jobs past job_ttl_after_finished, a batch at a time, at most once a minute.
  void SweepFinishedJobs(int64_t now);
  int64_t next_sweep_ms_ = 0;
  bool sweeping_ = false;

  // ---- recovery (job_recovery.cc) ----
  void LoadAttempts(std::vector<std::string> names, std::function<void(Status)> done);
  void Recover(std::vector<AttemptLauncher::Recovered> jobs,
               std::vector<std::vector<fp8d::v1::Checkpoint>> checkpoints,
               std::function<void(Status)> done);

  boost::asio::io_context& io_;
  ManagerOptions options_;
  std::unique_ptr<store::JobStore> store_;
  const Clock* clock_;
  std::string cwd_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);

  std::unique_ptr<launcher::Launcher> launcher_;
  // Declared after store_ and launcher_: destroyed (joined) first, so no task outlives them.
  std::unique_ptr<StoreThread> store_thread_;

  bool started_ = false;        // recovery finished: schedule and supervise
  bool shutting_down_ = false;

  WatchHub watchers_;
  JobCache cache_{[this](const Job& job) { watchers_.Deliver(job); }};

  std::unique_ptr<JobAdmission> admission_;
  std::unique_ptr<StoreJobWriter> writer_;
  std::unique_ptr<CreateBatcher> creates_;
  std::unique_ptr<JobSupervisor> supervisor_;
  std::unique_ptr<AttemptLauncher> attempt_launcher_;

  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace fp8d::core
