// SPDX-License-Identifier: Apache-2.0
// Shared helpers of the launcher tests: a listener that records everything in delivery order, a
// polling wait (never a fixed sleep as an assertion) and a fixture that cleans up processes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/launcher/launcher.h"
#include "daemon/launcher/event_reader.h"
#include "daemon/launcher/local_handle.h"

namespace fp8d::launcher::testing {

// Generous: the suite runs on a loaded 2-core machine next to other builds.
constexpr std::chrono::seconds kWait{30};

struct Delivery {
  bool is_exit = false;
  WorkerEvent event;  // when !is_exit
  WorkerExit exit;    // when is_exit
};

class RecordingListener : public LauncherListener {
 public:
  void OnWorkerEvent(WorkerEvent event) override;
  void OnWorkerExit(WorkerExit exit) override;

  // Waits (up to kWait) until `pred` holds over the deliveries so far.
  bool WaitUntil(const std::function<bool(const std::vector<Delivery>&)>& pred,
                 std::chrono::milliseconds timeout = kWait);
  bool WaitForExit(const std::string& job, int attempt, int rank);
  bool WaitForEventType(const std::string& job, int rank, const std::string& type);

  std::vector<Delivery> All();
  std::vector<WorkerEvent> Events(const std::string& job, int rank);
  std::optional<WorkerExit> Exit(const std::string& job, int rank);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Delivery> log_;
};

std::string MakeTempDir();
std::string ReadFile(const std::string& path);
// Alive and not a zombie.
bool Alive(int64_t pid);
// Polls `pred` every 10 ms for up to `timeout`.
bool PollUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout = kWait);
// True when the local launcher's handle of `rank` names a live process (pid and start time).
bool HandleAlive(const RankProcess& rank);

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  std::unique_ptr<Launcher> NewLauncher(LauncherListener* listener, int poll_ms = 10);
  // A launch request for the test worker with `ranks` CPU slots.
  LaunchRequest Request(const std::string& job, int ranks,
                        std::map<std::string, std::string> env = {});
  // Launch that also remembers the processes for cleanup.
  StatusOr<std::vector<RankProcess>> LaunchTracked(Launcher& launcher, const LaunchRequest& req);
  // Reaps a pid of ours the launcher is not watching (after Stop, or an adopted one).
  void Reap(int64_t pid);

  std::string dir_;
  RecordingListener listener_;
  std::vector<RankProcess> launched_;
  std::vector<std::unique_ptr<Launcher>> launchers_;
};

}  // namespace fp8d::launcher::testing
