// The JobManager implementation, split by concern over several .cc files:
//   job_manager.cc     commands from the API (create, get, list, cancel, watch, log path)
//                      and the store plumbing shared by all of them
//   create_batcher.*   CreateJob's group commit (its own unit)
//   job_cache.*        the in-memory jobs, their indexes and version publication (its own unit)
//   job_transitions.cc the one way a job changes state: check, persist, then act and publish
//   job_scheduling.cc  scheduler rounds, attempt start and worker launch
//   job_supervisor.*   worker events and exits, the periodic tick (heartbeat, progress and
//                      deadline checks, SIGKILL after grace, backoff expiry, batched writes)
//                      (its own unit)
//   job_recovery.cc    Start (recovery before SERVING) and Shutdown
//
// THREADING: everything here runs on the io_context's thread, one handler at a time, so the
// in-memory state needs no locks. Blocking work goes to two BlockingWorker threads (the store
// thread for SQLite, the launcher thread for spawning and re-adopting processes) and its
// result is posted back to io. Agent callbacks arrive on the agent's thread and are posted to
// io as well. Every posted completion holds a weak reference to `alive_`, so a completion
// that arrives after the manager is gone does nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <set>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "daemon/core/attempt_verdict.h"
#include "daemon/core/blocking_worker.h"
#include "daemon/core/create_batcher.h"
#include "daemon/core/job_cache.h"
#include "daemon/core/job_manager.h"
#include "daemon/core/job_supervisor.h"
#include "daemon/core/watch_hub.h"

namespace fp8d::core {

using fp8d::v1::FailureClass;
using fp8d::v1::Job;
using fp8d::v1::JobState;

class JobManagerImpl final : public JobManager, private agent::AgentListener {
 public:
  JobManagerImpl(boost::asio::io_context& io, ManagerOptions options,
                 std::unique_ptr<store::JobStore> store, AgentFactory make_agent,
                 const Clock* clock);
  ~JobManagerImpl() override;

  void Start(std::function<void(Status)> done) override;
  void Shutdown(std::function<void()> done) override;
  void CreateJob(fp8d::v1::CreateJobRequest request,
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
  // ---- agent listener (agent thread): post to io ----
  void OnWorkerEvent(agent::WorkerEvent event) override;
  void OnWorkerExit(agent::WorkerExit exit) override;

  // ---- plumbing (job_manager.cc) ----
  // Runs `work` on the store thread and `then` with its result on io.
  template <typename R>
  void OnStore(std::function<R(store::JobStore&)> work, std::function<void(R)> then);
  // Runs `fn` on io later (not inside the current handler), if the manager still exists.
  void Defer(std::function<void()> fn);
  JobEntry* Find(const std::string& name) { return cache_.Find(name); }
  // Answers with the job as watchers last saw it: from the cache, else from the store.
  void ReplyCurrent(const std::string& name, std::function<void(StatusOr<Job>)> done);
  int64_t NowMs() const { return clock_->NowMs(); }
  double Uniform01();
  std::string AttemptDir(const std::string& name, int attempt) const;

  // ---- transitions (job_transitions.cc) ----
  // Checks from → to, applies it in memory, persists job row + event (and `extra`, in the same
  // store task), then publishes the new version and runs `after` with the write's status.
  void Transition(JobEntry& e, JobState to, const std::string& message,
                  std::function<void(Status)> after = nullptr,
                  std::function<Status(store::JobStore&)> extra = nullptr);
  // A progress/checkpoint change: new version, delivered at once, persisted in a batch.
  void PublishChange(JobEntry& e) { cache_.PublishChange(e, NowMs()); }
  // Writes e.unwritten.front() if no write of this job is in flight; on failure keeps it and
  // tries again with backoff (the job keeps its last durable state for Get and watchers).
  void WriteTransitions(const std::string& name);
  // Drops a terminal job from the cache once its workers are gone and its writes durable.
  void MaybeEvict(const std::string& name);

  // ---- scheduling (job_scheduling.cc) ----
  void Schedule();
  void StartAttempt(JobEntry& e, const std::vector<agent::Slot>& slots);
  void Launch(const std::string& name, int attempt);
  void OnLaunched(const std::string& name, int attempt,
                  StatusOr<std::vector<agent::RankProcess>> result);
  std::string ChooseResume(const JobEntry& e) const;

  // ---- admission (job_admission.cc) ----
  // FAILED_PRECONDITION for `backend: cuda` without any GPU slot, or an output_dir an active
  // job uses (named). Builds output_dirs_ on first use.
  Status CheckAdmission(const Job& job, const std::string& request_id);
  // Drops a finished job's entry, so the index holds only active jobs (MaybeEvict calls it).
  void ReleaseOutputDir(const Job& job);
  struct OutputDirUser {
    std::string name;        // empty while its create is being written
    std::string request_id;  // of that create, so its retries are not refused
  };
  std::unordered_map<std::string, OutputDirUser> output_dirs_;
  bool output_dirs_built_ = false;
  // ---- retention (job_retention.cc) ----
  // Deletes finished jobs past job_ttl_after_finished, a batch at a time, at most once a minute.
  void SweepFinishedJobs(int64_t now);
  int64_t next_sweep_ms_ = 0;
  bool sweeping_ = false;

  // ---- recovery (job_recovery.cc) ----
  // A cached job that has started an attempt, with what its supervision needs from the store.
  struct Recovered {
    std::string name;
    std::vector<store::AttemptRecord> attempts;
    std::vector<fp8d::v1::Checkpoint> checkpoints;
  };
  void LoadAttempts(std::vector<std::string> names, std::function<void(Status)> done);
  void Recover(std::vector<Recovered> jobs, std::function<void(Status)> done);
  void RecoverRunning(JobEntry& e, Status adopted);
  // Launcher thread: kills live workers of `attempt_dir` that no recovered attempt owns.
  void KillStrays(const std::string& jobs_root, const std::string& attempt_dir,
                  const std::vector<agent::RankProcess>& ranks);

  boost::asio::io_context& io_;
  ManagerOptions options_;
  std::unique_ptr<store::JobStore> store_;
  const Clock* clock_;
  std::string cwd_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);

  std::unique_ptr<agent::Agent> agent_;
  // Declared after store_ and agent_: destroyed (joined) first, so no task outlives them.
  std::unique_ptr<BlockingWorker> store_thread_;
  std::unique_ptr<BlockingWorker> launcher_;

  bool started_ = false;        // recovery finished: schedule and supervise
  bool shutting_down_ = false;

  WatchHub watchers_;
  JobCache cache_{[this](const Job& job) { watchers_.Deliver(job); }};

  std::unique_ptr<CreateBatcher> creates_;
  // Worker events and exits, the tick (job_supervisor.h); built once the agent exists.
  std::unique_ptr<JobSupervisor> supervisor_;

  std::mt19937_64 rng_{std::random_device{}()};
};

template <typename R>
void JobManagerImpl::OnStore(std::function<R(store::JobStore&)> work,
                             std::function<void(R)> then) {
  std::weak_ptr<int> alive = alive_;
  store_thread_->Post([this, alive, work = std::move(work), then = std::move(then)]() mutable {
    auto result = std::make_shared<R>(work(*store_));
    boost::asio::post(io_, [alive, then = std::move(then), result]() mutable {
      if (alive.expired()) return;
      then(std::move(*result));
    });
  });
}

}  // namespace fp8d::core
