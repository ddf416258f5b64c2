// SPDX-License-Identifier: Apache-2.0
// Preemption through a real fp8d and the fault-injection worker (issue 28), with no `queues:`
// config (one queue, `default`) on 2 CPU slots:
//   - a higher priority preempts a lower one, which checkpoints on SIGTERM and resumes from that
//     checkpoint without spending its max_attempts;
//   - a `preemptible: false` job is never preempted: the higher priority waits, with a reason;
//   - a worker that ignores SIGTERM is SIGKILLed after --preemption-grace-ms and resumes from its
//     last periodic checkpoint;
//   - fp8d killed once a preemption's intent is durable (failpoint after_preempt_intent) finishes
//     that preemption after the restart: no step runs twice, no two attempts overlap.
// Every worker appends "<attempt> <rank> <step> <pid>" to <output_dir>/steps.log per step
// (FP8_TEST_STEP_LOG), which is what shows which attempt ran which step.
#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include "tests/integration/daemon_test.h"

namespace fp8d::itest {
namespace {

using fp8d::v1::Job;
using google::protobuf::util::TimeUtil;

constexpr int kGraceMs = 1000;
constexpr int kStepMs = 25;
constexpr int kSaveSteps = 10;

int64_t Ms(const google::protobuf::Timestamp& t) { return TimeUtil::TimestampToMilliseconds(t); }

bool StartsWith(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

std::map<int, std::vector<long>> StepsByAttempt(const std::vector<StepLine>& lines) {
  std::map<int, std::vector<long>> out;
  for (const StepLine& l : lines) out[l.attempt].push_back(l.step);
  return out;
}

std::vector<long> Range(long first, long last) {
  std::vector<long> out;
  for (long s = first; s <= last; ++s) out.push_back(s);
  return out;
}

// The attempts wrote their steps one after the other: no line of an attempt after one of a
// later attempt (two attempts of one job never ran side by side).
void ExpectAttemptsInSequence(const std::vector<StepLine>& lines, const std::string& what) {
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_LE(lines[i - 1].attempt, lines[i].attempt) << what << ": attempt " << lines[i - 1].attempt
                                                      << " ran step " << lines[i - 1].step << " after attempt "
                                                      << lines[i].attempt << " had started";
  }
}

class PreemptionTest : public DaemonTest {
 protected:
  DaemonOptions Options() {
    DaemonOptions options;
    options.cpu_slots = 2;
    options.env = {{"FP8_TEST_STEP_MS", std::to_string(kStepMs)}, {"FP8_TEST_STEP_LOG", "1"}};
    options.extra_args = {"--preemption-grace-ms", std::to_string(kGraceMs), "--tick-ms", "20"};
    return options;
  }

  // max_attempts 1: a preemption that spent an attempt would leave the job FAILED.
  Job TrainJob(const std::string& out, int steps, int priority) {
    Job job = TestTrainJob(Out(out), steps, kSaveSteps);
    job.set_priority(priority);
    job.mutable_retry()->set_max_attempts(1);
    return job;
  }

  std::string Create(const Job& job) {
    auto created = client().CreateJob(job);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created->name() : "";
  }

  // Two priority-0 jobs hold both slots, each past `past_step` (beyond its first checkpoint).
  std::vector<std::string> FillSlots(const std::vector<Job>& jobs, int past_step) {
    std::vector<std::string> names;
    for (const Job& job : jobs) names.push_back(Create(job));
    EXPECT_TRUE(PollUntil([&] {
      for (const std::string& name : names) {
        auto job = client().GetJob(name);
        if (!job.ok() || job->state() != fp8d::v1::RUNNING || job->progress().step() < past_step) return false;
      }
      return true;
    })) << "the low-priority jobs never got going";
    return names;
  }

  Job Finished(const std::string& name) {
    auto done = WaitTerminal(client(), name, std::chrono::seconds(60));
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    if (!done.ok()) return Job();
    EXPECT_EQ(done->state(), fp8d::v1::SUCCEEDED) << done->DebugString();
    return *done;
  }

  // The job ran once, every step once, on attempt 1.
  void ExpectRanOnce(const Job& job, const std::string& out, int steps) {
    EXPECT_EQ(job.attempts_size(), 1) << job.DebugString();
    const auto by_attempt = StepsByAttempt(ReadSteps(Out(out) + "/steps.log"));
    ASSERT_EQ(by_attempt.size(), 1u) << job.name();
    EXPECT_EQ(by_attempt.begin()->second, Range(1, steps)) << job.name();
  }

  // Attempt 1 was preempted by `by` and checkpointed at the step it stopped at; attempt 2
  // resumed from that checkpoint and ran the rest: every step exactly once, in sequence.
  void ExpectResumedFromPreemptionCheckpoint(const Job& job, const std::string& out, int steps,
                                             const std::string& by) {
    ASSERT_EQ(job.attempts_size(), 2) << job.DebugString();
    EXPECT_EQ(job.attempts(0).failure_class(), fp8d::v1::PREEMPTED) << job.DebugString();
    EXPECT_TRUE(StartsWith(job.attempts(0).failure_message(), "preempted by " + by)) << job.attempts(0).failure_message();
    EXPECT_TRUE(job.attempts(0).resumed_from().empty());
    EXPECT_LE(Ms(job.attempts(0).end_time()), Ms(job.attempts(1).start_time())) << "the attempts overlap";
    const std::vector<StepLine> lines = ReadSteps(Out(out) + "/steps.log");
    ExpectAttemptsInSequence(lines, job.name());
    const auto by_attempt = StepsByAttempt(lines);
    ASSERT_EQ(by_attempt.size(), 2u) << job.name();
    const std::vector<long>& first = by_attempt.at(1);
    ASSERT_FALSE(first.empty());
    const long stopped_at = first.back();
    EXPECT_EQ(first, Range(1, stopped_at)) << job.name();
    EXPECT_LT(stopped_at, steps) << job.name() << ": the preemption came after the work was done";
    EXPECT_EQ(job.attempts(1).resumed_from(), Out(out) + "/checkpoints/step-" + std::to_string(stopped_at))
        << "attempt 2 did not resume from the checkpoint written on SIGTERM";
    EXPECT_EQ(by_attempt.at(2), Range(stopped_at + 1, steps)) << job.name() << ": a step ran twice or never";
  }
};

// 2 slots of priority-0 jobs; a priority-10 job preempts the younger one, which checkpoints,
// goes back to QUEUED with the reason, and resumes from that checkpoint once a slot is free:
// SUCCEEDED with max_attempts 1, its first attempt PREEMPTED.
TEST_F(PreemptionTest, AHigherPriorityPreemptsTheYoungerLowOneWhichResumesFromItsCheckpoint) {
  StartDaemon(Options());
  constexpr int kLowSteps = 80, kHighSteps = 20;
  const std::vector<std::string> low =
      FillSlots({TrainJob("low0", kLowSteps, 0), TrainJob("low1", kLowSteps, 0)}, kSaveSteps + 2);
  ASSERT_EQ(low.size(), 2u);
  const std::string high = Create(TrainJob("high", kHighSteps, 10));
  ASSERT_FALSE(high.empty());

  // The victim waits in QUEUED, saying why, while the high-priority job holds its slot.
  ASSERT_TRUE(PollUntil([&] {
    auto job = client().GetJob(low[1]);
    return job.ok() && job->state() == fp8d::v1::QUEUED &&
           StartsWith(job->pending_reason(), "preempted by " + high);
  })) << client().GetJob(low[1])->DebugString();
  EXPECT_EQ(client().GetJob(low[0])->state(), fp8d::v1::RUNNING) << "only one slot was needed";

  const Job high_done = Finished(high);
  ExpectRanOnce(high_done, "high", kHighSteps);
  const Job low0 = Finished(low[0]);
  const Job low1 = Finished(low[1]);
  ExpectRanOnce(low0, "low0", kLowSteps);
  ExpectResumedFromPreemptionCheckpoint(low1, "low1", kLowSteps, high);
  // The high-priority job started only once the victim had stopped.
  EXPECT_GE(Ms(high_done.attempts(0).start_time()), Ms(low1.attempts(0).end_time()));
  EXPECT_TRUE(low1.pending_reason().empty()) << low1.pending_reason();
}

// The same with both low-priority jobs `preemptible: false`: nothing is preempted; the
// high-priority job waits with a pending_reason until one of them has finished.
TEST_F(PreemptionTest, ANonPreemptibleJobIsNeverPreemptedTheHigherPriorityWaits) {
  StartDaemon(Options());
  constexpr int kLowSteps = 60, kHighSteps = 10;
  Job pinned0 = TrainJob("low0", kLowSteps, 0), pinned1 = TrainJob("low1", kLowSteps, 0);
  pinned0.set_preemptible(false);
  pinned1.set_preemptible(false);
  const std::vector<std::string> low = FillSlots({pinned0, pinned1}, 2);
  ASSERT_EQ(low.size(), 2u);
  const std::string high = Create(TrainJob("high", kHighSteps, 10));
  ASSERT_FALSE(high.empty());

  Job waiting;
  EXPECT_TRUE(PollUntil([&] {
    auto job = client().GetJob(high);
    if (!job.ok()) return false;
    waiting = *job;
    return job->state() == fp8d::v1::QUEUED && !job->pending_reason().empty();
  }, std::chrono::seconds(5))) << "no pending_reason while waiting: " << waiting.DebugString();
  EXPECT_EQ(waiting.state(), fp8d::v1::QUEUED);
  EXPECT_EQ(waiting.pending_reason(), "queue default: waiting for 1 CPU slot");

  const Job low0 = Finished(low[0]);
  const Job low1 = Finished(low[1]);
  const Job high_done = Finished(high);
  ExpectRanOnce(low0, "low0", kLowSteps);
  ExpectRanOnce(low1, "low1", kLowSteps);
  ExpectRanOnce(high_done, "high", kHighSteps);
  for (const Job& j : {low0, low1}) EXPECT_EQ(j.attempts(0).failure_class(), fp8d::v1::FAILURE_CLASS_UNSPECIFIED);
  EXPECT_GE(Ms(high_done.attempts(0).start_time()),
            std::min(Ms(low0.attempts(0).end_time()), Ms(low1.attempts(0).end_time())))
      << "the high-priority job started before a slot was free";
}

// The low-priority workers ignore SIGTERM: the victim is SIGKILLed after the grace, its attempt
// is still PREEMPTED (not counted), and the next attempt resumes from the last periodic
// checkpoint, losing at most one checkpoint interval.
TEST_F(PreemptionTest, AWorkerIgnoringSigtermIsKilledAfterTheGraceAndResumesFromItsPeriodicCheckpoint) {
  StartDaemon(Options());
  constexpr int kLowSteps = 120, kHighSteps = 10;
  Job deaf0 = TrainJob("low0", kLowSteps, 0), deaf1 = TrainJob("low1", kLowSteps, 0);
  (*deaf0.mutable_env())["FP8_TEST_MODE"] = "ignore_sigterm";
  (*deaf1.mutable_env())["FP8_TEST_MODE"] = "ignore_sigterm";
  const std::vector<std::string> low = FillSlots({deaf0, deaf1}, kSaveSteps + 2);
  ASSERT_EQ(low.size(), 2u);
  auto created = client().CreateJob(TrainJob("high", kHighSteps, 10));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::string high = created->name();

  const Job high_done = Finished(high);
  const Job low0 = Finished(low[0]);
  const Job low1 = Finished(low[1]);
  ExpectRanOnce(high_done, "high", kHighSteps);
  ExpectRanOnce(low0, "low0", kLowSteps);

  ASSERT_EQ(low1.attempts_size(), 2) << low1.DebugString();
  const fp8d::v1::Attempt& killed = low1.attempts(0);
  EXPECT_EQ(killed.failure_class(), fp8d::v1::PREEMPTED) << killed.DebugString();
  EXPECT_NE(killed.failure_message().find("killed by signal 9"), std::string::npos) << killed.failure_message();
  // SIGTERM went out after the create; SIGKILL a grace later.
  EXPECT_GE(Ms(killed.end_time()) - Ms(created->create_time()), kGraceMs - 10) << "killed before the grace ended";
  const std::vector<StepLine> lines = ReadSteps(Out("low1") + "/steps.log");
  ExpectAttemptsInSequence(lines, low1.name());
  const auto by_attempt = StepsByAttempt(lines);
  ASSERT_EQ(by_attempt.size(), 2u);
  const long stopped_at = by_attempt.at(1).back();
  EXPECT_EQ(by_attempt.at(1), Range(1, stopped_at));
  const std::string prefix = Out("low1") + "/checkpoints/step-";
  const std::string& resumed = low1.attempts(1).resumed_from();
  ASSERT_TRUE(StartsWith(resumed, prefix)) << resumed;
  const long resumed_step = std::stol(resumed.substr(prefix.size()));
  // A periodic checkpoint (none is written on SIGTERM by a worker that ignores it), the newest
  // one: at most one interval behind (the step's checkpoint may still have been in writing).
  EXPECT_EQ(resumed_step % kSaveSteps, 0) << resumed;
  EXPECT_LE(resumed_step, stopped_at);
  EXPECT_GE(resumed_step, stopped_at - kSaveSteps);
  EXPECT_EQ(by_attempt.at(2), Range(resumed_step + 1, kLowSteps)) << "attempt 2 did not continue from " << resumed;
}

// fp8d dies the moment the preemption's intent is durable, before any SIGTERM. The next fp8d
// finds the intent, stops the re-adopted victim (which checkpoints as on any SIGTERM), and runs
// the high-priority job: every job SUCCEEDS, every step ran once, no attempts overlap, and the
// other low-priority job was neither preempted nor restarted.
TEST_F(PreemptionTest, Fp8dKilledWithThePreemptionIntentDurableFinishesItAfterTheRestartWithNoStepRunTwice) {
  constexpr int kLowSteps = 160, kHighSteps = 20;
  const std::string data_dir = tmp_.path() + "/data";
  DaemonOptions dying = Options();
  dying.env["FP8D_FAILPOINT"] = "after_preempt_intent";
  daemon_ = std::make_unique<Daemon>(data_dir, dying);
  ASSERT_TRUE(daemon_->Start().ok()) << daemon_->Log();
  const std::vector<std::string> low =
      FillSlots({TrainJob("low0", kLowSteps, 0), TrainJob("low1", kLowSteps, 0)}, kSaveSteps + 2);
  ASSERT_EQ(low.size(), 2u);
  const int64_t low0_pid = client().GetJob(low[0], fp8d::v1::JOB_VIEW_FULL)->attempts(0).ranks(0).pid();
  const std::string high = Create(TrainJob("high", kHighSteps, 10));
  ASSERT_FALSE(high.empty());
  ASSERT_EQ(daemon_->Wait(std::chrono::seconds(30)), 99) << "fp8d did not die at the failpoint:\n" << daemon_->Log();
  EXPECT_NE(daemon_->Log().find("failpoint after_preempt_intent"), std::string::npos);

  daemon_ = std::make_unique<Daemon>(data_dir, Options());
  ASSERT_TRUE(daemon_->Start().ok());
  const Job high_done = Finished(high);
  const Job low0 = Finished(low[0]);
  const Job low1 = Finished(low[1]);
  ExpectRanOnce(high_done, "high", kHighSteps);
  ExpectRanOnce(low0, "low0", kLowSteps);
  EXPECT_EQ(low0.attempts(0).ranks(0).pid(), low0_pid) << "the running job was restarted, not adopted";
  ExpectResumedFromPreemptionCheckpoint(low1, "low1", kLowSteps, high);
  EXPECT_GE(Ms(high_done.attempts(0).start_time()), Ms(low1.attempts(0).end_time()))
      << "the high-priority job ran beside the victim";
}

}  // namespace
}  // namespace fp8d::itest
