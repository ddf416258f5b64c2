// SPDX-License-Identifier: Apache-2.0
#include "tests/launcher/launcher_test_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "daemon/launcher/process.h"

namespace fp8d::launcher::testing {

void RecordingListener::OnWorkerEvent(WorkerEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  Delivery d;
  d.event = std::move(event);
  log_.push_back(std::move(d));
  cv_.notify_all();
}

void RecordingListener::OnWorkerExit(WorkerExit exit) {
  std::lock_guard<std::mutex> lock(mu_);
  Delivery d;
  d.is_exit = true;
  d.exit = std::move(exit);
  log_.push_back(std::move(d));
  cv_.notify_all();
}

bool RecordingListener::WaitUntil(const std::function<bool(const std::vector<Delivery>&)>& pred,
                                  std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return pred(log_); });
}

bool RecordingListener::WaitForExit(const std::string& job, int attempt, int rank) {
  return WaitUntil([&](const std::vector<Delivery>& log) {
    for (const auto& d : log) {
      if (d.is_exit && d.exit.job_id == job && d.exit.attempt == attempt && d.exit.rank == rank) {
        return true;
      }
    }
    return false;
  });
}

bool RecordingListener::WaitForEventType(const std::string& job, int rank,
                                         const std::string& type) {
  return WaitUntil([&](const std::vector<Delivery>& log) {
    for (const auto& d : log) {
      if (!d.is_exit && !d.event.garbage && d.event.job_id == job && d.event.rank == rank &&
          EventType(d.event.event) == type) {
        return true;
      }
    }
    return false;
  });
}

std::vector<Delivery> RecordingListener::All() {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

std::vector<WorkerEvent> RecordingListener::Events(const std::string& job, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerEvent> out;
  for (const auto& d : log_) {
    if (!d.is_exit && d.event.job_id == job && d.event.rank == rank) out.push_back(d.event);
  }
  return out;
}

std::optional<WorkerExit> RecordingListener::Exit(const std::string& job, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& d : log_) {
    if (d.is_exit && d.exit.job_id == job && d.exit.rank == rank) return d.exit;
  }
  return std::nullopt;
}

std::string MakeTempDir() {
  std::string base = std::filesystem::temp_directory_path() / "fp8d-launcher-test-XXXXXX";
  std::vector<char> buf(base.begin(), base.end());
  buf.push_back('\0');
  char* made = ::mkdtemp(buf.data());
  EXPECT_NE(made, nullptr);
  return made ? std::string(made) : std::string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Alive(int64_t pid) {
  ProcStat st = ReadProcStat(pid);
  return st.exists && !st.zombie;
}

bool PollUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

bool HandleAlive(const RankProcess& rank) {
  const std::optional<LocalProcessId> id = ParseLocalHandle(rank.handle);
  return id && ProcessMatches(id->pid, id->start_time);
}

void LauncherTest::SetUp() { dir_ = MakeTempDir(); }

void LauncherTest::TearDown() {
  // Never leave a worker behind, whatever the test did.
  for (const auto& rp : launched_) {
    if (HandleAlive(rp)) ::kill(-static_cast<pid_t>(rp.pid), SIGKILL);
  }
  launchers_.clear();  // stops observers (a stopped launcher no longer reaps)
  for (const auto& rp : launched_) {
    int st;
    // ECHILD when a launcher already reaped it.
    while (::waitpid(static_cast<pid_t>(rp.pid), &st, 0) < 0 && errno == EINTR) {
    }
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

std::unique_ptr<Launcher> LauncherTest::NewLauncher(LauncherListener* listener, int poll_ms) {
  LocalLauncherOptions opts;
  opts.node_name = "test-node";
  opts.detect_gpus = false;
  opts.cpu_slots = 4;
  opts.poll_interval_ms = poll_ms;
  return NewLocalLauncher(opts, listener);
}

LaunchRequest LauncherTest::Request(const std::string& job, int ranks,
                                 std::map<std::string, std::string> env) {
  LaunchRequest req;
  req.job_id = job;
  req.attempt = 1;
  req.kind = "train";
  req.spec_json = R"({"test": {"steps": 3, "step_ms": 5}})";
  req.attempt_dir = dir_ + "/jobs/" + job + "/attempt-1";
  for (int r = 0; r < ranks; ++r) req.slots.push_back(Slot{"test-node", -1});
  req.checkpoint_dir = dir_ + "/ckpt/" + job;
  req.worker_argv_prefix = {FP8_TEST_WORKER_PATH};
  req.extra_env = std::move(env);
  return req;
}

StatusOr<std::vector<RankProcess>> LauncherTest::LaunchTracked(Launcher& launcher,
                                                            const LaunchRequest& req) {
  auto ranks = launcher.Launch(req);
  if (ranks.ok()) launched_.insert(launched_.end(), ranks->begin(), ranks->end());
  return ranks;
}

void LauncherTest::Reap(int64_t pid) {
  int st;
  while (::waitpid(static_cast<pid_t>(pid), &st, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace fp8d::launcher::testing
