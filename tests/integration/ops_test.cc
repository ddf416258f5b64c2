// SPDX-License-Identifier: Apache-2.0
// What an operator's tools read from a real fp8d (issue 29): /metrics counters that never go
// down when jobs are deleted (and pass promtool), the per-job label fp8d_job, /healthz and gRPC
// health turning unhealthy while the manager's io thread is blocked (the test-only fault hook
// FP8D_FAULT_BLOCK_IO_AFTER_MS / _FOR_MS) and healthy again after, journald <N> priority
// prefixes when stderr is $JOURNAL_STREAM, and audit lines at --log-level warn (on stderr and
// in --audit-log).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/daemon_process.h"

namespace fp8d::itest {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct HttpAnswer {
  int code = 0;
  std::string body;
};

// curl, as an operator's probe would ask.
HttpAnswer Get(int port, const std::string& path) {
  ProcessResult r = RunProcess({"/usr/bin/curl", "-s", "-m", "5", "-w", "\n%{http_code}",
                                "http://127.0.0.1:" + std::to_string(port) + path});
  HttpAnswer a;
  const size_t nl = r.out.rfind('\n');
  if (nl == std::string::npos) return a;
  a.code = std::atoi(r.out.c_str() + nl + 1);
  a.body = r.out.substr(0, nl);
  return a;
}

// Every sample of the counter and histogram families of a text exposition, by its full
// "name{labels}" text.
std::map<std::string, double> CounterSamples(const std::string& text) {
  std::map<std::string, std::string> types;
  std::map<std::string, double> out;
  std::istringstream lines(text);
  const std::regex type_line("^# TYPE (\\S+) (\\S+)$");
  const std::regex sample_line("^([a-zA-Z_:][a-zA-Z0-9_:]*)(\\{[^}]*\\})? (\\S+)$");
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, type_line)) {
      types[m[1]] = m[2];
      continue;
    }
    if (!std::regex_match(line, m, sample_line)) continue;
    const std::string name = m[1];
    for (const auto& [family, type] : types) {
      const bool counter = type == "counter" && name == family;
      const bool histogram = type == "histogram" &&
                             (name == family + "_bucket" || name == family + "_sum" || name == family + "_count");
      if (counter || histogram) out[name + m[2].str()] = std::stod(m[3]);
    }
  }
  return out;
}

double Sample(const std::map<std::string, double>& samples, const std::string& key) {
  auto it = samples.find(key);
  return it == samples.end() ? -1 : it->second;
}

TEST(OpsMetrics, CountersNeverDecreaseWhenJobsAreDeletedAndTheJobLabelIsFp8dJob) {
  TempDir tmp;
  DaemonOptions options;
  options.cpu_slots = 2;
  // Every job's first attempt crashes at step 2 (WORKER_CRASH, retried), the second succeeds.
  options.env = {{"FP8_TEST_MODE", "crash_at_step"}, {"FP8_TEST_CRASH_STEP", "2"},
                 {"FP8_TEST_CRASH_ONLY_ATTEMPT", "1"}, {"FP8_TEST_STEP_MS", "100"}};
  options.extra_args = {"--http-listen", "127.0.0.1:0"};
  Daemon daemon(tmp.path() + "/data", options);
  ASSERT_TRUE(daemon.Start().ok()) << daemon.Log();
  const int port = HttpPort(daemon);
  ASSERT_GT(port, 0) << daemon.Log();

  std::vector<std::string> names;
  for (int i = 0; i < 2; ++i) {
    auto job = daemon.client().CreateJob(TestTrainJob(tmp.path() + "/out" + std::to_string(i), 12));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    names.push_back(job->name());
  }
  // While a job runs its gauges carry fp8d_job (Prometheus would rename a "job" label).
  std::string running;
  ASSERT_TRUE(PollUntil([&] {
    running = Get(port, "/metrics").body;
    return running.find("fp8d_job_step{fp8d_job=\"" + names[0] + "\"}") != std::string::npos ||
           running.find("fp8d_job_step{fp8d_job=\"" + names[1] + "\"}") != std::string::npos;
  }, 60s)) << running;
  EXPECT_EQ(running.find("{job="), std::string::npos) << running;
  for (const std::string& name : names) {
    auto done = WaitTerminal(daemon.client(), name);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    ASSERT_EQ(done->state(), fp8d::v1::SUCCEEDED) << daemon.Log();
    ASSERT_EQ(done->attempt(), 2);
  }

  const std::string before_text = Get(port, "/metrics").body;
  const auto before = CounterSamples(before_text);
  EXPECT_EQ(Sample(before, "fp8d_job_attempts_started_total{kind=\"TRAIN\"}"), 4) << before_text;
  EXPECT_EQ(Sample(before, "fp8d_job_failures_total{failure_class=\"WORKER_CRASH\",kind=\"TRAIN\"}"), 2)
      << before_text;
  EXPECT_EQ(Sample(before, "fp8d_job_run_seconds_count{kind=\"TRAIN\"}"), 2) << before_text;
  EXPECT_EQ(Sample(before, "fp8d_job_queue_wait_seconds_count{kind=\"TRAIN\"}"), 2) << before_text;
  EXPECT_NE(before_text.find("fp8d_jobs{kind=\"TRAIN\",state=\"SUCCEEDED\"} 2"), std::string::npos);
  EXPECT_NE(before_text.find("fp8d_build_info{"), std::string::npos) << before_text;
  EXPECT_NE(before_text.find("fp8d_slots{kind=\"cpu\",state=\"total\"} 2"), std::string::npos) << before_text;
  EXPECT_NE(before_text.find("process_resident_memory_bytes "), std::string::npos) << before_text;

  for (const std::string& name : names) {
    fp8::Status deleted = daemon.client().DeleteJob(name);
    ASSERT_TRUE(deleted.ok()) << deleted.ToString();
  }
  const std::string after_text = Get(port, "/metrics").body;
  const auto after = CounterSamples(after_text);
  // The jobs are gone from the gauges, not from the counters.
  EXPECT_NE(after_text.find("fp8d_jobs{kind=\"TRAIN\",state=\"SUCCEEDED\"} 0"), std::string::npos) << after_text;
  ASSERT_GT(before.size(), 40u) << before_text;
  for (const auto& [sample, value] : before) {
    auto it = after.find(sample);
    ASSERT_NE(it, after.end()) << sample << " is gone after the deletes\n" << after_text;
    EXPECT_GE(it->second, value) << sample << " went down after the deletes";
  }

  // promtool (scripts/install-deps.sh installs prometheus for the tests) reads the scrape as
  // Prometheus would, lint rules included.
  const std::string file = tmp.path() + "/scrape.txt";
  std::ofstream(file) << after_text;
  ProcessResult lint = RunProcess({"/bin/sh", "-c", "promtool check metrics < '" + file + "'"});
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;
}

TEST(OpsHealth, ABlockedIoThreadFailsHealthzAndGrpcHealthWithinTheBoundThenRecovers) {
  TempDir tmp;
  DaemonOptions options;
  constexpr auto kBound = 1000ms;
  options.env = {{"FP8D_FAULT_BLOCK_IO_AFTER_MS", "1500"}, {"FP8D_FAULT_BLOCK_IO_FOR_MS", "6000"}};
  options.extra_args = {"--http-listen", "127.0.0.1:0", "--health-io-bound-ms",
                        std::to_string(kBound.count())};
  Daemon daemon(tmp.path() + "/data", options);
  ASSERT_TRUE(daemon.Start().ok()) << daemon.Log();
  const int port = HttpPort(daemon);
  ASSERT_GT(port, 0) << daemon.Log();
  EXPECT_EQ(Get(port, "/healthz").code, 200) << daemon.Log();

  ASSERT_TRUE(PollUntil([&] { return daemon.Log().find("fault hook: blocking") != std::string::npos; }, 30s))
      << daemon.Log();
  const Clock::time_point blocked_at = Clock::now();
  HttpAnswer probe;
  ASSERT_TRUE(PollUntil([&] { return (probe = Get(port, "/healthz")).code == 503; }, 5s)) << daemon.Log();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - blocked_at);
  std::cout << "healthz 503 after " << took.count() << " ms of a blocked io thread (bound "
            << kBound.count() << " ms)\n";
  // The bound, a ping period (bound/4) and slack for a loaded machine.
  EXPECT_LT(took, kBound + 2000ms);
  EXPECT_NE(probe.body.find("not answering"), std::string::npos) << probe.body;
  auto serving = daemon.client().IsServing(2000ms);
  ASSERT_TRUE(serving.ok()) << serving.status().ToString();
  EXPECT_FALSE(*serving) << "gRPC health still SERVING while the io thread is blocked";
  // /readyz says nothing about liveness: recovery finished.
  EXPECT_EQ(Get(port, "/readyz").code, 200);

  ASSERT_TRUE(PollUntil([&] { return daemon.Log().find("fault hook: the manager's io thread runs again") !=
                                     std::string::npos; }, 30s)) << daemon.Log();
  EXPECT_TRUE(PollUntil([&] { return Get(port, "/healthz").code == 200; }, 10s)) << daemon.Log();
  EXPECT_TRUE(PollUntil([&] {
    auto s = daemon.client().IsServing(2000ms);
    return s.ok() && *s;
  }, 10s)) << daemon.Log();
  EXPECT_NE(daemon.Log().find("io watchdog: the manager's thread answers again"), std::string::npos);
}

// Each spdlog line, "<time> <level> <message>", with an optional <N> before it.
struct LogLine {
  std::string prefix, level;
};

std::vector<LogLine> DaemonLines(const std::string& log) {
  std::vector<LogLine> out;
  const std::regex line_re("^(<\\d>)?\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3} (\\w+) .*$");
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, line_re)) out.push_back({m[1], m[2]});
  }
  return out;
}

TEST(OpsLogs, StderrOnTheJournalGetsSyslogPrioritiesAndElsewhereNone) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  ASSERT_EQ(mkdir(data.c_str(), 0700), 0);
  std::ofstream(data + "/fp8d.log").flush();  // the harness appends fp8d's stderr to it
  struct stat st {};
  ASSERT_EQ(stat((data + "/fp8d.log").c_str(), &st), 0);
  DaemonOptions options;
  options.log_level = "debug";
  // An invalid fault-hook length is logged as an error (and the hook stays off), an invalid
  // $WATCHDOG_USEC as a warning: a line of each level.
  options.env = {{"JOURNAL_STREAM", std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)},
                 {"FP8D_FAULT_BLOCK_IO_AFTER_MS", "600000"}, {"FP8D_FAULT_BLOCK_IO_FOR_MS", "soon"},
                 {"NOTIFY_SOCKET", tmp.path() + "/no-such.sock"}, {"WATCHDOG_USEC", "soon"}};
  {
    Daemon daemon(data, options);
    ASSERT_TRUE(daemon.Start().ok()) << daemon.Log();
    ASSERT_TRUE(PollUntil([&] { return daemon.Log().find("FP8D_FAULT_BLOCK_IO_FOR_MS=soon") != std::string::npos; },
                          10s)) << daemon.Log();
    // (Debug and critical lines are rare; ops_unit_test checks their priorities.)
    const std::map<std::string, std::string> expected = {{"info", "<6>"}, {"warning", "<4>"}, {"error", "<3>"}};
    std::map<std::string, int> seen;
    for (const LogLine& l : DaemonLines(daemon.Log())) {
      auto it = expected.find(l.level);
      if (it == expected.end()) continue;
      EXPECT_EQ(l.prefix, it->second) << l.level << " line\n" << daemon.Log();
      ++seen[l.level];
    }
    for (const auto& [level, prefix] : expected) EXPECT_GT(seen[level], 0) << "no " << level << " line";
  }
  // JOURNAL_STREAM inherited but stderr is another file (a worker's redirect, a shell's
  // 2>file): no prefixes.
  TempDir other;
  options.env = {{"JOURNAL_STREAM", std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)}};
  Daemon plain(other.path() + "/data", options);
  ASSERT_TRUE(plain.Start().ok()) << plain.Log();
  const auto lines = DaemonLines(plain.Log());
  ASSERT_FALSE(lines.empty()) << plain.Log();
  for (const LogLine& l : lines) EXPECT_EQ(l.prefix, "") << plain.Log();
}

TEST(OpsLogs, AuditLinesAreWrittenAtLogLevelWarnToStderrAndToAuditLog) {
  TempDir tmp;
  DaemonOptions options;
  options.log_level = "warn";
  {
    Daemon daemon(tmp.path() + "/data", options);
    ASSERT_TRUE(daemon.Start().ok()) << daemon.Log();
    auto job = daemon.client().CreateJob(TestTrainJob(tmp.path() + "/out", 3));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    ASSERT_TRUE(PollUntil([&] { return daemon.Log().find("\"method\":\"CreateJob\"") != std::string::npos; }, 10s))
        << daemon.Log();
    // The level still filters the daemon's own lines.
    EXPECT_EQ(daemon.Log().find("recovery finished"), std::string::npos) << daemon.Log();
    ASSERT_TRUE(WaitTerminal(daemon.client(), job->name()).ok());
  }
  const std::string audit = tmp.path() + "/audit.log";
  options.extra_args = {"--audit-log", audit};
  Daemon daemon(tmp.path() + "/data2", options);
  ASSERT_TRUE(daemon.Start().ok()) << daemon.Log();
  auto job = daemon.client().CreateJob(TestTrainJob(tmp.path() + "/out2", 3));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto read = [&] {
    std::ifstream in(audit);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  ASSERT_TRUE(PollUntil([&] { return read().find("\"method\":\"CreateJob\"") != std::string::npos; }, 10s))
      << "audit file: " << read() << "\nlog: " << daemon.Log();
  const std::string text = read();
  EXPECT_EQ(text.rfind("{\"time\":", 0), 0u) << text;  // one JSON object a line, no prefix
  EXPECT_EQ(daemon.Log().find("\"audit\":true"), std::string::npos) << "audit lines went to stderr too";
  struct stat st {};
  ASSERT_EQ(stat(audit.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  ASSERT_TRUE(WaitTerminal(daemon.client(), job->name()).ok());
}

}  // namespace
}  // namespace fp8d::itest
