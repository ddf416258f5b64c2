// SPDX-License-Identifier: Apache-2.0
// AttemptLauncher: how an attempt comes to have workers. StartAttempt records the attempt and
// persists QUEUED → STARTING with its placement (the launch intent) before anything is spawned;
// Launch then asks the launcher for the workers on the launcher thread (spawning writes spec.json
// and creates files: off io) and OnLaunched saves their handles for re-adoption. After a
// restart, Readopt is the same path's other end: each recovered attempt's ranks are found
// again (by saved handle, or by their environment when the daemon died before saving it) and
// adopted, workers no recovered attempt owns are killed, and an attempt whose workers are gone
// is requeued as CONTROLLER_RESTART (not counted against max_attempts).
//
// Failing an attempt, stopping its workers and ending a run are the supervisor's: the launcher
// hands those to it.
//
// THREADING: every method runs on io; launcher calls that may block run on the launcher thread,
// whose results are posted back to io (no-ops once the launcher is gone).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "daemon/launcher/launcher.h"
#include "daemon/core/blocking_worker.h"
#include "daemon/core/clock.h"
#include "daemon/core/job_cache.h"
#include "daemon/core/job_manager.h"
#include "daemon/core/job_supervisor.h"
#include "daemon/core/job_writer.h"

namespace fp8d::core {

class AttemptLauncher {
 public:
  AttemptLauncher(boost::asio::io_context& io, const ManagerOptions& options, JobCache& cache,
                  JobWriter& writer, JobSupervisor& supervisor, launcher::Launcher& launcher,
                  const Clock* clock);
  // Runs the launches already posted (their results are dropped), then joins the thread.
  ~AttemptLauncher();

  // A new attempt of a QUEUED job on `slots`: persisted as STARTING, then launched.
  void StartAttempt(JobEntry& e, const std::vector<launcher::Slot>& slots);

  // A recovered job with the attempt records the store holds for it.
  struct Recovered {
    std::string name;
    std::vector<store::AttemptRecord> attempts;
  };
  // Re-adopts the current attempt of every job whose workers may be running, kills workers of
  // this data dir that no recovered attempt owns, then runs `done` on io.
  void Readopt(std::vector<Recovered> jobs, std::function<void()> done);

  // No launches from now on (shutdown).
  void Stop() { stopped_ = true; }
  // Runs `then` on io once every launch already on the launcher thread has had its result
  // handled (so its pids are saved before the final flush).
  void Drain(std::function<void()> then);

 private:
  void Launch(const std::string& name, int attempt);
  void OnLaunched(const std::string& name, int attempt,
                  StatusOr<std::vector<launcher::RankProcess>> result);
  std::string ChooseResume(const JobEntry& e) const;
  StatusOr<launcher::LaunchRequest> MakeRequest(const JobEntry& e) const;
  // One re-adopted (or not) attempt: supervision resumes, or the attempt ends.
  void Resume(JobEntry& e, Status adopted);
  // Launcher thread: kills live workers of `attempt_dir` that no recovered attempt owns.
  void KillStrays(const std::string& jobs_root, const std::string& attempt_dir,
                  const std::vector<launcher::RankProcess>& ranks);
  // Runs `fn` on the launcher thread, then `then` on io.
  void OnLauncher(std::function<void()> fn, std::function<void()> then);

  boost::asio::io_context& io_;
  const ManagerOptions& options_;
  JobCache& cache_;
  JobWriter& writer_;
  JobSupervisor& supervisor_;
  launcher::Launcher& launcher_;
  const Clock* clock_;
  bool stopped_ = false;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  std::unique_ptr<BlockingWorker> thread_;
};

}  // namespace fp8d::core
