// SPDX-License-Identifier: Apache-2.0
// Submit → RUNNING on a one-node Slurm cluster (scripts/slurm-cluster.sh), three ways, N times
// each, interleaved (the order rotates every round):
//   sbatch alone: `sbatch --wrap 'srun … sh -c "echo started; sleep …"'`, timed until the task's
//                 first line is in its output file (the task runs: what RUNNING means to fp8d);
//   by hand:      fp8d's own batch script and sbatch arguments (copied from its attempt),
//                 timed until the rank's first event line;
//   fp8d:         CreateJob (1 rank, the fault-injection worker) timed until GetJob says
//                 RUNNING (the rank wrote `started` and fp8d read it, made it durable).
// slurmctld starts batch jobs only at its ~1 s wake-ups, and not within 3 s of its previous
// scheduler run (slurm_scheduler_clock.h), so when a job is submitted decides whether it waits
// 0.1 s or 3 s. Every submission here is therefore made the same 250 ms before the wake-up
// that will schedule it, read from slurmctld's log; each path's "Slurm's wait" line shows how
// many were started at that wake-up. fp8d's own share is also measured directly: CreateJob →
// the batch script written (sbatch runs next), and the rank's first event line → GetJob says
// RUNNING. Every path is timed by the same 5 ms poll loop (not a busy loop: on a 2-core machine
// that would take a core from Slurm's daemons during the very start it times). Prints median,
// p90 and mean.
// Usage: [FP8D_BENCH_SLURM_POLL=1s] slurm_submit_bench [N]   (default 10). Not a test: nothing
// asserts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "bench/slurm/slurm_scheduler_clock.h"
#include "tests/integration/daemon_process.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace fp8d::itest;
using fp8d::bench::SlurmSchedulerClock;
using fp8d::bench::WallTime;
using WallClock = std::chrono::system_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Nearest rank.
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

// Every path is timed by the same loop: a check every 5 ms (up to 60 s). Not a busy loop, so
// the timing does not take a core from Slurm's daemons on a small machine.
bool Poll(const std::function<bool()>& done) {
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

bool WaitIdle(const std::map<std::string, std::string>& env) {
  // The previous iteration's job must be gone and its node idle again.
  return PollUntil([&] {
    return RunProcess({"/usr/bin/env", "squeue", "-h"}, env).out.empty() &&
           RunProcess({"/usr/bin/env", "sinfo", "-h", "-t", "idle", "-o", "%D"}, env).out == "1\n";
  }, std::chrono::seconds(60));
}

// How long before the scheduling wake-up each submission is made.
constexpr auto kLead = std::chrono::milliseconds(250);

// One way of submitting: end-to-end times, and Slurm's part of each.
struct Path {
  std::vector<double> total;       // submit → running, ms
  std::vector<double> slurm_wait;  // submit → Slurm allocated the job, ms
  int at_aimed_wake_up = 0;
};

// Waits for an idle cluster, then until kLead before the wake-up at which slurmctld will
// schedule a job submitted now. Returns that wake-up. (A scheduler run in the meantime moves
// it; after 10 such moves the submission goes ahead and its row shows the miss.)
WallTime AlignToScheduler(SlurmSchedulerClock& clock, const std::map<std::string, std::string>& env) {
  WaitIdle(env);
  WallTime wake_up;
  for (int moves = 0; moves < 10; ++moves) {
    const auto last_run = clock.LastSchedulerRun();
    wake_up = clock.NextSchedulingWakeUp(WallClock::now() + kLead + std::chrono::milliseconds(50));
    std::this_thread::sleep_until(wake_up - kLead);
    if (clock.LastSchedulerRun() == last_run) break;
  }
  return wake_up;
}

// After a run: when Slurm allocated the job, against when it was submitted and the wake-up aimed
// at. The allocation is also the clock's newest reference.
void RecordSlurmWait(SlurmSchedulerClock& clock, Path& path, const std::string& slurm_id, WallTime submitted,
                     WallTime aimed) {
  std::optional<WallTime> allocated;
  PollUntil([&] { return (allocated = clock.AllocationOf(slurm_id)).has_value(); }, std::chrono::seconds(5));
  if (!allocated) {
    std::fprintf(stderr, "no allocation of Slurm job %s in slurmctld's log\n", slurm_id.c_str());
    return;
  }
  path.slurm_wait.push_back(std::chrono::duration<double, std::milli>(*allocated - submitted).count());
  if (std::chrono::abs(*allocated - aimed) < std::chrono::milliseconds(100)) ++path.at_aimed_wake_up;
  clock.Observe(*allocated);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
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
  // Every scheduler run logged, for the clock.
  RunProcess({"/usr/bin/env", "scontrol", "setdebug", "debug"}, env);
  SlurmSchedulerClock clock(cluster + "/slurmctld.log");
  const std::string config = tmp.path() + "/fp8d.yaml";
  // FP8D_BENCH_SLURM_POLL (e.g. "5s"): fp8d's squeue period, to see whether its polls matter.
  const char* poll = std::getenv("FP8D_BENCH_SLURM_POLL");
  std::ofstream(config) << "launcher: slurm\nslurm: {partition: debug, poll_interval: "
                        << (poll != nullptr && *poll != '\0' ? poll : "1s") << "}\n";
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
    Path alone, by_hand, via_fp8d;
    std::vector<double> before_sbatch, after_start;
    std::string fp8d_dir;  // the attempt dir of fp8d's latest job: the by-hand path copies it

    // sbatch --wrap of a task that prints one line to `out`; its Slurm job id.
    auto sbatch_wrap = [&](const std::string& out) -> std::optional<std::string> {
      ProcessResult s = RunProcess({"/usr/bin/env", "sbatch", "--parsable", "-o", "/dev/null", "--wrap",
                                    "srun --output=" + out + " sh -c 'echo started; sleep 0.3'"},
                                   env);
      if (s.exit_code != 0) {
        std::fprintf(stderr, "sbatch: %s\n", s.err.c_str());
        return std::nullopt;
      }
      return Trim(s.out);
    };
    auto first_line_in = [](const std::string& file) {
      return Poll([&] {
        std::ifstream in(file);
        std::string line;
        return static_cast<bool>(std::getline(in, line));
      });
    };

    // One untimed job: its allocation anchors the clock on slurmctld's wake-ups.
    {
      const std::string out = tmp.path() + "/warm-up.out";
      auto id = sbatch_wrap(out);
      if (!id || !first_line_in(out)) {
        rc = 1;
      } else if (auto t = clock.AllocationOf(*id)) {
        clock.Observe(*t);
      } else {
        std::fprintf(stderr, "slurmctld logged no allocation (is the log at %s?)\n", (cluster + "/slurmctld.log").c_str());
        rc = 1;
      }
    }

    auto run_alone = [&](int i) {
      const std::string out = tmp.path() + "/alone-" + std::to_string(i) + ".out";
      const WallTime aimed = AlignToScheduler(clock, env);
      const WallTime wall0 = WallClock::now();
      const auto t0 = Clock::now();
      auto id = sbatch_wrap(out);
      if (!id) return false;
      first_line_in(out);
      alone.total.push_back(Ms(Clock::now() - t0));
      RecordSlurmWait(clock, alone, *id, wall0, aimed);
      return true;
    };

    auto run_fp8d = [&](int i) {
      fp8d::v1::Job job = TestTrainJob(tmp.path() + "/out-" + std::to_string(i), 1);
      const WallTime aimed = AlignToScheduler(clock, env);
      const WallTime wall1 = WallClock::now();
      const auto t1 = Clock::now();
      auto created = daemon.client().CreateJob(job);
      if (!created.ok()) {
        std::fprintf(stderr, "CreateJob: %s\n", created.status().ToString().c_str());
        return false;
      }
      // fp8d's own share: before sbatch (create → the batch script is written, just before
      // sbatch runs) and after the rank started (its first event line → GetJob says RUNNING).
      const std::string dir = daemon.data_dir() + "/jobs/" +
                              created->name().substr(created->name().find('/') + 1) + "/attempt-1";
      std::optional<Clock::time_point> t_script, t_event, t_running;
      Poll([&] {
        if (!t_script && std::filesystem::exists(dir + "/slurm.sbatch")) t_script = Clock::now();
        std::error_code ec;
        if (!t_event && std::filesystem::file_size(dir + "/rank-0.events", ec) > 0 && !ec) t_event = Clock::now();
        auto j = daemon.client().GetJob(created->name());
        if (j.ok() && (j->state() == fp8d::v1::RUNNING || j->state() == fp8d::v1::SUCCEEDED)) {
          t_running = Clock::now();
        }
        return t_running.has_value();
      });
      if (!t_running || !t_script || !t_event) {
        std::fprintf(stderr, "job never reached RUNNING\n%s", daemon.Log().c_str());
        return false;
      }
      // The Slurm job id is every rank's pid in the API (job.proto, RankPlacement).
      std::string slurm_id;
      auto full = daemon.client().GetJob(created->name(), fp8d::v1::JOB_VIEW_FULL);
      if (full.ok() && full->attempts_size() > 0 && full->attempts(0).ranks_size() > 0) {
        slurm_id = std::to_string(full->attempts(0).ranks(0).pid());
      }
      via_fp8d.total.push_back(Ms(*t_running - t1));
      before_sbatch.push_back(Ms(*t_script - t1));
      after_start.push_back(Ms(*t_running - *t_event));
      RecordSlurmWait(clock, via_fp8d, slurm_id, wall1, aimed);
      (void)WaitTerminal(daemon.client(), created->name(), std::chrono::seconds(60));
      fp8d_dir = dir;
      return true;
    };

    // fp8d's own batch script and sbatch arguments, submitted by hand into a fresh copy of
    // the attempt directory: the same Slurm job without fp8d.
    auto run_by_hand = [&](int i) {
      const std::string& dir = fp8d_dir;
      const std::string copy = tmp.path() + "/by-hand-" + std::to_string(i);
      std::filesystem::create_directories(copy + "/rendezvous");
      std::filesystem::copy_file(dir + "/spec.json", copy + "/spec.json");
      std::string script;
      {
        std::ifstream in(dir + "/slurm.sbatch");
        script.assign(std::istreambuf_iterator<char>(in), {});
      }
      for (size_t at; (at = script.find(dir)) != std::string::npos;) script.replace(at, dir.size(), copy);
      std::ofstream(copy + "/slurm.sbatch") << script;
      std::ofstream(copy + "/rank-0.events").flush();
      std::map<std::string, std::string> job_env = env;
      job_env["FP8D_CHECKPOINT_DIR"] = copy + "/ckpt";
      job_env["CUDA_VISIBLE_DEVICES"] = "";
      job_env["FP8_TEST_STEPS"] = "1";
      job_env["FP8_TEST_STEP_MS"] = "300";
      const WallTime aimed = AlignToScheduler(clock, env);
      const WallTime wall2 = WallClock::now();
      const auto t2 = Clock::now();
      ProcessResult h = RunProcess({"/usr/bin/env", "sbatch", "--parsable", "--job-name=by-hand", "--nodes=1",
                                    "--ntasks=1", "--ntasks-per-node=1", "--no-requeue", "--export=ALL",
                                    "--chdir=" + copy, "--output=" + copy + "/slurm.out", "--partition=debug",
                                    copy + "/slurm.sbatch"},
                                   job_env);
      if (h.exit_code != 0) {
        std::fprintf(stderr, "sbatch (by hand): %s\n", h.err.c_str());
        return false;
      }
      Poll([&] {
        std::error_code ec;
        return std::filesystem::file_size(copy + "/rank-0.events", ec) > 0;
      });
      by_hand.total.push_back(Ms(Clock::now() - t2));
      RecordSlurmWait(clock, by_hand, Trim(h.out), wall2, aimed);
      return true;
    };

    // The order rotates (by hand always after at least one fp8d run, whose script it copies),
    // so no path always follows the same one.
    for (int i = 0; rc == 0 && i < n; ++i) {
      bool ok = true;
      switch (i % 3) {
        case 0: ok = run_alone(i) && run_fp8d(i) && run_by_hand(i); break;
        case 1: ok = run_fp8d(i) && run_by_hand(i) && run_alone(i); break;
        default: ok = run_by_hand(i) && run_alone(i) && run_fp8d(i); break;
      }
      if (!ok) rc = 1;
    }
    if (rc == 0) {
      auto line = [](const std::string& what, const std::vector<double>& v) {
        std::printf("%-58s median %7.1f ms  p90 %7.1f ms  mean %7.1f ms  (n=%zu)\n", what.c_str(), Median(v),
                    Percentile(v, 0.9), Mean(v), v.size());
      };
      auto path = [&](const char* what, const Path& p) {
        line(std::string("submit->running ") + what + ":", p.total);
        line("  Slurm's wait, submit->allocated:", p.slurm_wait);
        std::printf("  allocated at the wake-up aimed at: %d of %zu\n", p.at_aimed_wake_up, p.total.size());
      };
      std::printf("slurmctld wake-up period %.4f s; every submission %lld ms before its wake-up\n",
                  clock.period_seconds(), static_cast<long long>(kLead.count()));
      path("sbatch --wrap alone", alone);
      path("fp8d's script and arguments by hand", by_hand);
      path("via fp8d", via_fp8d);
      line("fp8d's own share, create -> sbatch:", before_sbatch);
      line("fp8d's own share, first event -> RUNNING:", after_start);
      std::printf("via fp8d - sbatch alone (medians): %+.1f ms;  via fp8d - by hand: %+.1f ms\n",
                  Median(via_fp8d.total) - Median(alone.total), Median(via_fp8d.total) - Median(by_hand.total));
    }
  }
  RunProcess({"/bin/bash", script, "stop", cluster});
  return rc;
}
