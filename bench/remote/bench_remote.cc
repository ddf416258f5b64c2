// SPDX-License-Identifier: Apache-2.0
// Remote API benchmark: CreateJob and GetJob throughput and latency percentiles with 64 clients
// (a thread and a connection each, one call in flight each), against two fp8d on loopback: one
// plaintext without auth, one TLS with bearer tokens. Each fp8d runs with one CPU slot held by a
// long job, so the created jobs only queue. Several rounds, alternating which mode goes first;
// the summary gives each mode's median rate and the TLS cost as the median of the per-round
// ratios, with their spread, and fp8d's own CPU time per call in each mode (from /proc), which
// other load on the machine does not move the way it moves throughput. By default fp8d is
// pinned to one CPU and the clients to the others, so the clients' own TLS work does not count
// as the server's. Asserts nothing.
//
//   bench_remote --fp8d BIN --worker BIN [--clients 64] [--creates 40] [--gets 200] [--rounds 5]
//                [--pin false]
#include <sched.h>
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
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/common/percentile.h"
#include "client/job_client.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

using fp8d::bench::Percentile;

bool Run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

pid_t Start(const std::vector<std::string>& argv, const std::string& log, const cpu_set_t* cpus) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (cpus != nullptr) sched_setaffinity(0, sizeof(*cpus), cpus);
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
  double server_cpu_ms = 0;  // fp8d's CPU time during the phase
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

void Report(int round, const char* mode, const char* what, const Phase& p) {
  std::printf("round %d %s %s: %zu calls in %.2f s = %.0f/s, fp8d CPU %.1f us/call, p50 %.2f ms, p99 %.2f ms, errors %d\n",
              round, mode, what, p.latencies_ms.size(), p.seconds, p.latencies_ms.size() / p.seconds,
              1000.0 * p.server_cpu_ms / static_cast<double>(std::max<size_t>(1, p.latencies_ms.size())),
              Percentile(p.latencies_ms, 0.5), Percentile(p.latencies_ms, 0.99), p.errors);
  std::fflush(stdout);
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

// CPU time (user + system) a process has used, in ms, from /proc: what fp8d spends on a phase
// does not depend on how much CPU other processes leave it, unlike its throughput.
double ProcessCpuMs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {  // field 3 is the state; 14 utime, 15 stime (clock ticks)
    if (i == 14) utime = std::stod(f);
    if (i == 15) {
      stime = std::stod(f);
      break;
    }
  }
  return (utime + stime) * 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct Daemon {
  bool tls = false;
  const char* mode = "";
  pid_t pid = -1;
  fp8d::client::ConnectionOptions conn;
  std::unique_ptr<fp8d::client::JobClient> probe;
  fp8::StatusOr<fp8d::v1::Job> blocker = fp8::UnavailableError("not created");
};

// Workers outlive fp8d by design: the blocker is cancelled and seen to end before fp8d stops.
void StopDaemon(Daemon& d) {
  if (d.pid <= 0) return;
  if (d.probe != nullptr && d.blocker.ok()) {
    (void)d.probe->CancelJob(d.blocker->name());
    for (int i = 0; i < 300; ++i) {
      auto j = d.probe->GetJob(d.blocker->name());
      if (!j.ok() || j->state() == fp8d::v1::CANCELLED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  kill(d.pid, SIGTERM);
  int status = 0;
  waitpid(d.pid, &status, 0);
  d.pid = -1;
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
  int rounds = 5;
  app.add_option("--rounds", rounds, "rounds; each runs both modes, alternating which goes first")
      ->check(CLI::Range(1, 100));
  bool pin = true;
  app.add_option("--pin", pin,
                 "fp8d on the first CPU, the clients on the others, so the clients' own TLS work "
                 "does not take the server's CPU (needs 2 CPUs)");
  CLI11_PARSE(app, argc, argv);
  // The CPUs this process may use: fp8d gets the first, the clients (this process and the
  // threads it starts from here on) the rest.
  cpu_set_t allowed, server_cpus, client_cpus;
  CPU_ZERO(&server_cpus);
  CPU_ZERO(&client_cpus);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  if (pin && cpus.size() >= 2) {
    CPU_SET(cpus[0], &server_cpus);
    for (size_t i = 1; i < cpus.size(); ++i) CPU_SET(cpus[i], &client_cpus);
    sched_setaffinity(0, sizeof(client_cpus), &client_cpus);
    std::printf("pinned: fp8d on CPU %d, the clients on the other %zu CPU(s)\n", cpus[0], cpus.size() - 1);
  } else {
    pin = false;
    std::printf("not pinned: fp8d and the clients share %zu CPU(s)\n", cpus.size());
  }
  std::printf("%d clients, %d CreateJob and %d GetJob calls per client per mode per round, %d rounds\n",
              clients, creates, gets, rounds);

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

  // Both daemons run for the whole bench and the rounds alternate which mode goes first, so
  // load that other processes put on the machine lands on both modes alike; the spread of the
  // per-round ratios says how far one run can be trusted.
  std::vector<Daemon> daemons;
  for (const bool tls : {false, true}) {
    Daemon d;
    d.tls = tls;
    d.mode = tls ? "tls+token" : "plaintext";
    const std::string dir = base + "/" + d.mode;
    fs::create_directories(dir);
    std::vector<std::string> args = {fp8d, "--data-dir", dir + "/data", "--addr-file", dir + "/addr",
                                     "--worker", worker, "--gpus", "none", "--cpu-slots", "1",
                                     "--allowed-root", "/", "--run-jobs-as-owner", "false",
                                     "--log-level", "warn"};
    if (tls) {
      args.insert(args.end(), {"--listen", "0.0.0.0:0", "--tls-cert", base + "/srv.crt", "--tls-key",
                               base + "/srv.key", "--auth-tokens", base + "/tokens"});
    } else {
      // Submits over loopback without a token, which fp8d allows only when told to.
      args.insert(args.end(), {"--listen", "127.0.0.1:0", "--loopback-role", "submitter"});
    }
    d.pid = Start(args, dir + "/fp8d.log", pin ? &server_cpus : nullptr);
    std::string addr;
    for (int i = 0; i < 600 && addr.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::ifstream(dir + "/addr") >> addr;
    }
    d.conn.address = "127.0.0.1:" + addr.substr(addr.rfind(':') + 1);
    if (tls) {
      d.conn.ca_file = base + "/ca.crt";
      d.conn.server_name = "localhost";
      d.conn.token = token;
    }
    d.probe = std::make_unique<fp8d::client::JobClient>(d.conn);
    daemons.push_back(std::move(d));
    Daemon& started = daemons.back();
    if (addr.empty() || !started.probe->WaitForServing(std::chrono::seconds(30))) {
      std::fprintf(stderr, "%s: fp8d did not serve (see %s/fp8d.log)\n", started.mode, dir.c_str());
      for (auto& x : daemons) StopDaemon(x);
      return 1;
    }
    started.blocker = started.probe->CreateJob(QueuedJob(base, 100000));  // holds the only slot
  }

  std::map<std::string, std::vector<double>> rates;  // "mode method" → calls/s per round
  std::map<std::string, std::vector<double>> p99s;
  std::map<std::string, std::vector<double>> server_us;  // fp8d's CPU per call, µs
  std::map<std::string, std::vector<double>> costs;  // method → TLS cost per round
  std::map<std::string, std::vector<double>> cpu_costs;  // method → TLS cost in fp8d CPU per round
  for (int round = 1; round <= rounds; ++round) {
    std::map<std::string, double> this_round;
    for (int k = 0; k < 2; ++k) {
      Daemon& d = daemons[(round + k) % 2];  // odd rounds: TLS first
      std::vector<std::vector<std::string>> created(clients);
      const double cpu0 = ProcessCpuMs(d.pid);
      Phase create = RunClients(d.conn, clients, creates, [&](fp8d::client::JobClient& c, int i, int) {
        auto job = c.CreateJob(QueuedJob(base, 10));
        if (job.ok()) {
          created[i].push_back(job->name());
        } else if (i == 0) {
          std::fprintf(stderr, "%s CreateJob: %s\n", d.mode, job.status().ToString().c_str());
        }
        return job.ok();
      });
      create.server_cpu_ms = ProcessCpuMs(d.pid) - cpu0;
      Report(round, d.mode, "CreateJob", create);
      const std::string name = d.blocker.ok() ? d.blocker->name() : "jobs/none";
      const double cpu1 = ProcessCpuMs(d.pid);
      Phase get = RunClients(d.conn, clients, gets, [&](fp8d::client::JobClient& c, int, int) {
        return c.GetJob(name).ok();
      });
      get.server_cpu_ms = ProcessCpuMs(d.pid) - cpu1;
      Report(round, d.mode, "GetJob", get);
      for (const auto& [method, p] : {std::pair<std::string, const Phase*>{"CreateJob", &create}, {"GetJob", &get}}) {
        const double rate = p->latencies_ms.size() / p->seconds;
        const std::string key = std::string(d.mode) + " " + method;
        rates[key].push_back(rate);
        p99s[key].push_back(Percentile(p->latencies_ms, 0.99));
        server_us[key].push_back(1000.0 * p->server_cpu_ms / static_cast<double>(p->latencies_ms.size()));
        this_round[key] = rate;
      }
      // Untimed: the round's jobs are cancelled so every round starts with the same queue.
      RunClients(d.conn, clients, creates, [&](fp8d::client::JobClient& c, int i, int n) {
        return n < static_cast<int>(created[i].size()) && c.CancelJob(created[i][n]).ok();
      });
    }
    for (const char* method : {"CreateJob", "GetJob"}) {
      const double plain = this_round[std::string("plaintext ") + method];
      const double tls = this_round[std::string("tls+token ") + method];
      costs[method].push_back(plain > 0 ? 100.0 * (1.0 - tls / plain) : 0);
      const double plain_us = server_us[std::string("plaintext ") + method].back();
      const double tls_us = server_us[std::string("tls+token ") + method].back();
      cpu_costs[method].push_back(plain_us > 0 ? 100.0 * (tls_us / plain_us - 1.0) : 0);
    }
  }
  std::printf("== summary over %d rounds (median, [min..max])%s\n", rounds,
              pin ? "; fp8d pinned apart from the clients, so the ratio measures the server" : "");
  for (const char* method : {"CreateJob", "GetJob"}) {
    for (const char* mode : {"plaintext", "tls+token"}) {
      const std::string key = std::string(mode) + " " + method;
      const auto& r = rates[key];
      std::printf("%s %s: %.0f/s [%.0f..%.0f], p99 %.2f ms, fp8d CPU %.1f us/call\n", mode, method,
                  Median(r), *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end()),
                  Median(p99s[key]), Median(server_us[key]));
    }
    const auto& c = costs[method];
    std::printf("TLS cost %s: %.1f%% of throughput [%.1f..%.1f] (target <= 25%%)\n", method, Median(c),
                *std::min_element(c.begin(), c.end()), *std::max_element(c.begin(), c.end()));
    const auto& u = cpu_costs[method];
    std::printf("TLS cost %s in fp8d's CPU per call: %+.1f%% [%+.1f..%+.1f]\n", method, Median(u),
                *std::min_element(u.begin(), u.end()), *std::max_element(u.begin(), u.end()));
  }
  std::fflush(stdout);
  for (auto& d : daemons) StopDaemon(d);
  std::error_code ec;
  fs::remove_all(base, ec);
  return 0;
}
