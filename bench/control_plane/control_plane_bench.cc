// Control-plane benchmark: starts fp8d (with the fault-injection worker) as a separate
// process and measures, from this process over loopback gRPC:
//   1. failure detection: worker SIGKILL → the state change reaches a WatchJob client;
//   2. durable CreateJob throughput with 64 concurrent clients (each its own connection);
//   3. GetJob throughput and latency percentiles with 64 clients;
//   4. WatchJob fan-out: 1,000 watchers on one running job; latency from the worker writing a
//      progress event (its "time" field in rank-0.events) to each watcher receiving it;
//   5. daemon RSS with all jobs stored, then restart (SIGTERM, start) → SERVING time and RSS.
// Prints one line per number. Not a test: nothing here asserts.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "tests/integration/daemon_process.h"

namespace {

using Clock = std::chrono::steady_clock;
using fp8d::itest::Daemon;
using fp8d::itest::DaemonOptions;
using fp8d::v1::Job;

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

long RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

void Die(const std::string& what) {
  std::fprintf(stderr, "control_plane_bench: %s\n", what.c_str());
  std::exit(1);
}

Job QueuedJob(const std::string& out) {
  Job job = fp8d::itest::TestTrainJob(out, 1);
  job.set_display_name("bench");
  return job;
}

void FailureDetection(Daemon& daemon, const std::string& out, int trials) {
  std::vector<double> ms;
  for (int t = 0; t < trials; ++t) {
    Job spec = fp8d::itest::TestTrainJob(out + "/fd" + std::to_string(t), 1000000);
    spec.mutable_retry()->set_max_attempts(1);
    auto created = daemon.client().CreateJob(spec);
    if (!created.ok()) Die(created.status().ToString());
    auto running = fp8d::itest::WaitState(daemon.client(), created->name(), fp8d::v1::RUNNING);
    if (!running.ok() || running->attempts_size() == 0 || running->attempts(0).ranks_size() == 0) {
      Die("failure detection: job never ran");
    }
    const int64_t pid = running->attempts(0).ranks(0).pid();
    std::atomic<bool> ready{false};
    Clock::time_point killed_at, seen_at;
    std::thread watcher([&] {
      fp8d::client::JobClient c(daemon.address());
      (void)c.WatchJob(created->name(), 0, [&](const Job& j) {
        ready = true;
        if (j.state() != fp8d::v1::RUNNING) {
          seen_at = Clock::now();
          return false;
        }
        return true;
      });
    });
    while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    killed_at = Clock::now();
    kill(static_cast<pid_t>(pid), SIGKILL);
    watcher.join();
    ms.push_back(std::chrono::duration<double, std::milli>(seen_at - killed_at).count());
  }
  std::printf("failure_detection_ms (worker SIGKILL -> FAILED seen by a watcher, %d trials): median %.1f max %.1f\n",
              trials, Percentile(ms, 50), *std::max_element(ms.begin(), ms.end()));
}

std::vector<std::string> CreatePhase(Daemon& daemon, const std::string& out, int clients, int jobs) {
  std::vector<std::vector<double>> latencies(clients);
  std::vector<std::vector<std::string>> names(clients);
  std::atomic<int> next{0};
  std::atomic<int> errors{0};
  std::vector<std::unique_ptr<fp8d::client::JobClient>> conns;
  for (int c = 0; c < clients; ++c) {
    conns.push_back(std::make_unique<fp8d::client::JobClient>(daemon.address()));
    (void)conns.back()->IsServing();  // connect before the clock starts
  }
  const Job spec = QueuedJob(out + "/q");
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      while (next.fetch_add(1) < jobs) {
        const auto t0 = Clock::now();
        auto r = conns[c]->CreateJob(spec);
        latencies[c].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (!r.ok()) {
          if (errors.fetch_add(1) < 3) std::fprintf(stderr, "create: %s\n", r.status().ToString().c_str());
          continue;
        }
        names[c].push_back(r->name());
      }
    });
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  std::vector<std::string> all_names;
  for (int c = 0; c < clients; ++c) {
    all.insert(all.end(), latencies[c].begin(), latencies[c].end());
    all_names.insert(all_names.end(), names[c].begin(), names[c].end());
  }
  std::printf("create_jobs_per_s (durable CreateJob, %d clients, %d jobs): %.0f  (latency p50 %.2f ms p99 %.2f ms, errors %d)\n",
              clients, jobs, static_cast<double>(all_names.size()) / secs, Percentile(all, 50),
              Percentile(all, 99), errors.load());
  return all_names;
}

void GetPhase(Daemon& daemon, const std::vector<std::string>& names, int clients, double seconds) {
  std::vector<std::vector<double>> latencies(clients);
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::vector<std::unique_ptr<fp8d::client::JobClient>> conns;
  for (int c = 0; c < clients; ++c) {
    conns.push_back(std::make_unique<fp8d::client::JobClient>(daemon.address()));
    (void)conns.back()->IsServing();
  }
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      size_t i = static_cast<size_t>(c) * 7919;
      while (!stop) {
        const std::string& n = names[i++ % names.size()];
        const auto t0 = Clock::now();
        auto r = conns[c]->GetJob(n);
        latencies[c].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (!r.ok()) ++errors;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::printf("get_jobs_per_s (GetJob, %d clients, %.0f s): %.0f  (latency p50 %.3f ms p99 %.3f ms, errors %d)\n",
              clients, seconds, static_cast<double>(all.size()) / secs, Percentile(all, 50),
              Percentile(all, 99), errors.load());
}

// step → the worker's event time (seconds since the epoch), from rank-0.events.
std::map<int64_t, double> ProgressTimes(const std::string& events_path) {
  std::map<int64_t, double> out;
  std::ifstream in(events_path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("type", "") != "progress") continue;
    if (j.contains("step") && j.contains("time")) out[j["step"].get<int64_t>()] = j["time"].get<double>();
  }
  return out;
}

void WatchPhase(Daemon& daemon, const std::string& job_name, int watchers, double seconds) {
  struct Sample {
    int64_t step;
    double received;
  };
  std::vector<std::vector<Sample>> samples(watchers);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(watchers);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  const int kChannels = 16;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    channels.push_back(grpc::CreateCustomChannel(daemon.address(), grpc::InsecureChannelCredentials(), args));
  }
  std::mutex mu;
  std::atomic<int> connected{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < watchers; ++w) {
    contexts[w] = std::make_unique<grpc::ClientContext>();
    threads.emplace_back([&, w] {
      auto stub = fp8d::v1::JobService::NewStub(channels[w % kChannels]);
      fp8d::v1::WatchJobRequest request;
      request.set_name(job_name);
      auto reader = stub->WatchJob(contexts[w].get(), request);
      fp8d::v1::WatchJobResponse r;
      bool first = true;
      while (reader->Read(&r)) {
        const double now = WallSeconds();
        if (first) {
          ++connected;
          first = false;
          continue;  // the snapshot is not a fresh update
        }
        samples[w].push_back({r.job().progress().step(), now});
      }
      (void)reader->Finish();
    });
  }
  while (connected.load() < watchers) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  for (auto& c : contexts) c->TryCancel();
  for (auto& t : threads) t.join();

  auto got = daemon.client().GetJob(job_name, fp8d::v1::JOB_VIEW_BASIC);
  const std::string id = job_name.substr(5);
  const auto times = ProgressTimes(daemon.data_dir() + "/jobs/" + id + "/attempt-" +
                                   std::to_string(got.ok() ? got->attempt() : 1) + "/rank-0.events");
  std::vector<double> lat;
  size_t total = 0;
  for (const auto& per : samples) {
    for (const auto& s : per) {
      ++total;
      auto it = times.find(s.step);
      if (it != times.end()) lat.push_back((s.received - it->second) * 1000.0);
    }
  }
  std::printf("watch_progress_latency_ms (%d watchers on one job, worker event -> client, %zu samples): p50 %.1f p99 %.1f max %.1f\n",
              watchers, lat.size(), Percentile(lat, 50), Percentile(lat, 99),
              lat.empty() ? 0.0 : *std::max_element(lat.begin(), lat.end()));
  (void)total;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp8d control-plane benchmark"};
  int jobs = 100000, clients = 64, watchers = 1000, trials = 5;
  double get_seconds = 5, watch_seconds = 10;
  app.add_option("--jobs", jobs, "jobs created (and stored for the restart measurement)");
  app.add_option("--clients", clients, "concurrent clients for CreateJob/GetJob");
  app.add_option("--watchers", watchers, "WatchJob streams on one job");
  app.add_option("--failure-trials", trials, "worker SIGKILL trials");
  app.add_option("--get-seconds", get_seconds);
  app.add_option("--watch-seconds", watch_seconds);
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);  // each number reaches a redirected log at once

  fp8d::itest::TempDir tmp;
  DaemonOptions options;
  options.cpu_slots = 1;
  options.env["FP8_TEST_STEP_MS"] = "100";
  options.log_level = "warn";
  Daemon daemon(tmp.path() + "/data", options);
  if (fp8::Status st = daemon.Start(); !st.ok()) Die(st.ToString());

  FailureDetection(daemon, tmp.path() + "/out", trials);

  // One long job holds the only slot (and is the WatchJob target); the rest stay QUEUED.
  auto blocker = daemon.client().CreateJob(fp8d::itest::TestTrainJob(tmp.path() + "/out/blocker", 1000000000));
  if (!blocker.ok()) Die(blocker.status().ToString());
  auto running = fp8d::itest::WaitState(daemon.client(), blocker->name(), fp8d::v1::RUNNING);
  if (!running.ok()) Die(running.status().ToString());
  const int64_t blocker_pid = running->attempts(0).ranks(0).pid();

  std::vector<std::string> names = CreatePhase(daemon, tmp.path() + "/out", clients, jobs);
  GetPhase(daemon, names, clients, get_seconds);
  WatchPhase(daemon, blocker->name(), watchers, watch_seconds);
  std::printf("daemon_rss_mib (%d jobs stored, %d queued): %.1f\n", jobs + trials + 1, jobs,
              RssKiB(daemon.pid()) / 1024.0);

  daemon.Signal(SIGTERM);
  if (daemon.Wait() != 0) Die("fp8d did not exit 0 on SIGTERM");
  const auto t0 = Clock::now();
  if (fp8::Status st = daemon.Start(std::chrono::seconds(300)); !st.ok()) Die(st.ToString());
  const double restart_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("restart_to_serving_ms (%d jobs stored, %d active to recover): %.0f\n", jobs + trials + 1,
              jobs + 1, restart_ms);
  std::printf("daemon_rss_mib_after_restart: %.1f\n", RssKiB(daemon.pid()) / 1024.0);

  // Leave nothing behind: stop fp8d first (so no queued job starts), then the blocker.
  daemon.Signal(SIGTERM);
  daemon.Wait();
  kill(-static_cast<pid_t>(blocker_pid), SIGKILL);
  kill(static_cast<pid_t>(blocker_pid), SIGKILL);
  return 0;
}
