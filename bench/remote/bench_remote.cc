// Remote API benchmark: CreateJob and GetJob throughput and latency percentiles with 64 clients
// (a thread and a connection each, one call in flight each), against fp8d on loopback twice:
// plaintext without auth, then TLS with bearer tokens. fp8d runs with one CPU slot held by a
// long job, so the created jobs only queue. Prints one line per number; asserts nothing.
//
//   bench_remote --fp8d BIN --worker BIN [--clients 64] [--creates 40] [--gets 200]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "client/job_client.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5))];
}

bool Run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

pid_t Start(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "a");
    if (f != nullptr) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  return pid;
}

// Each job its own output dir: fp8d refuses a new job whose output_dir an active job uses.
fp8d::v1::Job QueuedJob(const std::string& dir, int steps) {
  static std::atomic<int> serial{0};
  fp8d::v1::Job job;
  auto* t = job.mutable_train();
  t->mutable_model()->set_preset("tiny");
  t->mutable_data()->set_train(dir + "/data/*.bin");
  t->mutable_precision()->set_recipe("bf16");
  t->mutable_training()->set_max_steps(steps);
  t->set_output_dir(dir + "/out/" + std::to_string(serial++));
  (*job.mutable_env())["FP8_TEST_STEP_MS"] = "1000";
  return job;
}

struct Phase {
  double seconds = 0;
  std::vector<double> latencies_ms;
  int errors = 0;
};

template <typename Call>
Phase RunClients(const fp8d::client::ConnectionOptions& conn, int clients, int per_client, Call call) {
  std::vector<std::unique_ptr<fp8d::client::JobClient>> c;
  for (int i = 0; i < clients; ++i) {
    c.push_back(std::make_unique<fp8d::client::JobClient>(conn));
    (void)c.back()->IsServing();  // connect (and handshake) before the clock starts
  }
  std::vector<std::vector<double>> lat(clients);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < per_client; ++k) {
        const auto t0 = Clock::now();
        if (!call(*c[i], i, k)) ++errors;
        lat[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    });
  }
  for (auto& t : threads) t.join();
  Phase phase;
  phase.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& l : lat) phase.latencies_ms.insert(phase.latencies_ms.end(), l.begin(), l.end());
  phase.errors = errors.load();
  return phase;
}

void Report(const char* mode, const char* what, const Phase& p) {
  std::printf("%s %s: %zu calls in %.2f s = %.0f/s, p50 %.2f ms, p99 %.2f ms, errors %d\n", mode,
              what, p.latencies_ms.size(), p.seconds, p.latencies_ms.size() / p.seconds,
              Percentile(p.latencies_ms, 50), Percentile(p.latencies_ms, 99), p.errors);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_remote: CreateJob/GetJob throughput, TLS+token against plaintext"};
  std::string fp8d, worker;
  int clients = 64, creates = 40, gets = 200;
  app.add_option("--fp8d", fp8d)->required();
  app.add_option("--worker", worker)->required();
  app.add_option("--clients", clients);
  app.add_option("--creates", creates, "CreateJob calls per client");
  app.add_option("--gets", gets, "GetJob calls per client");
  CLI11_PARSE(app, argc, argv);

  const std::string base = fs::temp_directory_path() / ("fp8d-bench-remote-" + std::to_string(getpid()));
  fs::create_directories(base + "/data");
  const std::string token = "bench-token";
  Run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + base +
      "/ca.key -out " + base + "/ca.crt -days 1 -subj /CN=bench-ca");
  Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + base +
      "/srv.key -out " + base + "/srv.csr -subj /CN=localhost");
  std::ofstream(base + "/ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
  Run("openssl x509 -req -in " + base + "/srv.csr -CA " + base + "/ca.crt -CAkey " + base +
      "/ca.key -CAcreateserial -out " + base + "/srv.crt -days 1 -extfile " + base + "/ext");
  {
    // sha256 of the token, by openssl so the bench needs no crypto library of its own.
    const std::string cmd = "printf %s " + token + " | openssl dgst -sha256 -r | cut -d' ' -f1 > " + base + "/hash";
    if (std::system(cmd.c_str()) != 0) return 1;
    std::string hash;
    std::ifstream(base + "/hash") >> hash;
    std::ofstream(base + "/tokens") << hash << " bench submitter\n";
  }

  for (const bool tls : {false, true}) {
    const char* mode = tls ? "tls+token" : "plaintext";
    const std::string dir = base + "/" + mode;
    fs::create_directories(dir);
    std::vector<std::string> args = {fp8d, "--data-dir", dir + "/data", "--addr-file", dir + "/addr",
                                     "--worker", worker, "--gpus", "none", "--cpu-slots", "1",
                                     "--allowed-root", "/", "--run-jobs-as-owner", "false",
                                     "--log-level", "warn"};
    if (tls) {
      args.insert(args.end(), {"--listen", "0.0.0.0:0", "--tls-cert", base + "/srv.crt", "--tls-key",
                               base + "/srv.key", "--auth-tokens", base + "/tokens"});
    } else {
      args.push_back("--listen");
      args.push_back("127.0.0.1:0");
    }
    const pid_t pid = Start(args, dir + "/fp8d.log");
    std::string addr;
    for (int i = 0; i < 600 && addr.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::ifstream(dir + "/addr") >> addr;
    }
    fp8d::client::ConnectionOptions conn;
    conn.address = "127.0.0.1:" + addr.substr(addr.rfind(':') + 1);
    if (tls) {
      conn.ca_file = base + "/ca.crt";
      conn.server_name = "localhost";
      conn.token = token;
    }
    fp8d::client::JobClient probe(conn);
    if (addr.empty() || !probe.WaitForServing(std::chrono::seconds(30))) {
      std::fprintf(stderr, "%s: fp8d did not serve (see %s/fp8d.log)\n", mode, dir.c_str());
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return 1;
    }
    auto blocker = probe.CreateJob(QueuedJob(base, 100000));  // holds the only slot
    std::vector<std::vector<std::string>> created(clients);
    Phase create = RunClients(conn, clients, creates, [&](fp8d::client::JobClient& c, int i, int) {
      auto job = c.CreateJob(QueuedJob(base, 10));
      if (job.ok()) {
        created[i].push_back(job->name());
      } else if (i == 0) {
        std::fprintf(stderr, "%s CreateJob: %s\n", mode, job.status().ToString().c_str());
      }
      return job.ok();
    });
    Report(mode, "CreateJob", create);
    const std::string name = blocker.ok() ? blocker->name() : "jobs/none";
    Phase get = RunClients(conn, clients, gets, [&](fp8d::client::JobClient& c, int, int) {
      return c.GetJob(name).ok();
    });
    Report(mode, "GetJob", get);
    // Workers outlive fp8d by design: cancel every queued job, then the blocker, and wait for
    // it to end before fp8d is stopped.
    Phase cancel = RunClients(conn, clients, creates, [&](fp8d::client::JobClient& c, int i, int k) {
      return k < static_cast<int>(created[i].size()) && c.CancelJob(created[i][k]).ok();
    });
    Report(mode, "CancelJob", cancel);
    if (blocker.ok()) {
      (void)probe.CancelJob(name);
      for (int i = 0; i < 300; ++i) {
        auto j = probe.GetJob(name);
        if (!j.ok() || j->state() == fp8d::v1::CANCELLED) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
  }
  std::error_code ec;
  fs::remove_all(base, ec);
  return 0;
}
