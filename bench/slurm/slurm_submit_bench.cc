// Submit → RUNNING on a one-node Slurm cluster (scripts/slurm-cluster.sh), two ways, N times
// each, alternating:
//   sbatch alone: `sbatch --wrap 'srun … sh -c "echo started; sleep …"'`, timed until the task's
//                 first line is in its output file (the task runs: what RUNNING means to fp8d);
//   fp8d:         CreateJob (1 rank, the fault-injection worker) timed until GetJob says
//                 RUNNING (the rank wrote `started` and fp8d read it, made it durable).
// Both are polled every 2 ms. Prints the median and the mean of each and fp8d's overhead.
// Usage: slurm_submit_bench [N]   (default 10). Not a test: nothing asserts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/daemon_process.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace fp8d::itest;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

bool WaitIdle(const std::map<std::string, std::string>& env) {
  // The previous iteration's job must be gone, so each submission finds the node free.
  return PollUntil([&] { return RunProcess({"/usr/bin/env", "squeue", "-h"}, env).out.empty(); }, std::chrono::seconds(60));
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 10;
  TempDir tmp;
  const std::string script = std::string(FP8D_SOURCE_DIR) + "/scripts/slurm-cluster.sh";
  const std::string cluster = tmp.path() + "/cluster";
  ProcessResult up = RunProcess({"/bin/bash", script, "start", cluster, "1"}, {}, std::chrono::seconds(90));
  if (up.exit_code != 0) {
    std::fprintf(stderr, "cluster did not start: %s\n", up.err.c_str());
    return 1;
  }
  const std::map<std::string, std::string> env = {{"SLURM_CONF", cluster + "/slurm.conf"}};
  const std::string config = tmp.path() + "/fp8d.yaml";
  std::ofstream(config) << "launcher: slurm\nslurm: {partition: debug, poll_interval: 1s}\n";
  DaemonOptions options;
  options.worker = TestWorkerPath();
  options.env = env;
  options.env["FP8_TEST_STEPS"] = "1";
  options.env["FP8_TEST_STEP_MS"] = "300";
  options.extra_args = {"--config", config};
  options.log_level = "info";
  int rc = 0;
  {
    Daemon daemon(tmp.path() + "/data", options);
    if (!daemon.Start().ok()) {
      std::fprintf(stderr, "fp8d did not start\n%s", daemon.Log().c_str());
      rc = 1;
    }
    std::vector<double> alone, via_fp8d;
    for (int i = 0; rc == 0 && i < n; ++i) {
      WaitIdle(env);
      const std::string out = tmp.path() + "/alone-" + std::to_string(i) + ".out";
      const auto t0 = Clock::now();
      ProcessResult s = RunProcess({"/usr/bin/env", "sbatch", "--parsable", "-o", "/dev/null", "--wrap",
                                    "srun --output=" + out + " sh -c 'echo started; sleep 0.3'"},
                                   env);
      if (s.exit_code != 0) {
        std::fprintf(stderr, "sbatch: %s\n", s.err.c_str());
        rc = 1;
        break;
      }
      PollUntil([&] {
        std::ifstream in(out);
        std::string line;
        return static_cast<bool>(std::getline(in, line));
      }, std::chrono::seconds(60));
      alone.push_back(Ms(Clock::now() - t0));

      WaitIdle(env);
      fp8d::v1::Job job = TestTrainJob(tmp.path() + "/out-" + std::to_string(i), 1);
      const auto t1 = Clock::now();
      auto created = daemon.client().CreateJob(job);
      if (!created.ok()) {
        std::fprintf(stderr, "CreateJob: %s\n", created.status().ToString().c_str());
        rc = 1;
        break;
      }
      const bool running = [&] {
        const auto end = Clock::now() + std::chrono::seconds(60);
        while (Clock::now() < end) {
          auto j = daemon.client().GetJob(created->name());
          if (j.ok() && (j->state() == fp8d::v1::RUNNING || j->state() == fp8d::v1::SUCCEEDED)) return true;
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        return false;
      }();
      if (!running) {
        std::fprintf(stderr, "job never reached RUNNING\n%s", daemon.Log().c_str());
        rc = 1;
        break;
      }
      via_fp8d.push_back(Ms(Clock::now() - t1));
      (void)WaitTerminal(daemon.client(), created->name(), std::chrono::seconds(60));
    }
    if (rc == 0) {
      std::printf("submit->running sbatch alone: median %.1f ms, mean %.1f ms (n=%zu)\n", Median(alone),
                  Mean(alone), alone.size());
      std::printf("submit->running via fp8d:     median %.1f ms, mean %.1f ms (n=%zu)\n", Median(via_fp8d),
                  Mean(via_fp8d), via_fp8d.size());
      std::printf("fp8d overhead: median %.1f ms, mean %.1f ms\n", Median(via_fp8d) - Median(alone),
                  Mean(via_fp8d) - Mean(alone));
    }
  }
  RunProcess({"/bin/bash", script, "stop", cluster});
  return rc;
}
