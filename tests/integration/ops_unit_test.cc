// SPDX-License-Identifier: Apache-2.0
// The pure parts behind /metrics and /healthz, in-process: which committed transitions the job
// counters count (a table), /proc/self/stat parsing, the rendered names and labels, and the io
// watchdog seeing a blocked io_context and its recovery.
#include <atomic>
#include <chrono>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include "daemon/api/http_metrics.h"
#include "daemon/api/process_metrics.h"
#include "daemon/core/job_counters.h"
#include "daemon/server/io_watchdog.h"
#include "daemon/server/log_setup.h"

namespace fp8d {
namespace {

using fp8d::v1::JobState;

google::protobuf::Timestamp At(int64_t seconds) {
  google::protobuf::Timestamp t;
  t.set_seconds(seconds);
  return t;
}

struct Step {
  JobState from, to;
  fp8d::v1::FailureClass failure;  // job.error() after the transition
  bool first_start;                // start_time is this event's time
  // Expected totals after the step.
  uint64_t attempts, failures, queue_waits, run_times;
};

TEST(JobCounters, CountsAttemptsFailuresAndTimesFromCommittedTransitions) {
  using namespace fp8d::v1;
  const Step steps[] = {
      {QUEUED, STARTING, FAILURE_CLASS_UNSPECIFIED, true, 1, 0, 1, 0},
      {STARTING, RUNNING, FAILURE_CLASS_UNSPECIFIED, false, 1, 0, 1, 0},
      {RUNNING, RETRY_WAIT, WORKER_CRASH, false, 1, 1, 1, 0},
      {RETRY_WAIT, QUEUED, WORKER_CRASH, false, 1, 1, 1, 0},
      {QUEUED, STARTING, WORKER_CRASH, false, 2, 1, 1, 0},  // a retry: no second queue wait
      {STARTING, QUEUED, PREEMPTED, false, 2, 2, 1, 0},     // an attempt taken back
      {QUEUED, STARTING, PREEMPTED, false, 3, 2, 1, 0},
      {STARTING, RUNNING, PREEMPTED, false, 3, 2, 1, 0},
      {RUNNING, FAILED, NUMERIC, false, 3, 3, 1, 1},
  };
  core::JobCounters counters;
  Job job;
  job.set_kind(TRAIN);
  *job.mutable_create_time() = At(100);
  int64_t now = 110;
  for (const Step& s : steps) {
    JobEvent event;
    event.set_from_state(s.from);
    event.set_to_state(s.to);
    *event.mutable_time() = At(now);
    if (s.first_start) *job.mutable_start_time() = At(now);
    if (s.to == FAILED) *job.mutable_end_time() = At(now);
    job.set_state(s.to);
    job.mutable_error()->set_failure_class(s.failure);
    counters.Count(job, event);
    const core::KindCounters& k = counters.by_kind().at(TRAIN);
    uint64_t failures = 0;
    for (const auto& [cls, n] : k.failures) failures += n;
    SCOPED_TRACE(JobState_Name(s.from) + " -> " + JobState_Name(s.to));
    EXPECT_EQ(k.attempts_started, s.attempts);
    EXPECT_EQ(failures, s.failures);
    EXPECT_EQ(k.queue_wait.count(), s.queue_waits);
    EXPECT_EQ(k.run_time.count(), s.run_times);
    now += 100;
  }
  const core::KindCounters& k = counters.by_kind().at(TRAIN);
  EXPECT_EQ(k.failures.at(WORKER_CRASH), 1u);
  EXPECT_EQ(k.failures.at(PREEMPTED), 1u);
  EXPECT_EQ(k.failures.at(NUMERIC), 1u);
  EXPECT_DOUBLE_EQ(k.queue_wait.sum, 10);                  // created at 100, started at 110
  EXPECT_EQ(k.queue_wait.counts[2], 1u);                   // 10 s: the (5, 15] bucket
  EXPECT_DOUBLE_EQ(k.run_time.sum, 910 - 110);  // nine steps 100 s apart from 110
  EXPECT_EQ(counters.by_kind().count(CALIBRATE), 0u);

  // A job cancelled while queued never started: nothing but its kind's entry.
  Job queued;
  queued.set_kind(CALIBRATE);
  JobEvent cancel;
  cancel.set_from_state(QUEUED);
  cancel.set_to_state(CANCELLED);
  counters.Count(queued, cancel);
  const core::KindCounters& c = counters.by_kind().at(CALIBRATE);
  EXPECT_EQ(c.attempts_started, 0u);
  EXPECT_TRUE(c.failures.empty());
  EXPECT_EQ(c.run_time.count(), 0u);
}

TEST(CountHistogram, BucketsAreUpperInclusiveAsPrometheusLe) {
  core::CountHistogram h({1, 5});
  for (double v : {0.5, 1.0, 1.5, 5.0, 7.0}) h.Observe(v);
  EXPECT_EQ(h.counts, (std::vector<uint64_t>{2, 2, 1}));
  EXPECT_EQ(h.count(), 5u);
  EXPECT_DOUBLE_EQ(h.sum, 15);
}

TEST(ProcessMetrics, ParsesProcSelfStatAfterTheCommandName) {
  // comm with a space and a ')' in it; fields 14, 15 (utime, stime), 22 (starttime), 24 (rss).
  const std::string stat =
      "4242 (fp8d (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 12345 "
      "1000000 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
  const std::string proc = "cpu  1 2 3\nbtime 1700000000\nprocesses 10\n";
  auto p = api::ParseProcStat(stat, proc, 100, 4096);
  ASSERT_TRUE(p.has_value());
  EXPECT_DOUBLE_EQ(p->cpu_seconds, 3.0);
  EXPECT_DOUBLE_EQ(p->start_time_seconds, 1700000000 + 123.45);
  EXPECT_DOUBLE_EQ(p->resident_bytes, 300 * 4096.0);
  EXPECT_FALSE(api::ParseProcStat("garbage", proc, 100, 4096).has_value());
  EXPECT_FALSE(api::ParseProcStat(stat, "cpu 1\n", 100, 4096).has_value());
  auto self = api::ReadProcessFigures();
  ASSERT_TRUE(self.has_value());
  EXPECT_GT(self->resident_bytes, 0);
  EXPECT_GE(self->open_fds, 3);  // stdin, stdout, stderr at least
}

TEST(RenderMetrics, JobGaugesUseFp8dJobAndCountersSurviveAnEmptyJobList) {
  fp8d::v1::Job running;
  running.set_name("jobs/abc");
  running.set_kind(fp8d::v1::TRAIN);
  running.set_state(fp8d::v1::RUNNING);
  running.mutable_progress()->set_step(7);
  core::ManagerFigures figures;
  fp8d::v1::Job started = running;
  *started.mutable_create_time() = At(1);
  *started.mutable_start_time() = At(3);
  fp8d::v1::JobEvent event;
  event.set_from_state(fp8d::v1::QUEUED);
  event.set_to_state(fp8d::v1::STARTING);
  *event.mutable_time() = At(3);
  figures.counters.Count(started, event);
  figures.slots = core::SlotCounts{.gpu_total = 8, .gpu_used = 2, .cpu_total = 0, .cpu_used = 0};

  const std::string with_job = api::RenderMetrics({running}, figures);
  EXPECT_NE(with_job.find("fp8d_job_step{fp8d_job=\"jobs/abc\"} 7"), std::string::npos) << with_job;
  EXPECT_EQ(with_job.find("{job="), std::string::npos) << with_job;
  EXPECT_NE(with_job.find("fp8d_slots{kind=\"gpu\",state=\"used\"} 2"), std::string::npos) << with_job;
  EXPECT_NE(with_job.find("fp8d_build_info{build_type="), std::string::npos) << with_job;
  // No jobs left (deleted): the counters and histograms still say what happened.
  const std::string without = api::RenderMetrics({}, figures);
  EXPECT_NE(without.find("fp8d_job_attempts_started_total{kind=\"TRAIN\"} 1"), std::string::npos) << without;
  EXPECT_NE(without.find("fp8d_job_attempts_started_total{kind=\"CALIBRATE\"} 0"), std::string::npos) << without;
  EXPECT_NE(without.find("fp8d_job_queue_wait_seconds_count{kind=\"TRAIN\"} 1"), std::string::npos) << without;
  EXPECT_NE(without.find("# TYPE fp8d_job_attempts_started_total counter"), std::string::npos) << without;
  // The Slurm launcher: no slots of fp8d's own, no capacity gauges.
  figures.slots.reset();
  EXPECT_EQ(api::RenderMetrics({}, figures).find("fp8d_slots"), std::string::npos);
}

TEST(IoWatchdog, ABlockedIoContextIsNotLiveWithinTheBoundAndLiveAgainAfter) {
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  std::atomic<int> downs{0}, ups{0};
  server::IoWatchdog watchdog(io, std::chrono::milliseconds(400), [&](bool live) { ++(live ? ups : downs); });
  watchdog.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_TRUE(watchdog.Live());
  EXPECT_EQ(downs, 0);

  std::atomic<bool> release{false};
  boost::asio::post(io, [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  const auto blocked = std::chrono::steady_clock::now();
  while (watchdog.Live() && std::chrono::steady_clock::now() - blocked < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(watchdog.Live());
  EXPECT_LT(std::chrono::steady_clock::now() - blocked, std::chrono::milliseconds(400 + 300));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(downs, 1);

  release = true;
  const auto released = std::chrono::steady_clock::now();
  while (ups == 0 && std::chrono::steady_clock::now() - released < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(watchdog.Live());
  EXPECT_EQ(ups, 1);
  watchdog.Stop();
  work.reset();
  io.stop();
  runner.join();
}

TEST(LogSetup, SyslogPrioritiesOfSpdlogLevels) {
  EXPECT_EQ(server::SyslogPriority(spdlog::level::trace), 7);   // LOG_DEBUG
  EXPECT_EQ(server::SyslogPriority(spdlog::level::debug), 7);
  EXPECT_EQ(server::SyslogPriority(spdlog::level::info), 6);    // LOG_INFO
  EXPECT_EQ(server::SyslogPriority(spdlog::level::warn), 4);    // LOG_WARNING
  EXPECT_EQ(server::SyslogPriority(spdlog::level::err), 3);     // LOG_ERR
  EXPECT_EQ(server::SyslogPriority(spdlog::level::critical), 2);  // LOG_CRIT
}

}  // namespace
}  // namespace fp8d
