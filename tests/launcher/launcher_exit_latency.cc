// SPDX-License-Identifier: Apache-2.0
// Prints how long it takes from a worker's SIGKILL to the listener's OnWorkerExit, for a few
// poll intervals. Not a test (numbers depend on the machine):
//   build/bin/launcher_exit_latency [runs=20]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "daemon/launcher/launcher.h"

using namespace fp8d::launcher;
using Clock = std::chrono::steady_clock;

class ExitWaiter : public LauncherListener {
 public:
  void OnWorkerEvent(WorkerEvent e) override {
    std::lock_guard<std::mutex> l(mu_);
    if (!e.garbage && e.event.has_started()) started_ = true;
    cv_.notify_all();
  }
  void OnWorkerExit(WorkerExit) override {
    std::lock_guard<std::mutex> l(mu_);
    exited_at_ = Clock::now();
    exited_ = true;
    cv_.notify_all();
  }
  void WaitStarted() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return started_; });
  }
  Clock::time_point WaitExit() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return exited_; });
    return exited_at_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false, exited_ = false;
  Clock::time_point exited_at_;
};

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 20;
  std::string dir = std::filesystem::temp_directory_path() / ("fp8d-latency-" + std::to_string(::getpid()));
  for (int poll : {5, 20, 50}) {
    std::vector<double> ms;
    for (int i = 0; i < runs; ++i) {
      ExitWaiter waiter;
      LocalLauncherOptions o;
      o.detect_gpus = false;
      o.poll_interval_ms = poll;
      auto launcher = NewLocalLauncher(o, &waiter);
      LaunchRequest req;
      req.job_id = "lat";
      req.attempt = i + 1;
      req.kind = "train";
      req.spec_json = "{}";
      req.attempt_dir = dir + "/attempt-" + std::to_string(poll) + "-" + std::to_string(i);
      req.slots = {launcher->Slots().front()};
      req.worker_argv_prefix = {FP8_TEST_WORKER_PATH};
      req.extra_env = {{"FP8_TEST_MODE", "hang_after_start"}};
      auto ranks = launcher->Launch(req);
      if (!ranks.ok()) {
        std::fprintf(stderr, "%s\n", ranks.status().ToString().c_str());
        return 1;
      }
      waiter.WaitStarted();
      auto t0 = Clock::now();
      ::kill(static_cast<pid_t>((*ranks)[0].pid), SIGKILL);
      auto t1 = waiter.WaitExit();
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("poll_interval_ms=%d runs=%d SIGKILL->OnWorkerExit ms: min %.1f median %.1f p90 %.1f max %.1f\n",
                poll, runs, ms.front(), ms[ms.size() / 2], ms[ms.size() * 9 / 10], ms.back());
  }
  std::filesystem::remove_all(dir);
  return 0;
}
