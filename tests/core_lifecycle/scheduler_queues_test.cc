// SPDX-License-Identifier: Apache-2.0
// PlanSchedule with queues (scheduler.h): quotas, borrowing, fair share by weight, per-queue
// no-backfill, reclaim from borrowers and priority preemption. Each case is a cluster, the jobs
// holding slots, the queue, and the plan expected back, written as short strings.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/core/scheduler.h"

namespace fp8d::core {
namespace {

// `n` CPU slots on one host, or `n` GPUs on node g.
std::vector<ClusterSlot> Cpus(int n) { return std::vector<ClusterSlot>(n, ClusterSlot{SlotRef{"h", -1}, true}); }
std::vector<ClusterSlot> Gpus(int n) {
  std::vector<ClusterSlot> out;
  for (int i = 0; i < n; ++i) out.push_back(ClusterSlot{SlotRef{"g", i}, true});
  return out;
}

struct Holding {
  const char* name;
  const char* queue;
  int ranks;
  int64_t start_seq;
  int32_t priority = 0;
  bool preemptible = true;
  bool preempting = false;
};

// The cluster with `held` holding free slots in order (they become busy).
ScheduleInput With(std::vector<ClusterSlot> slots, std::vector<QueueQuota> queues, const std::vector<Holding>& held,
                   std::vector<QueuedJob> queued) {
  ScheduleInput in;
  in.slots = std::move(slots);
  in.queues = std::move(queues);
  in.queue = std::move(queued);
  for (const Holding& h : held) {
    RunningJob r{h.name, h.queue, h.priority, h.preemptible, h.start_seq, {}, h.preempting};
    for (ClusterSlot& s : in.slots) {
      if (static_cast<int>(r.slots.size()) == h.ranks) break;
      if (!s.free) continue;
      s.free = false;
      r.slots.push_back(s.slot);
    }
    in.running.push_back(std::move(r));
  }
  return in;
}

QueuedJob Q(const char* name, const char* queue, int32_t ranks = 1, int64_t seq = 0, int32_t priority = 0) {
  return QueuedJob{name, priority, seq, ranks, queue};
}

std::vector<std::string> Placed(const Plan& plan) {
  std::vector<std::string> out;
  for (const Assignment& a : plan.assignments) out.push_back(a.name);
  return out;
}

std::vector<std::string> Victims(const Plan& plan) {
  std::vector<std::string> out;
  for (const Preemption& p : plan.preemptions) out.push_back(p.victim + "<-" + p.for_job);
  return out;
}

using Names = std::vector<std::string>;

const std::vector<QueueQuota> kTwoByTwo = {{"team-a", 0, 2, 1}, {"team-b", 0, 2, 1}};

TEST(SchedulerQueues, WithoutQueuesEveryJobIsInTheDefaultQueueAndNothingIsPreemptedForEqualPriority) {
  Plan plan = PlanSchedule(With(Cpus(2), {}, {{"r1", "", 1, 1}}, {Q("a", "", 1, 1), Q("b", "default", 1, 2)}));
  EXPECT_EQ(Placed(plan), (Names{"a"}));
  EXPECT_EQ(plan.blocked_by, "b");
  EXPECT_TRUE(plan.preemptions.empty());
}

TEST(SchedulerQueues, AQueueBorrowsIdleSlotsBeyondItsQuota) {
  Plan plan = PlanSchedule(
      With(Cpus(4), kTwoByTwo, {}, {Q("a1", "team-a", 1, 1), Q("a2", "team-a", 1, 2), Q("a3", "team-a", 1, 3),
                                    Q("a4", "team-a", 1, 4), Q("a5", "team-a", 1, 5)}));
  EXPECT_EQ(Placed(plan), (Names{"a1", "a2", "a3", "a4"}));
  EXPECT_EQ(plan.blocked_by, "a5");
  // Nothing to reclaim from: the only holders would be team-a's own.
  EXPECT_TRUE(plan.preemptions.empty());
}

TEST(SchedulerQueues, AQueueWithinItsQuotaGoesFirstForFreeSlots) {
  // team-a already uses its 2; team-b uses none: the two free slots go to team-b's jobs.
  Plan plan = PlanSchedule(With(Cpus(4), kTwoByTwo, {{"r1", "team-a", 1, 1}, {"r2", "team-a", 1, 2}},
                                {Q("a3", "team-a", 1, 1), Q("b1", "team-b", 1, 2), Q("b2", "team-b", 1, 3)}));
  EXPECT_EQ(Placed(plan), (Names{"b1", "b2"}));
  EXPECT_TRUE(plan.preemptions.empty());
}

TEST(SchedulerQueues, BorrowedSlotsAreSharedByWeight) {
  // Quotas of 0: everything is borrowed, so the dominant share over weight decides, 3 to 1.
  const std::vector<QueueQuota> queues = {{"heavy", 0, 0, 3}, {"light", 0, 0, 1}};
  std::vector<QueuedJob> queued;
  for (int i = 0; i < 4; ++i) {
    queued.push_back(Q(("h" + std::to_string(i)).c_str(), "heavy", 1, i));
    queued.push_back(Q(("l" + std::to_string(i)).c_str(), "light", 1, 10 + i));
  }
  Plan plan = PlanSchedule(With(Cpus(4), queues, {}, queued));
  EXPECT_EQ(Placed(plan), (Names{"h0", "l0", "h1", "h2"}));
}

TEST(SchedulerQueues, EqualWeightsAlternate) {
  const std::vector<QueueQuota> queues = {{"x", 0, 0, 1}, {"y", 0, 0, 1}};
  Plan plan = PlanSchedule(With(Cpus(4), queues, {},
                                {Q("x1", "x", 1, 1), Q("x2", "x", 1, 2), Q("x3", "x", 1, 3), Q("y1", "y", 1, 4),
                                 Q("y2", "y", 1, 5), Q("y3", "y", 1, 6)}));
  EXPECT_EQ(Placed(plan), (Names{"x1", "y1", "x2", "y2"}));
}

TEST(SchedulerQueues, TheNoBackfillRuleHoldsPerQueue) {
  // team-a's head needs 3 and blocks team-a; team-b's small jobs still run, team-a's small one
  // behind its head does not.
  Plan plan = PlanSchedule(With(Cpus(4), {{"team-a", 0, 4, 1}, {"team-b", 0, 4, 1}}, {{"r", "team-b", 2, 1, 0, false}},
                                {Q("big", "team-a", 3, 1), Q("small-a", "team-a", 1, 2), Q("b1", "team-b", 1, 3)}));
  EXPECT_EQ(Placed(plan), (Names{"b1"}));
  EXPECT_EQ(plan.blocked_by, "big");
  ASSERT_EQ(plan.blocked.size(), 1u);
  EXPECT_EQ(plan.blocked[0].reason, "queue team-a: waiting for 3 CPU slots");
}

TEST(SchedulerQueues, AQueueBelowItsQuotaReclaimsFromTheYoungestBorrowers) {
  // The case: team-a fills all 4 slots; team-b submits 2 jobs: two of team-a's, the
  // youngest, are preempted in the same round, one for each.
  Plan plan = PlanSchedule(With(Cpus(4), kTwoByTwo,
                                {{"a1", "team-a", 1, 1}, {"a2", "team-a", 1, 4}, {"a3", "team-a", 1, 2},
                                 {"a4", "team-a", 1, 3}},
                                {Q("b1", "team-b", 1, 1), Q("b2", "team-b", 1, 2)}));
  EXPECT_TRUE(Placed(plan).empty());
  EXPECT_EQ(Victims(plan), (Names{"a2<-b1", "a4<-b2"}));
  EXPECT_EQ(plan.preemptions[0].reason, "preempted by b1 (queue team-b below its quota)");
}

TEST(SchedulerQueues, ReclaimNeverTakesAQueueBelowItsQuota) {
  // team-a borrows 1 beyond its quota of 2, in one job of 3: taking it would leave team-a
  // below its quota, so team-b's pair (1 slot free, 1 more needed) preempts nothing.
  Plan plan = PlanSchedule(With(Cpus(4), kTwoByTwo, {{"a-big", "team-a", 3, 1}}, {Q("pair", "team-b", 2, 1)}));
  EXPECT_TRUE(Placed(plan).empty());
  EXPECT_TRUE(plan.preemptions.empty());
  // Jobs of one slot: one victim, the youngest, is enough with the free slot.
  plan = PlanSchedule(With(Cpus(5), {{"team-a", 0, 2, 1}, {"team-b", 0, 3, 1}},
                           {{"a1", "team-a", 1, 1}, {"a2", "team-a", 1, 2}, {"a3", "team-a", 1, 3},
                            {"a4", "team-a", 1, 4}},
                           {Q("pair", "team-b", 2, 1)}));
  EXPECT_EQ(Victims(plan), (Names{"a4<-pair"}));
}

TEST(SchedulerQueues, ANonPreemptibleJobIsNeverChosen) {
  Plan plan = PlanSchedule(With(Cpus(4), kTwoByTwo,
                                {{"a1", "team-a", 1, 1}, {"a2", "team-a", 1, 2}, {"a3", "team-a", 1, 3},
                                 {"keep", "team-a", 1, 4, 0, false}},
                                {Q("b1", "team-b", 1, 1), Q("b2", "team-b", 1, 2)}));
  EXPECT_EQ(Victims(plan), (Names{"a3<-b1", "a2<-b2"}));
  // All of team-a's borrowers non-preemptible: team-b waits.
  plan = PlanSchedule(With(Cpus(4), kTwoByTwo,
                           {{"a1", "team-a", 2, 1, 0, false}, {"a2", "team-a", 2, 2, 0, false}},
                           {Q("b1", "team-b", 1, 1)}));
  EXPECT_TRUE(plan.preemptions.empty());
}

TEST(SchedulerQueues, SlotsOfJobsBeingPreemptedCountAsSoonFree) {
  // The round after the case: a2 and a4 are stopping, so b1 and b2 wait for their slots
  // and nothing more is preempted.
  Plan plan = PlanSchedule(With(Cpus(4), kTwoByTwo,
                                {{"a1", "team-a", 1, 1}, {"a2", "team-a", 1, 4, 0, true, true}, {"a3", "team-a", 1, 2},
                                 {"a4", "team-a", 1, 3, 0, true, true}},
                                {Q("b1", "team-b", 1, 1), Q("b2", "team-b", 1, 2)}));
  EXPECT_TRUE(Placed(plan).empty());
  EXPECT_TRUE(plan.preemptions.empty());
  // A third job of team-b would take team-b above its quota: it reclaims nothing either.
  plan = PlanSchedule(With(Cpus(4), kTwoByTwo,
                           {{"a1", "team-a", 1, 1}, {"a2", "team-a", 1, 4, 0, true, true}, {"a3", "team-a", 1, 2},
                            {"a4", "team-a", 1, 3, 0, true, true}},
                           {Q("b1", "team-b", 1, 1), Q("b2", "team-b", 1, 2), Q("b3", "team-b", 1, 3)}));
  EXPECT_TRUE(plan.preemptions.empty());
}

TEST(SchedulerQueues, IdleSlotsWaitedForByAQueueWithinItsQuotaAreNotBorrowed) {
  // team-b needs 2 (its quota) and 1 is free: team-a may not borrow that slot, and team-a's
  // youngest borrower is preempted for team-b.
  Plan plan = PlanSchedule(With(Cpus(4), kTwoByTwo,
                                {{"a1", "team-a", 1, 1}, {"a2", "team-a", 1, 2}, {"a3", "team-a", 1, 3}},
                                {Q("a4", "team-a", 1, 1), Q("pair", "team-b", 2, 2)}));
  EXPECT_TRUE(Placed(plan).empty());
  EXPECT_EQ(Victims(plan), (Names{"a3<-pair"}));
}

TEST(SchedulerQueues, HigherPriorityPreemptsTheLowestPriorityThenTheYoungestOfItsQueue) {
  Plan plan = PlanSchedule(With(Cpus(3), {},
                                {{"low-old", "", 1, 1, 1}, {"low-young", "", 1, 2, 1}, {"lowest", "", 1, 3, 0}},
                                {Q("urgent", "", 2, 1, 10)}));
  EXPECT_EQ(Victims(plan), (Names{"lowest<-urgent", "low-young<-urgent"}));
  EXPECT_EQ(plan.preemptions[0].reason, "preempted by urgent (priority 10)");
}

TEST(SchedulerQueues, PriorityPreemptionStaysInTheQueueAndSkipsEqualOrHigherPriority) {
  Plan plan = PlanSchedule(With(Cpus(3), {{"x", 0, 3, 1}, {"y", 0, 3, 1}},
                                {{"y-low", "y", 1, 1, 0}, {"x-same", "x", 1, 2, 5}, {"x-high", "x", 1, 3, 9}},
                                {Q("x-urgent", "x", 1, 1, 5)}));
  EXPECT_TRUE(plan.preemptions.empty());
  // Not preemptible: never chosen for priority either.
  plan = PlanSchedule(With(Cpus(1), {}, {{"pinned", "", 1, 1, 0, false}}, {Q("urgent", "", 1, 1, 10)}));
  EXPECT_TRUE(plan.preemptions.empty());
}

TEST(SchedulerQueues, PriorityPreemptionWorksForAQueueAboveItsQuotaToo) {
  // team-a borrows all 4 slots; its urgent job swaps out its own youngest low-priority job, so
  // team-a's use (and team-b's claim on it) does not change.
  Plan plan = PlanSchedule(With(Cpus(4), kTwoByTwo,
                                {{"a1", "team-a", 1, 1}, {"a2", "team-a", 1, 2}, {"a3", "team-a", 1, 3},
                                 {"a4", "team-a", 1, 4}},
                                {Q("urgent", "team-a", 1, 1, 5)}));
  EXPECT_EQ(Victims(plan), (Names{"a4<-urgent"}));
}

TEST(SchedulerQueues, GpuJobsReclaimGpusOnly) {
  std::vector<ClusterSlot> slots = Gpus(2);
  for (const ClusterSlot& c : Cpus(2)) slots.push_back(c);
  Plan plan = PlanSchedule(With(slots, {{"a", 0, 0, 1}, {"b", 2, 0, 1}},
                                {{"a-gpu", "a", 2, 1}, {"a-cpu", "a", 2, 2}}, {Q("b-gpu", "b", 2, 1)}));
  EXPECT_EQ(Victims(plan), (Names{"a-gpu<-b-gpu"}));
}

TEST(SchedulerQueues, AJobOfAQueueTheConfigLacksOnlyBorrows) {
  Plan plan = PlanSchedule(With(Cpus(2), kTwoByTwo, {{"a1", "team-a", 1, 1}, {"a2", "team-a", 1, 2}},
                                {Q("stray", "gone", 1, 1)}));
  EXPECT_TRUE(plan.preemptions.empty());
  plan = PlanSchedule(With(Cpus(2), kTwoByTwo, {}, {Q("stray", "gone", 1, 1)}));
  EXPECT_EQ(Placed(plan), (Names{"stray"}));
}

}  // namespace
}  // namespace fp8d::core
