// SPDX-License-Identifier: Apache-2.0
// fleet_bench: one fp8d supervising 10,000 live ranks (issue #28 item 5). A real JobManager on
// the SQLite store in a temp data dir, the real clock and fp8d's default options, in front of
// the FleetLauncher (fleet_launcher.h): one thread of this process plays every rank, writing
// its NDJSON lines into its rank-<r>.events file (`started`, a `progress` per rank per second,
// a `heartbeat` every 5 s), which the launchers' EventFileReader reads and delivers to the
// manager. Prints numbers; it is not a timed test.
//
// Measured over --seconds, once every job is RUNNING and --warmup-s has passed:
//   detection  fault → the job's watcher (JobManager::Watch, what WatchJob serves) sees the
//              attempt's failure; state changes reach watchers only once durable, so this is
//              also "committed in the store". SIGKILL: from the kill. Heartbeat loss: from the
//              rank's last line, and that minus the heartbeat timeout (what is fp8d's own).
//   RSS        /proc/self/status before the jobs (manager up, nothing created), with every
//              rank live, the largest sample in the window, and VmHWM.
//   CPU        per thread (/proc/self/task/*/stat) over the window: fp8d's threads (io, store,
//              launcher, the launcher's observer) apart from the fleet's rank player and this
//              thread; per event = fp8d's CPU / events delivered.
//   backlog    a handler posted to io: how long until it runs; a GetJob with attempts and
//              events: the store thread's queue plus one read; the store's write transactions
//              (count and time inside them, store::SetCommitObserver).
//
//   fleet_bench [--ranks 10000] [--ranks-per-job 8] [--seconds 120] [--faults 50]
//               [--warmup-s 15] [--heartbeat-timeout-s 0 (fp8d's default, 30)] [--seed 28]
//               [--data-dir DIR (default: a new temp dir, removed after)]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "bench/common/percentile.h"
#include "bench/fleet/fleet_run.h"
#include "daemon/store/job_store.h"

namespace {

using fp8d::bench::Fault;
using fp8d::bench::FaultRecord;
using fp8d::bench::FleetRun;
using fp8d::bench::SteadyMicros;

// Every store write transaction (what fp8d's fp8d_store_commit_seconds counts).
std::atomic<int64_t> g_commits{0};
std::atomic<int64_t> g_commit_ns{0};
void CountCommit(double seconds) {
  g_commits.fetch_add(1, std::memory_order_relaxed);
  g_commit_ns.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
}

using fp8d::bench::Percentile;

std::string Summary(const std::vector<double>& v, const char* unit) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "p50 %.1f %s  p99 %.1f %s  max %.1f %s  (n=%zu)", Percentile(v, 0.5), unit,
                Percentile(v, 0.99), unit, v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()), unit,
                v.size());
  return buf;
}

// kB from a /proc/self/status line ("VmRSS:", "VmHWM:").
int64_t StatusKb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::strlen(key));
  }
  return -1;
}

double Mib(int64_t kb) { return static_cast<double>(kb) / 1024.0; }

// CPU seconds (user + system) of each thread of this process, by kernel thread id.
std::map<pid_t, double> ThreadCpu() {
  std::map<pid_t, double> out;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string f;
    long long utime = 0, stime = 0;
    // After the name: state is field 3; utime and stime are fields 14 and 15.
    for (int i = 3; i <= 15 && fields >> f; ++i) {
      if (i == 14) utime = std::atoll(f.c_str());
      if (i == 15) stime = std::atoll(f.c_str());
    }
    out[static_cast<pid_t>(std::atoi(entry.path().filename().c_str()))] = static_cast<double>(utime + stime) / tick;
  }
  return out;
}

std::string ThreadName(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

double ProcessCpu() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::string Uptime() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct Flags {
  int ranks = 10000;
  int ranks_per_job = 8;
  int seconds = 120;
  int faults = 50;
  int warmup_s = 15;
  int heartbeat_timeout_s = 0;
  uint64_t seed = 28;
  std::string data_dir;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "--ranks") f->ranks = std::atoi(v);
    else if (a == "--ranks-per-job") f->ranks_per_job = std::atoi(v);
    else if (a == "--seconds") f->seconds = std::atoi(v);
    else if (a == "--faults") f->faults = std::atoi(v);
    else if (a == "--warmup-s") f->warmup_s = std::atoi(v);
    else if (a == "--heartbeat-timeout-s") f->heartbeat_timeout_s = std::atoi(v);
    else if (a == "--seed") f->seed = std::strtoull(v, nullptr, 10);
    else if (a == "--data-dir") f->data_dir = v;
    else return false;
  }
  return f->ranks > 0 && f->ranks_per_job > 0 && f->ranks % f->ranks_per_job == 0 && f->seconds > 0 &&
         f->faults >= 0 && f->warmup_s >= 0 && f->heartbeat_timeout_s >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: fleet_bench [--ranks N] [--ranks-per-job K (divides N)] [--seconds S] [--faults F]\n"
                 "                   [--warmup-s W] [--heartbeat-timeout-s T (0: fp8d's 30)] [--seed X]\n"
                 "                   [--data-dir DIR]\n");
    return 2;
  }
  // fp8d logs an info line per transition and per rank exit; the faults' lines would time the
  // terminal. Warnings still show.
  spdlog::set_level(spdlog::level::warn);
  fp8d::store::SetCommitObserver(&CountCommit);
  const int64_t timeout_ms = flags.heartbeat_timeout_s > 0 ? flags.heartbeat_timeout_s * 1000LL : 30'000;
  // Faults go in over the window's first part, so the last heartbeat loss is detected inside it.
  const double inject_span_s = static_cast<double>(flags.seconds) - static_cast<double>(timeout_ms) / 1000.0 - 10.0;
  if (flags.faults > 0 && inject_span_s <= 0) {
    std::fprintf(stderr, "--seconds must exceed the heartbeat timeout by more than 10 s to fit the faults\n");
    return 2;
  }

  bool remove_dir = false;
  if (flags.data_dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fp8d-fleet-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    flags.data_dir = tmpl;
    remove_dir = true;
  }
  fp8d::bench::FleetRunOptions o;
  o.data_dir = std::filesystem::absolute(flags.data_dir).string();
  o.jobs = flags.ranks / flags.ranks_per_job;
  o.ranks_per_job = flags.ranks_per_job;
  o.fleet.gpus_per_node = 8;
  o.fleet.nodes = (flags.ranks + 7) / 8;
  o.heartbeat_timeout_ms = flags.heartbeat_timeout_s * 1000LL;

  std::printf("fleet_bench: %d ranks = %d jobs x %d ranks on %d nodes x 8 GPU slots; progress every %lld ms, "
              "heartbeat every %lld ms per rank; heartbeat_timeout %lld ms%s; tick %lld ms; cancel grace %lld ms\n",
              flags.ranks, o.jobs, o.ranks_per_job, o.fleet.nodes, static_cast<long long>(o.fleet.progress_ms),
              static_cast<long long>(o.fleet.heartbeat_ms), static_cast<long long>(timeout_ms),
              flags.heartbeat_timeout_s > 0 ? "" : " (fp8d's default)", static_cast<long long>(o.tick_ms),
              static_cast<long long>(o.cancel_grace_ms));
  std::printf("data dir %s (SQLite store fp8d.db, attempt folders jobs/<id>/attempt-<n>); load %s\n",
              o.data_dir.c_str(), Uptime().c_str());
  std::fflush(stdout);
  int rc = 0;
  {
    auto started = FleetRun::Start(o);
    if (!started.ok()) {
      std::fprintf(stderr, "start: %s\n", started.status().ToString().c_str());
      return 1;
    }
    FleetRun& run = **started;
    const int64_t rss_empty = StatusKb("VmRSS:");

    const int64_t t_create = SteadyMicros();
    if (fp8::Status st = run.CreateJobs(); !st.ok()) {
      std::fprintf(stderr, "create: %s\n", st.ToString().c_str());
      return 1;
    }
    const double create_s = static_cast<double>(SteadyMicros() - t_create) / 1e6;
    if (!run.WaitFor([&] { return run.CountInState(fp8d::v1::RUNNING) == o.jobs; }, 600'000)) {
      std::fprintf(stderr, "only %d of %d jobs RUNNING after 600 s\n", run.CountInState(fp8d::v1::RUNNING), o.jobs);
      return 1;
    }
    const double ramp_s = static_cast<double>(SteadyMicros() - t_create) / 1e6;
    std::printf("created %d jobs in %.2f s; all RUNNING (%lld live ranks) %.2f s after the first create\n", o.jobs,
                create_s, static_cast<long long>(run.fleet().counts().live_ranks), ramp_s);
    std::this_thread::sleep_for(std::chrono::seconds(flags.warmup_s));
    const int64_t rss_live = StatusKb("VmRSS:");

    // ---- the window ----
    std::mt19937_64 rng(flags.seed);
    const int total_faults = 2 * flags.faults;
    const auto cpu0 = ThreadCpu();
    const double proc0 = ProcessCpu();
    const auto counts0 = run.fleet().counts();
    const int64_t commits0 = g_commits.load(), commit_ns0 = g_commit_ns.load();
    const int64_t t0 = SteadyMicros();
    const int64_t t_end = t0 + flags.seconds * 1'000'000LL;
    std::vector<double> io_delay;
    int64_t rss_max = rss_live, live_min = counts0.live_ranks;
    int injected = 0, refused = 0;
    int64_t next_probe = t0, next_second = t0;
    while (SteadyMicros() < t_end) {
      const int64_t now = SteadyMicros();
      // Fault i at i/total of the injection span, alternating kinds.
      while (injected + refused < total_faults &&
             now >= t0 + static_cast<int64_t>(inject_span_s * 1e6 * (injected + refused) / total_faults)) {
        const Fault kind = (injected + refused) % 2 == 0 ? Fault::kSigkill : Fault::kSilence;
        auto index = run.InjectFault(kind, rng);
        if (index.ok()) {
          ++injected;
        } else {
          ++refused;
          std::fprintf(stderr, "fault not injected: %s\n", index.status().ToString().c_str());
        }
      }
      if (now >= next_probe) {
        io_delay.push_back(run.IoDelayMs());
        next_probe += 100'000;
      }
      if (now >= next_second) {
        run.ProbeStore();
        rss_max = std::max(rss_max, StatusKb("VmRSS:"));
        live_min = std::min(live_min, run.fleet().counts().live_ranks);
        next_second += 1'000'000;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const double window_s = static_cast<double>(SteadyMicros() - t0) / 1e6;
    const auto cpu1 = ThreadCpu();
    const double proc1 = ProcessCpu();
    const auto counts1 = run.fleet().counts();
    const int64_t commits = g_commits.load() - commits0;
    const double commit_s = static_cast<double>(g_commit_ns.load() - commit_ns0) / 1e9;
    const std::vector<double> store_rt = run.store_round_trips();
    const int64_t rss_hwm = StatusKb("VmHWM:");
    // Late detections (a heartbeat loss injected last) still count; the fleet keeps running.
    run.WaitFor([&] {
      for (const FaultRecord& f : run.faults()) {
        if (f.detected_us == 0) return false;
      }
      return true;
    }, timeout_ms + 20'000);

    // ---- report ----
    const int64_t events = counts1.events_delivered - counts0.events_delivered;
    const int64_t lines = counts1.lines_written - counts0.lines_written;
    std::printf("\nwindow %.1f s: %lld event lines written, %lld events delivered (%.0f events/s), %lld exits; "
                "live ranks min %lld, at end %lld; load %s\n",
                window_s, static_cast<long long>(lines), static_cast<long long>(events),
                static_cast<double>(events) / window_s,
                static_cast<long long>(counts1.exits_delivered - counts0.exits_delivered),
                static_cast<long long>(live_min), static_cast<long long>(counts1.live_ranks), Uptime().c_str());

    std::vector<double> kill_ms, silent_ms, silent_beyond_ms, kill_again_s, silent_again_s;
    int undetected = 0, wrong = 0;
    for (const FaultRecord& f : run.faults()) {
      if (f.detected_us == 0) {
        ++undetected;
        std::printf("  undetected: %s attempt %d rank %d (%s)\n", f.job.c_str(), f.attempt, f.rank,
                    f.kind == Fault::kSigkill ? "SIGKILL" : "heartbeat loss");
        continue;
      }
      const double ms = static_cast<double>(f.detected_us - f.at_us) / 1000.0;
      const fp8d::v1::FailureClass expected = f.kind == Fault::kSigkill ? fp8d::v1::WORKER_CRASH : fp8d::v1::HUNG;
      if (f.failure != expected || f.state != fp8d::v1::RETRY_WAIT) {
        ++wrong;
        std::printf("  unexpected verdict: %s %s: %s\n", f.job.c_str(), fp8d::v1::JobState_Name(f.state).c_str(),
                    f.message.c_str());
      }
      const double again = f.running_again_us == 0 ? -1 : static_cast<double>(f.running_again_us - f.at_us) / 1e6;
      if (f.kind == Fault::kSigkill) {
        kill_ms.push_back(ms);
        if (again >= 0) kill_again_s.push_back(again);
      } else {
        silent_ms.push_back(ms);
        silent_beyond_ms.push_back(ms - static_cast<double>(timeout_ms));
        if (again >= 0) silent_again_s.push_back(again);
      }
    }
    std::printf("faults: %d injected (%d refused), %d undetected, %d with another verdict than expected\n",
                injected, refused, undetected, wrong);
    std::printf("  SIGKILL -> RETRY_WAIT (WORKER_CRASH) seen by the watcher:   %s\n", Summary(kill_ms, "ms").c_str());
    std::printf("  heartbeat loss -> RETRY_WAIT (HUNG), from the last line:     %s\n", Summary(silent_ms, "ms").c_str());
    std::printf("  heartbeat loss, beyond the %lld ms timeout:                  %s\n",
                static_cast<long long>(timeout_ms), Summary(silent_beyond_ms, "ms").c_str());
    std::printf("  fault -> next attempt RUNNING: SIGKILL %s; heartbeat loss %s\n", Summary(kill_again_s, "s").c_str(),
                Summary(silent_again_s, "s").c_str());

    std::printf("RSS: %.1f MiB before any job, %.1f MiB with every rank live, max %.1f MiB in the window, VmHWM %.1f MiB\n",
                Mib(rss_empty), Mib(rss_live), Mib(rss_max), Mib(rss_hwm));

    std::map<std::string, double> by_name;
    for (const auto& [tid, cpu] : cpu1) {
      auto it = cpu0.find(tid);
      by_name[ThreadName(tid)] += cpu - (it == cpu0.end() ? 0.0 : it->second);
    }
    double fleet_side = 0;
    std::printf("CPU over the window (s, %% of one core):");
    for (const auto& [name, cpu] : by_name) std::printf("  %s %.2f (%.1f%%)", name.c_str(), cpu, 100 * cpu / window_s);
    std::printf("\n");
    // The rank player and this thread (probes, fault injection) are not fp8d.
    for (const char* name : {"fleet-ranks", "fleet_bench"}) fleet_side += by_name.count(name) ? by_name[name] : 0;
    const double process = proc1 - proc0;
    const double daemon = process - fleet_side;
    std::printf("CPU: process %.2f s (%.1f%% of a core), fp8d's threads %.2f s (%.1f%%) = %.1f us per event delivered; "
                "the fleet's rank player %.2f s\n",
                process, 100 * process / window_s, daemon, 100 * daemon / window_s,
                events > 0 ? daemon * 1e6 / static_cast<double>(events) : 0.0,
                by_name.count("fleet-ranks") ? by_name["fleet-ranks"] : 0.0);
    std::printf("io backlog (a posted handler's wait): %s\n", Summary(io_delay, "ms").c_str());
    std::printf("store round trip (GetJob FULL through the store thread): %s\n", Summary(store_rt, "ms").c_str());
    std::printf("store commits: %lld (%.0f/s), %.3f ms each on average, %.1f%% of the window inside a commit\n",
                static_cast<long long>(commits), static_cast<double>(commits) / window_s,
                commits > 0 ? commit_s * 1e3 / static_cast<double>(commits) : 0.0, 100 * commit_s / window_s);
    rc = undetected == 0 && wrong == 0 ? 0 : 1;
    std::fflush(stdout);
  }
  if (remove_dir) {
    std::error_code ec;
    std::filesystem::remove_all(flags.data_dir, ec);
  }
  return rc;
}
