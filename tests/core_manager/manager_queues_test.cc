// SPDX-License-Identifier: Apache-2.0
// Queues through the manager (FakeLauncher, ManualClock): two queues of quota 2 share 4 CPU
// slots; one borrows the other's while it is idle and gives a slot back, youngest job first,
// when the other submits; ListQueues shows quota, use, borrowing and waiting jobs.
#include <signal.h>

#include <string>
#include <vector>

#include "tests/core_manager/manager_harness.h"

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;

class ManagerQueuesTest : public ManagerTest {
 protected:
  void StartWithTwoQueues() {
    launcher_->slots = std::vector<launcher::Slot>(4, launcher::Slot{"node-a", -1});
    ManagerOptions options = Options();
    options.queues = {{"team-a", 0, 2, 1, {}}, {"team-b", 0, 2, 1, {}}};
    StartManager(std::move(options));
  }

  Job JobIn(const std::string& queue) {
    Job job = TrainJob();
    job.set_queue(queue);
    return job;
  }

  fp8d::v1::ListQueuesResponse Queues() {
    fp8d::v1::ListQueuesResponse out;
    bool answered = false;
    manager_->ListQueues({}, [&](fp8::StatusOr<fp8d::v1::ListQueuesResponse> r) {
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok()) out = *r;
      answered = true;
    });
    EXPECT_TRUE(RunUntil([&] { return answered; }));
    return out;
  }

  // "name quota used borrowed pending running" of one queue, CPU slots only.
  static std::string Row(const fp8d::v1::ListQueuesResponse& r, const std::string& name) {
    for (const auto& q : r.queues()) {
      if (q.name() != name) continue;
      return q.name() + " quota=" + std::to_string(q.quota_cpu_slots()) + " used=" + std::to_string(q.used_cpu_slots()) +
             " borrowed=" + std::to_string(q.borrowed_cpu_slots()) + " pending=" + std::to_string(q.pending_jobs()) +
             " running=" + std::to_string(q.running_jobs());
    }
    return "(no queue " + name + ")";
  }
};

TEST_F(ManagerQueuesTest, AQueueBorrowsTheIdleQueuesSlotsAndGivesTheYoungestBack) {
  StartWithTwoQueues();
  std::vector<std::string> a;
  for (int i = 0; i < 4; ++i) {
    a.push_back(CreateRunning(JobIn("team-a")));
    clock_.Advance(1000);  // each starts later than the one before
  }
  ASSERT_EQ(launcher_->LaunchCount(), 4u);  // team-b is idle: team-a borrows its two slots
  fp8d::v1::ListQueuesResponse q = Queues();
  EXPECT_EQ(q.cluster_cpu_slots(), 4);
  EXPECT_EQ(Row(q, "team-a"), "team-a quota=2 used=4 borrowed=2 pending=0 running=4");
  EXPECT_EQ(Row(q, "team-b"), "team-b quota=2 used=0 borrowed=0 pending=0 running=0");

  auto b = Create(JobIn("team-b"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->queue(), "team-b");
  // team-b is below its quota: the youngest of team-a's borrowers is asked to stop, no other.
  ASSERT_TRUE(RunUntil([&] { return HasSignal(a[3], 1, SIGTERM); }));
  RunFor(20);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(HasSignal(a[i], 1, SIGTERM)) << a[i];
  EXPECT_EQ(launcher_->LaunchCount(), 4u);  // team-b's job waits for the slot, no more preempted
  EXPECT_EQ(StateOf(b->name()), fp8d::v1::QUEUED);
  EXPECT_EQ(Get(b->name())->pending_reason(), "queue team-b: waiting for 1 CPU slot");

  Exit(a[3], 1, 0, 76);  // the worker checkpointed and stopped
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 5u; }));
  EXPECT_EQ(launcher_->Launch(4).job_id, b->name().substr(5));
  ASSERT_TRUE(RunUntil([&] { return Get(b->name())->pending_reason().empty(); }));  // it waits no more
  ASSERT_TRUE(WaitState(a[3], fp8d::v1::QUEUED));
  auto preempted = Get(a[3]);
  ASSERT_TRUE(preempted.ok());
  EXPECT_EQ(preempted->pending_reason(), "preempted by " + b->name() + " (queue team-b below its quota)");
  q = Queues();
  EXPECT_EQ(Row(q, "team-a"), "team-a quota=2 used=3 borrowed=1 pending=1 running=3");
  EXPECT_EQ(Row(q, "team-b"), "team-b quota=2 used=1 borrowed=0 pending=0 running=1");
  EXPECT_EQ(q.queues(0).preemptions(), 1);  // team-a's, counted once for the one job
  EXPECT_EQ(q.queues(1).preemptions(), 0);

  // team-b's job ends: team-a borrows the slot again.
  Emit(b->name(), 1, 0, {{"type", "started"}, {"rank", 0}});
  ASSERT_TRUE(WaitState(b->name(), fp8d::v1::RUNNING));
  FinishAttempt(b->name(), 1, 1);
  ASSERT_TRUE(WaitState(b->name(), fp8d::v1::SUCCEEDED));
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 6u; }));
  EXPECT_EQ(launcher_->Launch(5).job_id, a[3].substr(5));
}

TEST_F(ManagerQueuesTest, AQueueWithinItsQuotaWaitsWhenTheBorrowersMayNotBePreempted) {
  StartWithTwoQueues();
  std::vector<std::string> a;
  for (int i = 0; i < 4; ++i) {
    Job job = JobIn("team-a");
    job.set_preemptible(false);
    a.push_back(CreateRunning(job));
  }
  auto b = Create(JobIn("team-b"));
  ASSERT_TRUE(b.ok());
  RunFor(50);
  for (const std::string& name : a) EXPECT_FALSE(HasSignal(name, 1, SIGTERM)) << name;
  EXPECT_EQ(StateOf(b->name()), fp8d::v1::QUEUED);
  EXPECT_EQ(Row(Queues(), "team-b"), "team-b quota=2 used=0 borrowed=0 pending=1 running=0");
  // Once a slot frees, team-b (below its quota, the lowest share) gets it.
  FinishAttempt(a[0], 1, 1);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 5u; }));
  EXPECT_EQ(launcher_->Launch(4).job_id, b->name().substr(5));
}

TEST_F(ManagerQueuesTest, WithoutQueuesAHigherPriorityJobPreemptsALowerOne) {
  StartManager();  // two CPU slots, the one queue `default`
  const std::string low = CreateRunning(TrainJob());
  clock_.Advance(1000);
  const std::string other = CreateRunning(TrainJob());
  Job urgent = TrainJob();
  urgent.set_priority(10);
  auto created = Create(urgent);
  ASSERT_TRUE(created.ok());
  // Equal priorities: the youngest of the two goes.
  ASSERT_TRUE(RunUntil([&] { return HasSignal(other, 1, SIGTERM); }));
  EXPECT_FALSE(HasSignal(low, 1, SIGTERM));
  Exit(other, 1, 0, 76);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 3u; }));
  EXPECT_EQ(launcher_->Launch(2).job_id, created->name().substr(5));
  ASSERT_TRUE(WaitState(other, fp8d::v1::QUEUED));
  EXPECT_EQ(Get(other)->pending_reason(), "preempted by " + created->name() + " (priority 10)");
}

}  // namespace
}  // namespace fp8d::core::testing
