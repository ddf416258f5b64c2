// SPDX-License-Identifier: Apache-2.0
// manager_round_bench: what a scheduling round costs fp8d itself with 1,000 queued jobs across
// 3 queues, when a job's exit frees its slots. A JobManager on a memory store with the
// FakeLauncher and a ManualClock (as tests/core_manager's harness), driven from this thread
// (the io thread): 16 nodes x 8 GPUs held by ~125 RUNNING jobs, each queue at its quota
// (64/32/32, weights 2/1/1), 1,000 QUEUED jobs of ranks 1/2/4/8 and priorities 0..2.
//
// Each round: the oldest running job reports `done` and its ranks exit; then io runs until it
// has been idle for --quiet-ms. Measured per round:
//   busy    io-thread time spent in handlers from the exit until idle: the exit's verdict and
//           transition, the scheduling round (snapshot, PlanSchedule, applying the plan) and
//           handing each placement to the launcher. The store (memory) and launcher threads
//           run beside it and are not counted.
//   launch  wall time from the exit to the first replacement launch, in rounds that start one.
// Between rounds (not timed) the new attempts report `started` and the queue is topped up to
// 1,000 jobs. fp8d's log is set to warnings: its info line per transition is not timed.
//
//   manager_round_bench [--rounds N] [--quiet-ms MS] [--seed S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "bench/common/percentile.h"
#include "daemon/core/job_manager.h"
#include "tests/core_manager/fake_launcher.h"

namespace {

using fp8d::core::JobManager;
using fp8d::core::testing::FakeLauncher;
using fp8d::core::testing::FakeLauncherState;
using fp8d::core::testing::ManualClock;
using fp8d::core::testing::SharedStore;
using SteadyClock = std::chrono::steady_clock;

constexpr int kNodes = 16;
constexpr int kGpusPerNode = 8;
constexpr int kQueuedJobs = 1000;
const char* const kQueues[] = {"team-a", "team-b", "team-c"};

double Ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

using fp8d::bench::Percentile;

struct RunningAttempt {
  std::string job_id;
  int attempt = 1;
  int ranks = 1;
};

class Bench {
 public:
  Bench(uint64_t seed, int quiet_ms) : rng_(seed), quiet_ms_(quiet_ms) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fp8d-round-bench-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::exit(1);
    }
    data_dir_ = tmpl;
    for (int n = 0; n < kNodes; ++n) {
      for (int g = 0; g < kGpusPerNode; ++g) launcher_->slots.push_back({"node-" + std::to_string(n), g});
    }
  }
  ~Bench() {
    manager_.reset();
    std::error_code ec;
    std::filesystem::remove_all(data_dir_, ec);
  }

  bool Start() {
    fp8d::core::ManagerOptions o;
    o.data_dir = data_dir_;
    o.worker_argv_prefix = {"/bin/fake-worker"};
    o.tick_ms = 1000;  // the supervisor's timer rarely lands inside a measured round
    o.uniform01 = [] { return 0.5; };
    const int64_t quota[] = {64, 32, 32};
    const double weight[] = {2, 1, 1};
    for (int q = 0; q < 3; ++q) o.queues.push_back({kQueues[q], quota[q], 0, weight[q], {}});
    auto state = launcher_;
    manager_ = fp8d::core::NewJobManager(
        io_, std::move(o), std::make_unique<SharedStore>(fp8d::store::NewMemoryJobStore()),
        [state](fp8d::launcher::LauncherListener* l) { return std::make_unique<FakeLauncher>(state, l); }, &clock_);
    bool done = false;
    fp8::Status status;
    manager_->Start([&](fp8::Status st) {
      status = st;
      done = true;
    });
    RunUntil([&] { return done; });
    if (!status.ok()) std::fprintf(stderr, "start: %s\n", status.ToString().c_str());
    return status.ok();
  }

  // Creates the jobs (one group-commit batch or a few) and waits for every answer.
  bool CreateJobs(int count, int ranks_fixed, int queue_fixed, int priority_fixed) {
    const int32_t ranks[] = {1, 2, 4, 8};
    int answered = 0;
    bool ok = true;
    for (int i = 0; i < count; ++i) {
      fp8d::v1::Job job;
      job.set_display_name("bench");
      job.mutable_train()->mutable_model()->set_preset("tiny");
      job.mutable_train()->mutable_training()->set_max_steps(10);
      job.mutable_train()->set_output_dir(data_dir_ + "/out-" + std::to_string(++jobs_made_));
      job.mutable_resources()->set_ranks(ranks_fixed > 0 ? ranks_fixed : ranks[rng_() % 4]);
      job.set_queue(kQueues[queue_fixed >= 0 ? queue_fixed : static_cast<int>(rng_() % 3)]);
      job.set_priority(priority_fixed >= 0 ? priority_fixed : static_cast<int32_t>(rng_() % 3));
      fp8d::v1::CreateJobRequest request;
      *request.mutable_job() = std::move(job);
      manager_->CreateJob(std::move(request), [&](fp8::StatusOr<fp8d::v1::Job> r) {
        ++answered;
        if (!r.ok()) {
          ok = false;
          std::fprintf(stderr, "create: %s\n", r.status().ToString().c_str());
        }
      });
    }
    RunUntil([&] { return answered == count; });
    return ok;
  }

  // Runs io until `pred` holds (io runs out of work between the store's answers: restart it).
  void RunUntil(const std::function<bool()>& pred) {
    while (!pred()) {
      io_.restart();
      io_.run_one_for(std::chrono::milliseconds(1));
    }
  }

  // Runs io until no handler has run for quiet_ms. Returns the time spent inside handlers, and
  // the wall time from `since` to the first launch past `launches_before` (or -1).
  double Settle(SteadyClock::time_point since, size_t launches_before, double* first_launch_ms) {
    double busy = 0;
    if (first_launch_ms != nullptr) *first_launch_ms = -1;
    auto idle_since = SteadyClock::now();
    while (true) {
      const auto t0 = SteadyClock::now();
      io_.restart();
      const size_t ran = io_.poll_one();
      const auto t1 = SteadyClock::now();
      if (first_launch_ms != nullptr && *first_launch_ms < 0 && launcher_->LaunchCount() > launches_before) {
        *first_launch_ms = Ms(t1 - since);
      }
      if (ran > 0) {
        busy += Ms(t1 - t0);
        idle_since = t1;
      } else if (Ms(t1 - idle_since) >= quiet_ms_) {
        return busy;
      }
    }
  }

  // Every launch since `from` reports `started` from each rank; they join the running list.
  void StartLaunches(size_t from) {
    const size_t to = launcher_->LaunchCount();
    for (size_t i = from; i < to; ++i) {
      const fp8d::launcher::LaunchRequest r = launcher_->Launch(i);
      const int ranks = static_cast<int>(r.slots.size());
      for (int k = 0; k < ranks; ++k) Event(r.job_id, r.attempt, k, "{\"started\":{\"rank\":" + std::to_string(k) + "}}");
      running_.push_back({r.job_id, r.attempt, ranks});
    }
    launches_seen_ = to;
  }

  // The oldest running job finishes: `done`, then every rank exits 0.
  void FinishOldest() {
    const RunningAttempt a = running_.front();
    running_.pop_front();
    for (int k = 0; k < a.ranks; ++k) {
      Event(a.job_id, a.attempt, k, "{\"done\":{\"result\":{\"final_loss\":1.25}}}");
      fp8d::launcher::WorkerExit ex;
      ex.job_id = a.job_id;
      ex.attempt = a.attempt;
      ex.rank = k;
      ex.exit_code = 0;
      launcher_->listener->OnWorkerExit(ex);
    }
  }

  int Queued() const { return static_cast<int>(manager_->CountActive().queued); }
  size_t Launches() const { return launcher_->LaunchCount(); }
  size_t launches_seen() const { return launches_seen_; }
  size_t running() const { return running_.size(); }

 private:
  void Event(const std::string& job_id, int attempt, int rank, const std::string& payload_json) {
    fp8d::launcher::WorkerEvent ev;
    ev.job_id = job_id;
    ev.attempt = attempt;
    ev.rank = rank;
    // The line as the worker writes it: {"time": ..., "<type>": {...}}.
    ev.raw = "{\"time\":" + std::to_string(clock_.NowMs() / 1000.0) + "," + payload_json.substr(1);
    if (!google::protobuf::util::JsonStringToMessage(ev.raw, &ev.event).ok()) {
      std::fprintf(stderr, "bad event line %s\n", ev.raw.c_str());
      std::exit(1);
    }
    int64_t& offset = offsets_[job_id + "/" + std::to_string(attempt) + "/" + std::to_string(rank)];
    offset += static_cast<int64_t>(ev.raw.size()) + 1;
    ev.offset_after = offset;
    launcher_->listener->OnWorkerEvent(std::move(ev));
  }

  std::mt19937_64 rng_;
  int quiet_ms_;
  boost::asio::io_context io_;
  ManualClock clock_{1'800'000'000'000};
  std::shared_ptr<FakeLauncherState> launcher_ = std::make_shared<FakeLauncherState>();
  std::unique_ptr<JobManager> manager_;
  std::string data_dir_;
  int jobs_made_ = 0;
  size_t launches_seen_ = 0;
  std::deque<RunningAttempt> running_;
  std::map<std::string, int64_t> offsets_;
};

}  // namespace

int main(int argc, char** argv) {
  int rounds = 200;
  int quiet_ms = 20;
  uint64_t seed = 28;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--quiet-ms") == 0 && i + 1 < argc) {
      quiet_ms = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: manager_round_bench [--rounds N] [--quiet-ms MS] [--seed S]\n");
      return 2;
    }
  }
  // The manager's info lines (one per transition) would time the terminal, not the round.
  spdlog::set_level(spdlog::level::warn);
  Bench bench(seed, std::max(1, quiet_ms));
  if (!bench.Start()) return 1;
  // The cluster full, each queue at its quota, at the queued jobs' top priority (no
  // preemption): per queue 1-rank jobs, a few 2-rank ones.
  const int held[] = {64, 32, 32};
  for (int q = 0; q < 3; ++q) {
    const int pairs = held[q] / 32;  // 2-rank jobs: 2, 1, 1
    if (!bench.CreateJobs(pairs, 2, q, 2) || !bench.CreateJobs(held[q] - 2 * pairs, 1, q, 2)) return 1;
  }
  bench.Settle(SteadyClock::now(), 0, nullptr);
  bench.StartLaunches(0);
  bench.Settle(SteadyClock::now(), 0, nullptr);
  if (!bench.CreateJobs(kQueuedJobs, 0, -1, -1)) return 1;
  bench.Settle(SteadyClock::now(), 0, nullptr);
  std::printf("cluster %d nodes x %d GPUs, 3 queues (quota 64/32/32, weight 2/1/1): %zu running, %d queued\n",
              kNodes, kGpusPerNode, bench.running(), bench.Queued());

  std::vector<double> busy;
  std::vector<double> to_launch;
  size_t launched = 0;
  int min_queued = kQueuedJobs;
  for (int r = 0; r < rounds && bench.running() > 0; ++r) {
    const size_t before = bench.Launches();
    const auto t0 = SteadyClock::now();
    bench.FinishOldest();
    double first_launch = -1;
    busy.push_back(bench.Settle(t0, before, &first_launch));
    if (first_launch >= 0) to_launch.push_back(first_launch);
    launched += bench.Launches() - before;
    min_queued = std::min(min_queued, bench.Queued());
    bench.StartLaunches(bench.launches_seen());
    bench.Settle(SteadyClock::now(), 0, nullptr);
    const int top_up = kQueuedJobs - bench.Queued();
    if (top_up > 0 && !bench.CreateJobs(top_up, 0, -1, -1)) return 1;
    bench.Settle(SteadyClock::now(), 0, nullptr);
  }
  std::printf("rounds=%zu (queued >= %d)  busy p50=%.3f ms p99=%.3f ms max=%.3f ms\n", busy.size(), min_queued,
              Percentile(busy, 0.50), Percentile(busy, 0.99), busy.empty() ? 0.0 : *std::max_element(busy.begin(), busy.end()));
  std::printf("launches=%zu in %zu rounds  exit->first launch p50=%.3f ms p99=%.3f ms\n", launched, to_launch.size(),
              Percentile(to_launch, 0.50), Percentile(to_launch, 0.99));
  return 0;
}
