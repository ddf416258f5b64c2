// SPDX-License-Identifier: Apache-2.0
// FleetRun: one fp8d's JobManager, as fp8d builds it (daemon/server/daemon_run.cc), on the
// SQLite store in a data dir, on the real clock, with its io thread, in front of a
// FleetLauncher (fleet_launcher.h). It creates jobs of N ranks, watches every job the way a
// WatchJob client does (JobManager::Watch: a state change is seen once it is durable in the
// store), injects faults and records, per fault, when the watcher saw the attempt fail and when
// the job ran again. Shared by fleet_bench and tests/fleet.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "bench/fleet/fleet_launcher.h"
#include "common/status.h"
#include "daemon/core/clock.h"
#include "daemon/core/job_manager.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::bench {

struct FleetRunOptions {
  std::string data_dir;  // exists; the store is <data_dir>/fp8d.db, as fp8d keeps it
  int jobs = 1250;
  int ranks_per_job = 8;
  FleetOptions fleet;
  int64_t heartbeat_timeout_ms = 0;  // 0: fp8d's default (30 s, daemon/core/new_job.cc)
  int64_t progress_timeout_ms = 0;   // 0: fp8d's default (300 s)
  int max_attempts = 1000;           // so faults never use a job up
  int64_t backoff_ms = 1000;         // retry initial and max backoff
  int64_t cancel_grace_ms = 10000;   // fp8d's --cancel-grace-ms default
  int64_t tick_ms = 50;              // fp8d's --tick-ms default
};

struct FaultRecord {
  Fault kind = Fault::kSigkill;
  std::string job;  // jobs/<id>
  int attempt = 0;
  int rank = 0;
  int64_t at_us = 0;        // kSigkill: the kill; kSilence: the rank's last line (SteadyMicros)
  int64_t detected_us = 0;  // the watcher saw the attempt fail (0: not yet)
  int64_t running_again_us = 0;  // the watcher saw the next attempt RUNNING (0: not yet)
  fp8d::v1::JobState state = fp8d::v1::JOB_STATE_UNSPECIFIED;  // the state it failed into
  fp8d::v1::FailureClass failure = fp8d::v1::FAILURE_CLASS_UNSPECIFIED;
  std::string message;
};

class FleetRun {
 public:
  // Starts the manager (recovery of the empty store included) and returns once it schedules.
  static fp8::StatusOr<std::unique_ptr<FleetRun>> Start(FleetRunOptions options);
  // Shuts the manager down (workers' side stopped with it) and joins the io thread.
  ~FleetRun();

  // Creates options.jobs jobs and watches each; returns once every create is answered.
  fp8::Status CreateJobs();
  // Jobs whose newest version seen by their watcher is in `state`.
  int CountInState(fp8d::v1::JobState state) const;
  // Waits until `pred` holds (checked every 50 ms) or `timeout_ms` passed; returns pred().
  bool WaitFor(const std::function<bool()>& pred, int64_t timeout_ms) const;

  // Injects `fault` into a random rank of a random RUNNING job with no fault in flight;
  // returns the fault's index in faults().
  fp8::StatusOr<size_t> InjectFault(Fault fault, std::mt19937_64& rng);
  // The same for `rank` of job `name`, which must be RUNNING with no fault in flight.
  fp8::StatusOr<size_t> InjectFaultInto(const std::string& name, int rank, Fault fault);
  std::vector<FaultRecord> faults() const;
  std::vector<std::string> job_names() const;

  // A handler posted to io now: how long until it runs (the io thread's backlog).
  double IoDelayMs();
  // Sends a GetJob with attempts and events (the store thread's backlog plus one read) unless
  // the last one is still out; store_round_trips() has how long each took, in ms, a probe
  // still out counted with its wait so far.
  void ProbeStore();
  std::vector<double> store_round_trips() const;

  FleetLauncher& fleet() { return *fleet_; }
  pid_t io_tid() const { return io_tid_; }
  const FleetRunOptions& options() const { return options_; }

 private:
  explicit FleetRun(FleetRunOptions options);
  // Runs `fn` on io and waits for it.
  void OnIo(const std::function<void()>& fn);
  void OnUpdate(const fp8d::v1::Job& job);  // io thread: a watcher's update

  const FleetRunOptions options_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread io_thread_;
  pid_t io_tid_ = 0;
  core::SystemClock clock_;
  std::unique_ptr<core::JobManager> manager_;  // used on io only
  FleetLauncher* fleet_ = nullptr;            // owned by the manager

  struct JobView {
    fp8d::v1::JobState state = fp8d::v1::JOB_STATE_UNSPECIFIED;
    int attempt = 0;
    int fault = -1;  // index in faults_ of the fault in flight (until it runs again)
  };
  mutable std::mutex mu_;
  std::map<std::string, JobView> jobs_;
  std::vector<std::string> names_;
  std::vector<FaultRecord> faults_;
  int64_t store_probe_sent_us_ = 0;  // 0: none out
  std::vector<double> store_round_trips_;
};

}  // namespace fp8d::bench
