// SPDX-License-Identifier: Apache-2.0
// The JobManager: the API's commands, the wiring of the units, recovery and shutdown.
//   job_manager.cc      construction and the commands from the API (create, get, list, cancel,
//                       watch, log source)
//   job_scheduling.cc   scheduler rounds: the snapshot of slots and queue, the pure planner
//   job_recovery.cc     Start (recovery before SERVING) and Shutdown
//   job_retention.cc    DeleteJob and the job_ttl_after_finished sweep
//   job_dependencies.cc depends_on: the create check, the gate, failing waiting jobs
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
#include "daemon/core/dependencies.h"
#include "daemon/core/job_admission.h"
#include "daemon/core/job_cache.h"
#include "daemon/core/job_manager.h"
#include "daemon/core/job_supervisor.h"
#include "daemon/core/job_writer.h"
#include "daemon/core/store_thread.h"
#include "daemon/core/watch_hub.h"

namespace fp8d::core {

namespace testing {
class ManagerTest;
}  // namespace testing

using fp8d::v1::FailureClass;
using fp8d::v1::Job;
using fp8d::v1::JobState;

class JobManagerImpl final : public JobManager,
                             private launcher::LauncherListener,
                             private JobSupervisor::Owner {
  // The manager tests preempt through it (ManagerTest::Preempt) until the scheduler's plan does.
  friend class testing::ManagerTest;

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
  void ListQueues(fp8d::v1::ListQueuesRequest request,
                  std::function<void(StatusOr<fp8d::v1::ListQueuesResponse>)> done) override;
  // job_accounting.cc
  void GetUsage(fp8d::v1::GetUsageRequest request,
                std::function<void(StatusOr<fp8d::v1::GetUsageResponse>)> done) override;
  ManagerFigures Figures() const override;
  // ListQueues' answer (job_scheduling.cc), also for /metrics.
  fp8d::v1::ListQueuesResponse QueueView() const;

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

  // ---- dependencies (job_dependencies.cc) ----
  // The create's depends_on against the existing jobs (dependencies.h: CheckDependsOn); a
  // dependency that has finished is read from the store.
  void CheckDependencies(const Job& job, std::function<void(Status)> then);
  // The rest of CreateJob once its dependencies are checked: admission, then the group commit.
  void AdmitCreate(store::CreateRequest create, std::optional<std::string> output_dir_key,
                   std::function<void(StatusOr<Job>)> done);
  DependencyOutcome DependencyOutcomeOf(const std::string& name) const;
  // The scheduler's gate: false while a job's first attempt waits on a dependency.
  bool DependenciesMet(const JobEntry& e) const;
  // A cached QUEUED job with depends_on joins the index (after its create, or at recovery).
  void RegisterDependent(const std::string& name);
  // Reads the outcome of dependencies that are not cached and were not recorded.
  void ResolveDependencies(std::vector<std::string> names);
  // Sets the waiting job's pending_reason, or fails it; true when it may be scheduled now.
  bool EvaluateDependent(JobEntry& e);
  void FailDependent(JobEntry& e, const std::string& message);
  void OnDependencyOutcome(const std::string& dependency, DependencyOutcome outcome);
  // A terminal state of `job` is durable (the writer's hook) / the job was deleted.
  void OnJobFinished(const Job& job);
  void OnJobDeleted(const std::string& name);
  // Recovery: every waiting job rejoins the index; one on a dependency cycle fails.
  void RecoverDependencies();
  DependencyIndex dependencies_;

  // ---- preemption (job_preemption.cc) ----
  // Asks a STARTING or RUNNING job's attempt to stop so its slots can go to other work: the
  // PREEMPTED intent is made durable, then every rank gets SIGTERM (fp8-worker checkpoints at
  // the next step boundary and exits) and SIGKILL after preemption_grace_ms. The run is marked
  // `preempting` at once (AttemptRun), so a scheduling round may count its slots as soon free;
  // they are free once every rank exited. The job goes back to QUEUED with `reason` as its
  // pending_reason, the attempt ends PREEMPTED (not counted against max_attempts) and the next
  // attempt resumes from the newest checkpoint. A no-op for a job in any other state or
  // already preempting; a cancel meanwhile wins (CANCELLED).
  void PreemptAttempt(JobEntry& e, const std::string& reason);

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
  JobCounters counters_;  // fed by writer_ as transitions commit
  std::map<std::string, int64_t> preemptions_by_queue_;  // victims' queues (job_scheduling.cc)
  JobCache cache_{[this](const Job& job) { watchers_.Deliver(job); }};

  std::unique_ptr<JobAdmission> admission_;
  std::unique_ptr<StoreJobWriter> writer_;
  std::unique_ptr<CreateBatcher> creates_;
  std::unique_ptr<JobSupervisor> supervisor_;
  std::unique_ptr<AttemptLauncher> attempt_launcher_;

  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace fp8d::core
