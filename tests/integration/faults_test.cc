// SPDX-License-Identifier: Apache-2.0
// Failure paths end to end: the fault-injection worker crashes, hangs, overruns its deadline
// or exits 64; the controller itself is SIGKILLed mid-run and restarted. One test runs the
// real fp8-worker on the shipped corpus when it has been built.
#include <signal.h>

#include <filesystem>
#include <set>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include "daemon/store/job_store.h"
#include "tests/integration/daemon_test.h"

namespace fp8d::itest {
namespace {

using fp8d::v1::Job;
using google::protobuf::util::TimeUtil;

class FaultsTest : public DaemonTest {};

int64_t Millis(const google::protobuf::Timestamp& t) { return TimeUtil::TimestampToMilliseconds(t); }

TEST_F(FaultsTest, CrashIsRetriedWithBackoffAndResumesFromTheLastCheckpoint) {
  DaemonOptions options;
  options.env = {{"FP8_TEST_MODE", "crash_at_step"}, {"FP8_TEST_CRASH_STEP", "8"},
                 {"FP8_TEST_CRASH_ONLY_ATTEMPT", "1"}, {"FP8_TEST_STEP_MS", "30"}};
  StartDaemon(options);
  auto created = client().CreateJob(TestTrainJob(Out("crash"), 12, 5));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto job = WaitTerminal(client(), created->name());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED);
  EXPECT_EQ(job->attempt(), 2);
  ASSERT_EQ(job->attempts_size(), 2);
  EXPECT_EQ(job->attempts(0).failure_class(), fp8d::v1::WORKER_CRASH);
  EXPECT_NE(job->attempts(1).resumed_from().find("step-5"), std::string::npos)
      << "resumed from: " << job->attempts(1).resumed_from();
  // initial_backoff 200 ms, jitter at most 20 %.
  EXPECT_GE(Millis(job->attempts(1).start_time()) - Millis(job->attempts(0).end_time()), 150);
  EXPECT_EQ(job->progress().step(), 12);
}

TEST_F(FaultsTest, CrashFailsWithItsClassOnceAttemptsAreUsedUp) {
  DaemonOptions options;
  options.env = {{"FP8_TEST_MODE", "crash_at_step"}, {"FP8_TEST_CRASH_STEP", "2"},
                 {"FP8_TEST_STEP_MS", "20"}};
  StartDaemon(options);
  Job spec = TestTrainJob(Out("crash2"), 10);
  spec.mutable_retry()->set_max_attempts(2);
  auto created = client().CreateJob(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto job = WaitTerminal(client(), created->name());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::FAILED);
  EXPECT_EQ(job->attempt(), 2);
  EXPECT_EQ(job->attempts_size(), 2);
  EXPECT_EQ(job->error().failure_class(), fp8d::v1::WORKER_CRASH);
}

TEST_F(FaultsTest, HangIsDetectedWithinTheProgressTimeout) {
  DaemonOptions options;
  options.env = {{"FP8_TEST_MODE", "hang_after_start"}};
  options.cancel_grace_ms = 200;
  StartDaemon(options);
  Job spec = TestTrainJob(Out("hang"), 100);
  spec.mutable_retry()->set_max_attempts(1);
  spec.mutable_timeouts()->mutable_progress_timeout()->set_seconds(2);
  auto created = client().CreateJob(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto job = WaitTerminal(client(), created->name());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::FAILED);
  EXPECT_EQ(job->error().failure_class(), fp8d::v1::HUNG);
  // Detection: from the RUNNING transition to the next one, at most progress_timeout + 1 s
  // (+ the 200 ms kill grace, as the job leaves RUNNING once its worker is gone).
  int64_t running_at = -1, next_at = -1;
  for (const auto& e : job->events()) {
    if (e.to_state() == fp8d::v1::RUNNING) {
      running_at = Millis(e.time());
    } else if (running_at >= 0 && next_at < 0) {
      next_at = Millis(e.time());
    }
  }
  ASSERT_GE(running_at, 0);
  ASSERT_GE(next_at, 0);
  EXPECT_LE(next_at - running_at, 2000 + 1000 + 200);
  EXPECT_GE(next_at - running_at, 2000);
}

TEST_F(FaultsTest, AttemptDeadlineIsEnforced) {
  DaemonOptions options;
  options.env = {{"FP8_TEST_STEP_MS", "50"}};
  StartDaemon(options);
  Job spec = TestTrainJob(Out("deadline"), 100000);
  spec.mutable_retry()->set_max_attempts(1);
  spec.mutable_timeouts()->mutable_attempt_deadline()->set_seconds(1);
  auto created = client().CreateJob(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto job = WaitTerminal(client(), created->name());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::FAILED);
  EXPECT_EQ(job->error().failure_class(), fp8d::v1::DEADLINE_EXCEEDED);
}

TEST_F(FaultsTest, InvalidSpecExitIsNotRetried) {
  DaemonOptions options;
  options.env = {{"FP8_TEST_MODE", "exit_code"}, {"FP8_TEST_EXIT_CODE", "64"},
                 {"FP8_TEST_CRASH_STEP", "2"}, {"FP8_TEST_STEP_MS", "20"}};
  StartDaemon(options);
  auto created = client().CreateJob(TestTrainJob(Out("exit64"), 10));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto job = WaitTerminal(client(), created->name());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::FAILED);
  EXPECT_EQ(job->attempt(), 1) << "max_attempts 3, but 64 is permanent";
  EXPECT_EQ(job->error().failure_class(), fp8d::v1::INVALID_SPEC);
}

TEST_F(FaultsTest, ControllerSigkillThenRestartLosesNothingAndReadoptsWorkers) {
  DaemonOptions options;
  options.cpu_slots = 2;
  options.env = {{"FP8_TEST_STEP_MS", "50"}};
  StartDaemon(options);
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    auto j = client().CreateJob(TestTrainJob(Out("r" + std::to_string(i)), 80, 20));
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    names.push_back(j->name());
  }
  std::map<std::string, int64_t> running_pids;
  ASSERT_TRUE(PollUntil([&] {
    running_pids.clear();
    for (const auto& n : names) {
      auto j = client().GetJob(n, fp8d::v1::JOB_VIEW_FULL);
      if (j.ok() && j->state() == fp8d::v1::RUNNING && j->attempts_size() == 1 &&
          j->attempts(0).ranks_size() == 1) {
        running_pids[n] = j->attempts(0).ranks(0).pid();
      }
    }
    return running_pids.size() == 2;
  }));

  daemon_->Signal(SIGKILL);
  EXPECT_EQ(daemon_->Wait(), 128 + SIGKILL);
  for (const auto& [n, pid] : running_pids) EXPECT_TRUE(ProcessAlive(pid)) << n << " worker died with fp8d";

  fp8::Status st = daemon_->Start();
  ASSERT_TRUE(st.ok()) << st.ToString();
  fp8d::v1::ListJobsRequest all;
  all.set_page_size(1000);
  auto listed = client().ListJobs(all);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::set<std::string> after;
  for (const auto& j : listed->jobs()) after.insert(j.name());
  EXPECT_EQ(after, std::set<std::string>(names.begin(), names.end())) << "no job lost or duplicated";

  for (const auto& n : names) {
    auto j = WaitTerminal(client(), n);
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    EXPECT_EQ(j->state(), fp8d::v1::SUCCEEDED) << n;
    if (running_pids.count(n) != 0) {
      EXPECT_EQ(j->attempt(), 1) << n << " was re-adopted, not retried";
      ASSERT_GE(j->attempts_size(), 1);
      ASSERT_EQ(j->attempts(0).ranks_size(), 1);
      EXPECT_EQ(j->attempts(0).ranks(0).pid(), running_pids[n]);
    }
  }

  // SIGTERM: clean exit; then the store is consistent.
  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->Wait(), 0);
  auto store = fp8d::store::OpenSqliteJobStore(tmp_.path() + "/data/fp8d.db");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  fp8::Status integrity = (*store)->IntegrityCheck();
  EXPECT_TRUE(integrity.ok()) << integrity.ToString();
  EXPECT_EQ((*store)->CountJobs(), 3);
}

// The real trainer, tiny model, fp8-blockwise, on the corpus shipped in data/.
TEST_F(FaultsTest, RealWorkerTrainsATinyFp8BlockwiseJob) {
  namespace fs = std::filesystem;
  if (!fs::exists(RealWorkerPath())) GTEST_SKIP() << RealWorkerPath() << " not built";
  const std::string corpus = std::string(FP8D_SOURCE_DIR) + "/data/corpus.txt";
  if (!fs::exists(corpus)) GTEST_SKIP() << corpus << " missing";
  const std::string data = tmp_.path() + "/tokens";
  ProcessResult prep = RunProcess({RealWorkerPath(), "prepare-data", "--text", corpus, "--out", data});
  ASSERT_EQ(prep.exit_code, 0) << prep.err;

  DaemonOptions options;
  options.worker = RealWorkerPath();
  options.cpu_slots = 1;
  StartDaemon(options);
  Job spec = TestTrainJob(Out("real"), 20, 10);
  spec.mutable_train()->mutable_data()->set_train(data + "/train_*.bin");
  auto created = client().CreateJob(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(600));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->error().message();
  EXPECT_EQ(job->progress().step(), 20);
  EXPECT_TRUE(std::isfinite(job->progress().loss()));
  EXPECT_GT(job->progress().loss(), 0);
  EXPECT_EQ(job->checkpoint().step(), 20);
  EXPECT_TRUE(fs::exists(job->checkpoint().path())) << job->checkpoint().path();
}

}  // namespace
}  // namespace fp8d::itest
