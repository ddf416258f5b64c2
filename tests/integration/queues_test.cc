// SPDX-License-Identifier: Apache-2.0
// Queues with real processes (fp8d, the fault-injection worker, fp8ctl): the create path's
// refusals naming job.queue with nothing stored, ListQueues and `fp8ctl queues`, fp8d refusing
// to start on a bad `queues:` config, and the case on 4 CPU slots: team-a borrows
// team-b's idle slots, team-b's two jobs take two back, and every job ends SUCCEEDED with the
// preempted ones resumed from their checkpoints.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/daemon_test.h"

namespace fp8d::itest {
namespace {

using fp8d::v1::Job;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class QueuesTest : public DaemonTest {
 protected:
  // Two queues of 2 CPU slots each on a cluster of 4; team-b's principals, when given, only.
  void StartWithQueues(const std::string& team_b_principals = "", int step_ms = 20) {
    const std::string config = tmp_.path() + "/fp8d.yaml";
    std::ofstream(config) << "queues:\n"
                             "  - name: team-a\n    quota: {cpu_slots: 2}\n"
                             "  - name: team-b\n    quota: {cpu_slots: 2}\n"
                          << (team_b_principals.empty() ? "" : "    principals: [" + team_b_principals + "]\n");
    DaemonOptions options;
    options.cpu_slots = 4;
    options.extra_args = {"--config", config};
    options.env["FP8_TEST_STEP_MS"] = std::to_string(step_ms);
    StartDaemon(options);
  }

  Job JobIn(const std::string& queue, const std::string& out, int steps = 10, int save_steps = 0) {
    Job job = TestTrainJob(Out(out), steps, save_steps);
    job.set_queue(queue);
    return job;
  }
};

TEST_F(QueuesTest, AnUnknownQueueOrOneThatExcludesTheCallerIsRefusedNamingTheFieldAndNothingIsStored) {
  StartWithQueues("someone-else");
  auto unknown = client().CreateJob(JobIn("team-z", "z"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(unknown.status().ToString(), "job.queue: unknown queue team-z")) << unknown.status().ToString();
  auto unnamed = client().CreateJob(JobIn("", "none"));  // no queue is named default
  ASSERT_FALSE(unnamed.ok());
  EXPECT_TRUE(Contains(unnamed.status().ToString(), "job.queue: required")) << unnamed.status().ToString();
  auto excluded = client().CreateJob(JobIn("team-b", "b"));
  ASSERT_FALSE(excluded.ok());
  EXPECT_EQ(excluded.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(excluded.status().ToString(), "may not submit to queue team-b")) << excluded.status().ToString();
  fp8d::v1::ListJobsRequest all;
  auto listed = client().ListJobs(all);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->jobs_size(), 0);

  auto ok = client().CreateJob(JobIn("team-a", "a"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->queue(), "team-a");
  auto queues = client().ListQueues();
  ASSERT_TRUE(queues.ok()) << queues.status().ToString();
  ASSERT_EQ(queues->queues_size(), 2);
  EXPECT_EQ(queues->cluster_cpu_slots(), 4);
  EXPECT_EQ(queues->queues(0).name(), "team-a");
  EXPECT_EQ(queues->queues(0).quota_cpu_slots(), 2);
  EXPECT_EQ(queues->queues(0).pending_jobs() + queues->queues(0).running_jobs(), 1);
  EXPECT_EQ(queues->queues(1).principals_size(), 1);
  ProcessResult table = RunProcess({Fp8ctlPath(), "--server", daemon_->address(), "queues"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(Contains(table.out, "QUEUE")) << table.out;
  EXPECT_TRUE(Contains(table.out, "team-b  0/2")) << table.out;
  EXPECT_TRUE(Contains(table.out, "someone-else")) << table.out;
  ASSERT_TRUE(WaitTerminal(client(), ok->name()).ok());
}

TEST_F(QueuesTest, BadQueueConfigStopsFp8dWithTheKeyNamed) {
  auto refuse = [&](const std::string& yaml, const std::string& expected) {
    const std::string config = tmp_.path() + "/bad.yaml";
    std::ofstream(config) << yaml;
    ProcessResult r = RunProcess({Fp8dPath(), "--data-dir", tmp_.path() + "/bad-data", "--listen", "127.0.0.1:0",
                                  "--cpu-slots", "4", "--gpus", "none", "--worker", TestWorkerPath(), "--config", config});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(Contains(r.err, expected)) << r.err;
  };
  refuse("queues:\n  - name: team-a\n    quota: {cpu_slots: 5}\n",
         "queues[0].quota.cpu_slots: queue team-a has a quota of 5 CPU slots but the cluster has 4");
  refuse("queues:\n  - name: a\n  - name: b\n    weight: -1\n", "queues[1].weight: must be > 0");
  refuse("queues:\n  - name: a\n  - name: a\n", "queues[1].name a: duplicate queue name");
  refuse("queues:\n  - name: a\n    quota: {gpus: -2}\n", "queues[0].quota.gpus: must be >= 0");
}

TEST_F(QueuesTest, AQueueBelowItsQuotaTakesBorrowedSlotsBackAndThePreemptedJobsResume) {
  StartWithQueues("", 30);
  std::vector<std::string> a;
  for (int i = 0; i < 4; ++i) {
    auto created = client().CreateJob(JobIn("team-a", "a" + std::to_string(i), 150, 10));
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    a.push_back(created->name());
    ASSERT_TRUE(WaitState(client(), created->name(), fp8d::v1::RUNNING).ok());
  }
  // team-b was idle: team-a borrowed its two slots. Let every job get past a checkpoint.
  ASSERT_TRUE(PollUntil([&] {
    for (const std::string& name : a) {
      auto job = client().GetJob(name);
      if (!job.ok() || job->progress().step() < 15) return false;
    }
    return true;
  }));
  std::vector<std::string> b;
  for (int i = 0; i < 2; ++i) {
    auto created = client().CreateJob(JobIn("team-b", "b" + std::to_string(i), 20));
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    b.push_back(created->name());
  }
  for (const std::string& name : b) ASSERT_TRUE(WaitState(client(), name, fp8d::v1::RUNNING).ok()) << name;
  for (const std::string& name : b) {
    auto done = WaitTerminal(client(), name);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(done->state(), fp8d::v1::SUCCEEDED) << name;
  }
  int preempted = 0;
  for (const std::string& name : a) {
    auto done = WaitTerminal(client(), name, std::chrono::seconds(120));
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(done->state(), fp8d::v1::SUCCEEDED) << name;
    auto full = client().GetJob(name, fp8d::v1::JOB_VIEW_FULL);
    ASSERT_TRUE(full.ok());
    if (full->attempts_size() < 2) continue;
    ++preempted;
    EXPECT_EQ(full->attempts(0).failure_class(), fp8d::v1::PREEMPTED) << name;
    EXPECT_FALSE(full->attempts(1).resumed_from().empty()) << name << ": the next attempt resumes from a checkpoint";
  }
  // Exactly two, the youngest two (the last created), gave their slots back.
  EXPECT_EQ(preempted, 2);
  for (int i : {2, 3}) EXPECT_GE(client().GetJob(a[i], fp8d::v1::JOB_VIEW_FULL)->attempts_size(), 2) << a[i];
}

}  // namespace
}  // namespace fp8d::itest
