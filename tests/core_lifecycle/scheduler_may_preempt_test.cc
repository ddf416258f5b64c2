// SPDX-License-Identifier: Apache-2.0
// MayPreempt (scheduler.h): the round's shortcut for a deep queue behind a full cluster. Cases
// by hand, then its promise checked against PlanSchedule itself on random clusters: whenever
// MayPreempt says no, the plan has no preemption.
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/core/scheduler.h"

namespace fp8d::core {
namespace {

RunningJob Holder(const std::string& name, const std::string& queue, int32_t priority, int gpus, bool preemptible = true,
                  bool preempting = false) {
  RunningJob r{name, queue, priority, preemptible, 1, {}, preempting};
  for (int i = 0; i < gpus; ++i) r.slots.push_back(SlotRef{name, i});
  return r;
}

ScheduleInput Cluster(std::vector<QueueQuota> queues, std::vector<RunningJob> running) {
  ScheduleInput in;
  in.queues = std::move(queues);
  for (const RunningJob& r : running) {
    for (const SlotRef& s : r.slots) in.slots.push_back(ClusterSlot{s, false});
  }
  in.running = std::move(running);
  return in;
}

std::vector<QueuedSummary> Summaries(const std::vector<QueuedJob>& queued) {
  std::map<std::string, QueuedSummary> by_queue;
  for (const QueuedJob& j : queued) {
    auto [it, fresh] = by_queue.try_emplace(j.queue, QueuedSummary{j.queue, j.priority, j.ranks});
    if (fresh) continue;
    it->second.max_priority = std::max(it->second.max_priority, j.priority);
    it->second.min_ranks = std::min(it->second.min_ranks, j.ranks);
  }
  std::vector<QueuedSummary> out;
  for (const auto& [queue, s] : by_queue) out.push_back(s);
  return out;
}

TEST(MayPreemptTest, OneQueueOfEqualPrioritiesBehindAFullClusterCannot) {
  const ScheduleInput in = Cluster({}, {Holder("jobs/1", "", 0, 4)});
  EXPECT_FALSE(MayPreempt(in, {{"", 0, 1}}));
}

TEST(MayPreemptTest, AHigherPriorityThanAHolderOfItsQueueMay) {
  const ScheduleInput in = Cluster({}, {Holder("jobs/1", "", 0, 4)});
  EXPECT_TRUE(MayPreempt(in, {{"", 1, 4}}));
}

TEST(MayPreemptTest, HoldersThatCannotBePreemptedDoNotCount) {
  EXPECT_FALSE(MayPreempt(Cluster({}, {Holder("jobs/1", "", 0, 4, /*preemptible=*/false)}), {{"", 5, 1}}));
  EXPECT_FALSE(MayPreempt(Cluster({}, {Holder("jobs/1", "", 0, 4, true, /*preempting=*/true)}), {{"", 5, 1}}));
}

TEST(MayPreemptTest, AQueueWithinItsQuotaMayReclaimFromAnother) {
  const std::vector<QueueQuota> queues = {{"a", 2, 0, 1}, {"b", 2, 0, 1}};
  const ScheduleInput in = Cluster(queues, {Holder("jobs/1", "a", 0, 4)});
  EXPECT_TRUE(MayPreempt(in, {{"b", 0, 2}}));
  EXPECT_FALSE(MayPreempt(in, {{"b", 0, 3}}));  // more than b's quota: no reclaim
  EXPECT_FALSE(MayPreempt(in, {{"a", 0, 1}}));  // a is above its quota, and its own holder is of equal priority
}

TEST(MayPreemptTest, NoPreemptionInAPlanWhereMayPreemptSaysNo) {
  std::mt19937 rng(20261206);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<std::string> names = {"a", "b", "c"};
  int checked = 0, said_no = 0, preempted_when_yes = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    ScheduleInput in;
    const int nqueues = pick(0, 3);
    for (int q = 0; q < nqueues; ++q) in.queues.push_back({names[q], pick(0, 6), pick(0, 4), 1.0 + pick(0, 2)});
    const int gpu_nodes = pick(0, 2), cpu_slots = pick(0, 4);
    for (int n = 0; n < gpu_nodes; ++n) {
      for (int g = 0; g < 4; ++g) in.slots.push_back(ClusterSlot{SlotRef{"g" + std::to_string(n), g}, true});
    }
    for (int c = 0; c < cpu_slots; ++c) in.slots.push_back(ClusterSlot{SlotRef{"c", -1}, true});
    // Holders take free slots of one kind; a few slots may stay free.
    for (int h = 0; h < 6; ++h) {
      const bool gpu = pick(0, 1) == 1;
      RunningJob r{"jobs/h" + std::to_string(h), names[pick(0, 2)], pick(0, 2), pick(0, 3) > 0, h, {}, pick(0, 5) == 0};
      const int want = pick(1, 4);
      for (ClusterSlot& s : in.slots) {
        if (static_cast<int>(r.slots.size()) == want) break;
        if (s.free && (s.slot.gpu >= 0) == gpu) {
          s.free = false;
          r.slots.push_back(s.slot);
        }
      }
      if (!r.slots.empty()) in.running.push_back(std::move(r));
    }
    const int queued = pick(1, 6);
    for (int j = 0; j < queued; ++j) {
      in.queue.push_back(QueuedJob{"jobs/q" + std::to_string(j), pick(0, 3), j, pick(1, 5), names[pick(0, 2)]});
    }
    const Plan plan = PlanSchedule(in);
    ++checked;
    if (!MayPreempt(in, Summaries(in.queue))) {
      ++said_no;
      ASSERT_TRUE(plan.preemptions.empty()) << "trial " << trial << ": " << plan.preemptions[0].reason;
    } else if (!plan.preemptions.empty()) {
      ++preempted_when_yes;
    }
  }
  // Both answers were exercised, and the plans did preempt where MayPreempt allowed it.
  EXPECT_GT(said_no, checked / 10);
  EXPECT_GT(preempted_when_yes, checked / 20);
}

}  // namespace
}  // namespace fp8d::core
