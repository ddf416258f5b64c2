// SPDX-License-Identifier: Apache-2.0
// FleetLauncher: a Launcher (daemon/launcher/launcher.h) whose ranks are played by one thread of
// this process instead of being fp8-worker processes, so one machine can put 10,000 live ranks
// in front of a real JobManager (issue #28 item 5). Bench-only: fp8d never links it.
//
// What is real: the attempt folder and the rank-<r>.events files are made by the launchers' own
// code (PrepareAttemptFolder, CreateRankFile); every event is a line in that file, in the shape
// fp8-worker prints (proto JSON, proto field names), read back by the launchers' EventFileReader
// and turned into a WorkerEvent by ToWorkerEvent, then delivered to the listener from one
// observer thread, a rank's exit only after every line it wrote (as LocalLauncher does).
//
// What is played: the processes. The "ranks" thread writes each live rank's lines: `started`
// shortly after launch, then `progress` every progress_ms and `heartbeat` every heartbeat_ms,
// each rank at its own phase. It tells the observer which files it appended to, as inotify
// tells LocalLauncher that a file changed (LocalLauncher then reads every rank's file; this one
// reads only the changed ones, so the cost measured is the daemon's, not a full scan's). A
// "process" ends only by a signal: SIGTERM ends a responsive rank (a worker without a handler),
// SIGKILL ends any; a silenced (hung) rank ignores SIGTERM.
//
// Faults (Inject): kSigkill ends the rank at once with signal 9 (its exit is delivered after
// its last lines); kSilence makes it write nothing more (heartbeat loss: the process is alive
// and wedged).
//
// Threads: "fleet-ranks" (the workers' side: not fp8d's cost) and "fleet-observer" (the
// launcher's observer thread: fp8d's cost). Launch, Signal and Inject may be called from any
// thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/launcher/launcher.h"

namespace fp8d::bench {

struct FleetOptions {
  int nodes = 1250;
  int gpus_per_node = 8;
  int64_t progress_ms = 1000;   // a progress line per rank this often
  int64_t heartbeat_ms = 5000;  // a heartbeat line per rank this often
  int64_t start_ms = 200;       // launch → the rank's `started` line
};

enum class Fault { kSigkill, kSilence };

// Steady-clock microseconds, the one time base of faults and detections.
int64_t SteadyMicros();

class FleetLauncher final : public launcher::Launcher {
 public:
  FleetLauncher(FleetOptions options, launcher::LauncherListener* listener);
  ~FleetLauncher() override;

  std::vector<launcher::Slot> Slots() const override { return slots_; }
  fp8::StatusOr<std::vector<launcher::RankProcess>> Launch(const launcher::LaunchRequest& request) override;
  // A fleet lives as long as its process: nothing survives a restart to adopt.
  fp8::Status Adopt(const std::string& job_id, int attempt, const std::string& attempt_dir,
                    const std::vector<launcher::RankProcess>& ranks) override;
  void Signal(const std::string& job_id, int attempt, int sig) override;
  void Stop() override;

  struct Injected {
    // kSigkill: when the rank died. kSilence: when it wrote its last line.
    int64_t at_us = 0;
  };
  // NOT_FOUND unless the rank is live and writing (not exited, not silenced already).
  fp8::StatusOr<Injected> Inject(const std::string& job_id, int attempt, int rank, Fault fault);

  struct Counts {
    int64_t lines_written = 0;
    int64_t events_delivered = 0;
    int64_t exits_delivered = 0;
    int64_t launches = 0;
    int64_t live_ranks = 0;  // launched, not exited
  };
  Counts counts() const;
  // Kernel thread ids of the two threads, for CPU accounting (/proc/self/task/<tid>).
  pid_t ranks_tid() const { return ranks_tid_.load(); }
  pid_t observer_tid() const { return observer_tid_.load(); }

 private:
  struct Rank;
  using RankPtr = std::shared_ptr<Rank>;
  enum class Line : uint8_t { kStarted, kProgress, kHeartbeat };
  struct Due {
    int64_t at_us;
    Line line;
    RankPtr rank;
    bool operator>(const Due& o) const { return at_us > o.at_us; }
  };

  void RanksLoop();
  void ObserveLoop();
  // Under mu_: the rank ends by `sig` (no more lines); the observer delivers its exit.
  void EndLocked(const RankPtr& rank, int sig);
  // Under mu_: appends one line of `kind` to the rank's events file.
  void WriteLocked(Rank& rank, Line kind, int64_t now_us);
  // Observer thread: the rank's new lines (and, once it is gone, its tail and exit).
  void Drain(Rank& rank, bool exited);

  const FleetOptions options_;
  launcher::LauncherListener* const listener_;
  const std::vector<launcher::Slot> slots_;

  mutable std::mutex mu_;
  std::condition_variable ranks_cv_;     // the ranks thread: stop
  std::condition_variable observer_cv_;  // the observer: written files, exits, stop
  bool stopping_ = false;
  std::map<std::pair<std::string, int>, std::vector<RankPtr>> attempts_;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
  std::vector<RankPtr> written_;  // appended to since the observer last looked
  std::vector<RankPtr> ended_;    // gone; exit not yet delivered
  Counts counts_;
  std::atomic<int64_t> events_delivered_{0};
  std::atomic<int64_t> exits_delivered_{0};
  std::atomic<pid_t> ranks_tid_{0};
  std::atomic<pid_t> observer_tid_{0};
  std::thread ranks_;
  std::thread observer_;
};

}  // namespace fp8d::bench
