// SPDX-License-Identifier: Apache-2.0
// JobManager: the controller's brain. It owns the in-memory view of active jobs, runs the
// state machine (job_lifecycle.h), the scheduler (scheduler.h) and the supervisor (timers,
// retries, cancellation), persists every transition through the store BEFORE acting on it or
// acknowledging it, and drives the launcher.
//
// Threading: single-threaded. Every public method must be called on `io` (post to it); every
// callback is invoked on `io`. Store calls run on a separate store thread and post their
// completion back, so no handler on `io` blocks on disk. Launcher callbacks arrive on the
// launcher's observer thread and are posted to `io`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <google/protobuf/empty.pb.h>

#include "common/status.h"
#include "daemon/launcher/launcher.h"
#include "daemon/core/clock.h"
#include "daemon/core/queues.h"
#include "daemon/core/job_counters.h"
#include "daemon/store/job_store.h"
#include "fp8d/v1/job_service.pb.h"

namespace fp8d::core {

using fp8::Status;
using fp8::StatusOr;

struct ManagerOptions {
  std::string data_dir;                          // <data dir>/jobs/<id>/attempt-<n>/
  std::vector<std::string> worker_argv_prefix;   // how to run fp8-worker (tests: the test worker)
  // Workers get only an allowlisted part of fp8d's environment (launcher::AllowlistedEnvironment
  // with worker_env_allow), then worker_env, then the job's own env. Off: fp8d's whole one.
  bool clean_worker_env = false;
  std::vector<std::string> worker_env_allow;
  std::map<std::string, std::string> worker_env;
  // --job-env-allow: a stored job's env is checked against api::ValidateJobEnv again at
  // launch (it may predate the allowlist, or the operator may have narrowed it since).
  std::vector<std::string> job_env_allow;
  int64_t cancel_grace_ms = 10000;               // SIGTERM → SIGKILL
  int64_t preemption_grace_ms = 30000;           // SIGTERM → SIGKILL of a preempted attempt
  int64_t tick_ms = 50;                          // supervisor timer resolution
  int64_t create_batch_max = 512;                // group-commit batch size
  // Longest wait for a group-commit batch to fill up (create_batcher.cc: Flush); 0: none.
  int64_t create_batch_wait_max_us = 2000;
  int64_t progress_flush_ms = 200;               // progress rows persisted at most this often per job
  int64_t runtime_flush_ms = 1000;               // rank event offsets persisted at most this often
  // Source of the backoff jitter, uniform in [0, 1). Empty: a random generator. Tests pass
  // a constant (0.5 = no jitter) so backoffs are exact.
  std::function<double()> uniform01;
  // Finished jobs older than this (since end_time) are deleted like DeleteJob; 0 keeps them.
  int64_t job_ttl_after_finished_ms = 0;
  // The scheduler's queues (queues.h); empty: one queue `default` whose quota is the cluster.
  std::vector<QueueConfig> queues;
};

class JobManager {
 public:
  virtual ~JobManager() = default;

  // Start-up recovery (before SERVING, docs/design.md §3): loads active jobs, re-adopts live
  // workers (found by their environment if their pids were never saved), judges workers that
  // ended while the daemon was down by the rest of their events, kills workers no active
  // attempt owns, requeues attempts that never spawned (not counted against max_attempts),
  // then starts scheduling. `done` runs once recovery is finished.
  virtual void Start(std::function<void(Status)> done) = 0;
  // Stops timers and the launcher's observation; leaves workers running; flushes the store.
  virtual void Shutdown(std::function<void()> done) = 0;

  // `job` already validated by daemon/api/validation.h. `output_dir_key`: its output_dir as
  // the API's path check resolved it (jobspec::ResolvedPaths), taken as the output-dir
  // admission's key so the io thread does not walk the path again; nullopt (a caller that
  // checked no paths) and the manager resolves it itself.
  virtual void CreateJob(fp8d::v1::CreateJobRequest request, std::optional<std::string> output_dir_key,
                         std::function<void(StatusOr<fp8d::v1::Job>)> done) = 0;
  void CreateJob(fp8d::v1::CreateJobRequest request, std::function<void(StatusOr<fp8d::v1::Job>)> done) {
    CreateJob(std::move(request), std::nullopt, std::move(done));
  }
  virtual void GetJob(fp8d::v1::GetJobRequest request,
                      std::function<void(StatusOr<fp8d::v1::Job>)> done) = 0;
  virtual void ListJobs(fp8d::v1::ListJobsRequest request,
                        std::function<void(StatusOr<fp8d::v1::ListJobsResponse>)> done) = 0;
  virtual void CancelJob(fp8d::v1::CancelJobRequest request,
                         std::function<void(StatusOr<fp8d::v1::Job>)> done) = 0;
  // Deletes a finished job: its store rows (one transaction), then its attempt folders through
  // the launcher. FAILED_PRECONDITION while it is active; its output dir is never touched.
  virtual void DeleteJob(fp8d::v1::DeleteJobRequest request,
                         std::function<void(StatusOr<google::protobuf::Empty>)> done) = 0;

  // Calls on_update with the snapshot (when newer than since_version), then with every later
  // version, in order; on_end once the job is terminal and sent, or with NOT_FOUND. Returns a
  // subscription id for Unwatch (e.g. when the client goes away).
  virtual int64_t Watch(const std::string& name, int64_t since_version,
                        std::function<void(const fp8d::v1::Job&)> on_update,
                        std::function<void(Status)> on_end) = 0;
  virtual void Unwatch(int64_t subscription) = 0;

  // A rank's log of an attempt for GetJobLogs (attempt 0 = current): which attempt it is (a
  // follower reopens when that changes) and how to open it through the launcher. NOT_FOUND
  // before the job has an attempt; INVALID_ARGUMENT for a rank the job does not have.
  struct RankLogSource {
    int attempt = 0;
    // Blocking I/O: call off io. NOT_FOUND while the rank has written no log.
    std::function<StatusOr<std::unique_ptr<launcher::RankStream>>()> open;
  };
  virtual void RankLog(const std::string& name, int rank, int attempt,
                       std::function<void(StatusOr<RankLogSource>, bool job_terminal)> done) = 0;

  // How many jobs wait for slots (QUEUED) and how many hold them (STARTING, RUNNING,
  // CANCELLING), read from the in-memory view: cheap enough for a status line every second
  // (systemd's STATUS=).
  struct ActiveCounts {
    int64_t queued = 0;
    int64_t running = 0;
  };
  virtual ActiveCounts CountActive() const = 0;
  // The counters kept across deletions and the slots offered and held, for /metrics. On io.
  virtual ManagerFigures Figures() const = 0;
  // The queues with their quota, use and waiting jobs, from the in-memory view (ListQueues).
  virtual void ListQueues(fp8d::v1::ListQueuesRequest request,
                          std::function<void(StatusOr<fp8d::v1::ListQueuesResponse>)> done) = 0;
  // Accounting from the stored attempts, on the store thread (usage.h). INVALID_ARGUMENT
  // naming `by` unless it is owner or queue.
  virtual void GetUsage(fp8d::v1::GetUsageRequest request,
                        std::function<void(StatusOr<fp8d::v1::GetUsageResponse>)> done) = 0;
};

// The manager is the launcher's listener, so it builds the launcher itself through `make_launcher`.
using LauncherFactory = std::function<std::unique_ptr<launcher::Launcher>(launcher::LauncherListener*)>;

std::unique_ptr<JobManager> NewJobManager(boost::asio::io_context& io, ManagerOptions options,
                                          std::unique_ptr<store::JobStore> store,
                                          LauncherFactory make_launcher, const Clock* clock);

}  // namespace fp8d::core
