// SPDX-License-Identifier: Apache-2.0
// Control-plane benchmark: starts fp8d (with the fault-injection worker) as a separate
// process and measures, from this process over loopback gRPC:
//   1. failure detection: worker SIGKILL → the state change reaches a WatchJob client;
//   2. durable CreateJob throughput with 64 concurrent clients (each its own connection, one
//      call in flight each, all driven from one completion-queue thread);
//   3. GetJob throughput and latency percentiles with 64 clients;
//   4. WatchJob fan-out: 1,000 watchers on one running job (read from one completion-queue
//      thread); latency from the worker writing a progress event (its "time" field in
//      rank-0.events) to each watcher receiving it;
//   5. daemon RSS with all jobs stored, then restart (SIGTERM, start) → SERVING time and RSS.
// Prints one line per number. Not a test: nothing here asserts.
#include <sched.h>
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
#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "bench/common/percentile.h"
#include "tests/integration/daemon_process.h"

namespace {

using Clock = std::chrono::steady_clock;
using fp8d::itest::Daemon;
using fp8d::itest::DaemonOptions;
using fp8d::v1::Job;

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

using fp8d::bench::Percentile;

long RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// The cores this process may run on (taskset narrows them), not all of the machine's.
int CoresWeMayUse() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
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
              trials, Percentile(ms, 0.5), *std::max_element(ms.begin(), ms.end()));
}

// Closed loop: `clients` clients, each on its own connection with one CreateJob in flight,
// sending the next when the answer comes. The clients are driven from ONE completion-queue
// thread (gRPC's async API) instead of one blocking thread each, so that on a 2-core machine
// fp8d is not starved by 64 client threads waking in turn; the load fp8d sees (64 concurrent
// calls on 64 connections) is the same.
std::vector<std::string> CreatePhase(Daemon& daemon, const std::string& out, int clients, int jobs) {
  struct Call {
    grpc::ClientContext context;
    fp8d::v1::Job response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<fp8d::v1::Job>> reader;
    Clock::time_point start;
  };
  std::vector<std::unique_ptr<fp8d::v1::JobService::Stub>> stubs;
  for (int c = 0; c < clients; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
    auto channel = grpc::CreateCustomChannel(daemon.address(), grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      Die("create: client " + std::to_string(c) + " could not connect");
    }
    stubs.push_back(fp8d::v1::JobService::NewStub(channel));
  }
  fp8d::v1::CreateJobRequest request;
  *request.mutable_job() = QueuedJob(out + "/q");
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Call>> calls(clients);
  int sent = 0, in_flight = 0, errors = 0;
  auto send = [&](int c) {
    calls[c] = std::make_unique<Call>();
    Call& call = *calls[c];
    call.context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    call.start = Clock::now();
    // Each job its own output_dir: an active job's is refused to the next one. The request is
    // serialized when the call starts, so one message serves every call (dae51ea's bench sent
    // one constant request; a copy per call would be client CPU taken from fp8d's two cores).
    request.mutable_job()->mutable_train()->set_output_dir(out + "/q/" + std::to_string(sent));
    call.reader = stubs[c]->AsyncCreateJob(&call.context, request, &cq);
    call.reader->Finish(&call.response, &call.status, reinterpret_cast<void*>(static_cast<intptr_t>(c)));
    ++sent;
    ++in_flight;
  };
  std::vector<double> latencies;
  std::vector<std::string> names;
  latencies.reserve(jobs);
  names.reserve(jobs);
  const auto start = Clock::now();
  for (int c = 0; c < clients && sent < jobs; ++c) send(c);
  void* tag;
  bool ok;
  while (in_flight > 0 && cq.Next(&tag, &ok)) {
    const auto now = Clock::now();
    const int c = static_cast<int>(reinterpret_cast<intptr_t>(tag));
    --in_flight;
    Call& call = *calls[c];
    latencies.push_back(std::chrono::duration<double, std::milli>(now - call.start).count());
    if (ok && call.status.ok()) {
      names.push_back(call.response.name());
    } else if (errors++ < 3) {
      std::fprintf(stderr, "create: %s\n", call.status.error_message().c_str());
    }
    if (sent < jobs) send(c);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  std::printf("create_jobs_per_s (durable CreateJob, %d clients, %d jobs): %.0f  (latency p50 %.2f ms p99 %.2f ms, errors %d)\n",
              clients, jobs, static_cast<double>(names.size()) / secs, Percentile(latencies, 0.5),
              Percentile(latencies, 0.99), errors);
  return names;
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
              clients, seconds, static_cast<double>(all.size()) / secs, Percentile(all, 0.5),
              Percentile(all, 0.99), errors.load());
}

// step → the worker's event time (seconds since the epoch), from rank-0.events.
std::map<int64_t, double> ProgressTimes(const std::string& events_path) {
  std::map<int64_t, double> out;
  std::ifstream in(events_path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    // worker_event.proto as JSON: {"time": t, "progress": {"step": "<int64>", ...}}
    if (j.is_discarded() || !j.is_object() || !j.contains("progress") || !j.contains("time")) continue;
    out[std::stoll(j["progress"].value("step", "0"))] = j["time"].get<double>();
  }
  return out;
}

// The watcher side runs on a few completion-queue threads (gRPC's async client API, one per
// core by default, each with its own connections and streams), not one blocking thread per
// stream, so 1,000 client threads do not compete with fp8d for the cores. What is measured is
// unchanged: the worker's event time (its "time" field) to the moment this process has the
// update.
class AsyncWatchers {
 public:
  struct Sample {
    int64_t step;
    double received;
  };

  AsyncWatchers(const std::string& address, const std::string& job_name, int watchers,
                int threads)
      : cqs_(std::max(threads, 1)), streams_(watchers) {
    const int kChannels = 16;  // streams share connections, as many clients behind a proxy would
    for (int i = 0; i < kChannels; ++i) {
      grpc::ChannelArguments args;
      args.SetInt("grpc.use_local_subchannel_pool", 1);
      stubs_.push_back(fp8d::v1::JobService::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
    }
    fp8d::v1::WatchJobRequest request;
    request.set_name(job_name);
    for (int w = 0; w < watchers; ++w) {
      Stream& s = streams_[w];
      // Channel c belongs to queue c % threads, so each connection is read by one thread.
      const size_t channel = w % stubs_.size();
      s.reader = stubs_[channel]->PrepareAsyncWatchJob(&s.context, request,
                                                       &cqs_[channel % cqs_.size()]);
      s.reader->StartCall(Tag(w, kStarted));
    }
    for (size_t q = 0; q < cqs_.size(); ++q) {
      size_t mine = 0;
      for (int w = 0; w < watchers; ++w) mine += (w % stubs_.size()) % cqs_.size() == q;
      threads_.emplace_back([this, q, mine] { Loop(cqs_[q], mine); });
    }
  }

  int connected() const { return connected_.load(); }

  // Cancels every stream, waits until all have finished, returns each stream's samples.
  std::vector<std::vector<Sample>> Stop() {
    for (Stream& s : streams_) s.context.TryCancel();
    for (auto& t : threads_) t.join();
    std::vector<std::vector<Sample>> out;
    for (Stream& s : streams_) out.push_back(std::move(s.samples));
    return out;
  }

 private:
  enum Op { kStarted = 0, kRead = 1, kFinished = 2 };
  struct Stream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncReader<fp8d::v1::WatchJobResponse>> reader;
    fp8d::v1::WatchJobResponse response;
    grpc::Status status;
    bool first = true;
    std::vector<Sample> samples;
  };
  static void* Tag(size_t stream, Op op) { return reinterpret_cast<void*>(stream * 4 + op); }

  // Serves the `streams` streams of `cq` until each has finished.
  void Loop(grpc::CompletionQueue& cq, size_t streams) {
    size_t finished = 0;
    void* tag;
    bool ok;
    while (finished < streams && cq.Next(&tag, &ok)) {
      const double now = WallSeconds();  // first thing: the receipt time of this update
      const auto value = reinterpret_cast<uintptr_t>(tag);
      Stream& s = streams_[value / 4];
      switch (static_cast<Op>(value % 4)) {
        case kStarted:
          if (ok) {
            s.reader->Read(&s.response, Tag(value / 4, kRead));
          } else {
            s.reader->Finish(&s.status, Tag(value / 4, kFinished));
          }
          break;
        case kRead:
          if (!ok) {
            s.reader->Finish(&s.status, Tag(value / 4, kFinished));
            break;
          }
          if (s.first) {
            s.first = false;  // the snapshot is not a fresh update
            ++connected_;
          } else {
            s.samples.push_back({s.response.job().progress().step(), now});
          }
          s.reader->Read(&s.response, Tag(value / 4, kRead));
          break;
        case kFinished:
          ++finished;
          break;
      }
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }

  std::vector<std::unique_ptr<fp8d::v1::JobService::Stub>> stubs_;
  std::vector<grpc::CompletionQueue> cqs_;
  std::vector<Stream> streams_;
  std::atomic<int> connected_{0};
  std::vector<std::thread> threads_;
};

void WatchPhase(Daemon& daemon, const std::string& job_name, int watchers, double seconds,
                int threads) {
  AsyncWatchers streams(daemon.address(), job_name, watchers, threads);
  while (streams.connected() < watchers) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const auto samples = streams.Stop();

  auto got = daemon.client().GetJob(job_name, fp8d::v1::JOB_VIEW_BASIC);
  const std::string id = job_name.substr(5);
  const auto times = ProgressTimes(daemon.data_dir() + "/jobs/" + id + "/attempt-" +
                                   std::to_string(got.ok() ? got->attempt() : 1) + "/rank-0.events");
  std::vector<double> lat;
  for (const auto& per : samples) {
    for (const auto& s : per) {
      auto it = times.find(s.step);
      if (it != times.end()) lat.push_back((s.received - it->second) * 1000.0);
    }
  }
  std::printf("watch_progress_latency_ms (%d watchers on one job, worker event -> client, %zu samples): p50 %.1f p99 %.1f max %.1f\n",
              watchers, lat.size(), Percentile(lat, 0.5), Percentile(lat, 0.99),
              lat.empty() ? 0.0 : *std::max_element(lat.begin(), lat.end()));
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
  int watch_threads = CoresWeMayUse();
  app.add_option("--watch-threads", watch_threads,
                 "completion-queue threads reading the WatchJob streams (default: one per core)");
  std::string data_dir;
  app.add_option("--data-dir", data_dir,
                 "fp8d's data dir, kept afterwards (default: a temporary one, removed)");
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);  // as fp8d does
  setvbuf(stdout, nullptr, _IOLBF, 0);  // each number reaches a redirected log at once

  fp8d::itest::TempDir tmp;
  DaemonOptions options;
  options.cpu_slots = 1;
  options.env["FP8_TEST_STEP_MS"] = "100";
  options.log_level = "warn";
  Daemon daemon(data_dir.empty() ? tmp.path() + "/data" : data_dir, options);
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
  WatchPhase(daemon, blocker->name(), watchers, watch_seconds, watch_threads);
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
