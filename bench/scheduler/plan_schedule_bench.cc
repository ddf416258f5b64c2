// SPDX-License-Identifier: Apache-2.0
// plan_schedule_bench: how long one admission decision (PlanSchedule, daemon/core/scheduler.h)
// takes with 1,000 queued jobs of mixed ranks (1/2/4/8) and priorities across 3 queues, on a
// cluster of 16 nodes x 8 slots (GPUs, or CPU slots with --cpu) holding ~125 running jobs.
// Only the pure planner is timed: the manager's cost around it (building the snapshot,
// persisting the plan) is manager_round_bench's.
//
//   plan_schedule_bench [--rounds N] [--cpu] [--seed S]
//
// Scenarios (inputs fixed by the seed; the same input is planned every round):
//   full     every slot held, each queue at its quota: nothing starts, nothing is preempted
//   reclaim  every slot held, team-a borrowing team-c's quota; team-c's jobs arrive: reclaim
//   half     half the slots free: placements, then the preemption walk over the rest
// Prints one line per scenario: p50/p99/max in ms and the plan's counts.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/common/percentile.h"
#include "daemon/core/scheduler.h"

namespace {

using fp8d::core::ClusterSlot;
using fp8d::core::Plan;
using fp8d::core::PlanSchedule;
using fp8d::core::QueuedJob;
using fp8d::core::RunningJob;
using fp8d::core::ScheduleInput;
using fp8d::core::SlotRef;

constexpr int kNodes = 16;
constexpr int kSlotsPerNode = 8;
constexpr int kQueuedJobs = 1000;
const char* const kQueues[] = {"team-a", "team-b", "team-c"};

std::string NodeName(int n) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "node-%02d", n);
  return buf;
}

// Quotas 64/32/32 of 128 slots, weights 2/1/1.
void AddQueues(bool cpu, ScheduleInput* in) {
  const int64_t quota[] = {64, 32, 32};
  const double weight[] = {2, 1, 1};
  for (int q = 0; q < 3; ++q) {
    in->queues.push_back({kQueues[q], cpu ? 0 : quota[q], cpu ? quota[q] : 0, weight[q]});
  }
}

// Running jobs fill the cluster's first `held` slots node by node: per queue, `per_queue[q]`
// slots, as 1-rank jobs except a few 2-rank ones, so ~125 jobs hold 128 slots.
void AddRunning(bool cpu, const int per_queue[3], std::mt19937_64& rng, ScheduleInput* in) {
  int slot = 0;
  int64_t seq = 0;
  for (int q = 0; q < 3; ++q) {
    int left = per_queue[q];
    while (left > 0) {
      const int ranks = (left >= 2 && rng() % 40 == 0) ? 2 : 1;
      RunningJob r;
      r.name = "jobs/r" + std::to_string(seq);
      r.queue = kQueues[q];
      r.priority = 2;  // the queued jobs' highest: no priority preemption, only reclaim
      r.preemptible = rng() % 8 != 0;
      r.start_seq = ++seq;
      for (int i = 0; i < ranks; ++i, ++slot) {
        r.slots.push_back(SlotRef{NodeName(slot / kSlotsPerNode), cpu ? -1 : slot % kSlotsPerNode});
        in->slots[slot].free = false;
      }
      left -= ranks;
      in->running.push_back(std::move(r));
    }
  }
}

// 1,000 jobs, ranks 1/2/4/8, priorities 0..2, in the queues `queues` picks from.
void AddQueued(const std::vector<int>& queues, std::mt19937_64& rng, ScheduleInput* in) {
  const int32_t ranks[] = {1, 2, 4, 8};
  for (int i = 0; i < kQueuedJobs; ++i) {
    QueuedJob j;
    j.name = "jobs/" + std::to_string(1000 + i);
    j.priority = static_cast<int32_t>(rng() % 3);
    j.create_seq = 1000 + i;
    j.ranks = ranks[rng() % 4];
    j.queue = kQueues[queues[rng() % queues.size()]];
    in->queue.push_back(std::move(j));
  }
}

ScheduleInput Cluster(bool cpu) {
  ScheduleInput in;
  for (int n = 0; n < kNodes; ++n) {
    for (int s = 0; s < kSlotsPerNode; ++s) in.slots.push_back(ClusterSlot{SlotRef{NodeName(n), cpu ? -1 : s}, true});
  }
  AddQueues(cpu, &in);
  return in;
}

ScheduleInput Scenario(const std::string& name, bool cpu, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ScheduleInput in = Cluster(cpu);
  if (name == "full") {
    const int held[] = {64, 32, 32};
    AddRunning(cpu, held, rng, &in);
    AddQueued({0, 1, 2}, rng, &in);
  } else if (name == "reclaim") {
    const int held[] = {96, 32, 0};  // team-a borrows team-c's 32
    AddRunning(cpu, held, rng, &in);
    AddQueued({0, 1, 2}, rng, &in);
  } else {
    const int held[] = {32, 16, 16};  // half free
    AddRunning(cpu, held, rng, &in);
    AddQueued({0, 1, 2}, rng, &in);
  }
  return in;
}

using fp8d::bench::Percentile;

}  // namespace

int main(int argc, char** argv) {
  int rounds = 2000;
  bool cpu = false;
  uint64_t seed = 28;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--cpu") == 0) {
      cpu = true;
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: plan_schedule_bench [--rounds N] [--cpu] [--seed S]\n");
      return 2;
    }
  }
  if (rounds < 1) rounds = 1;
  std::printf("cluster %d nodes x %d %s slots, 3 queues (quota 64/32/32, weight 2/1/1), %d queued jobs, %d rounds\n",
              kNodes, kSlotsPerNode, cpu ? "CPU" : "GPU", kQueuedJobs, rounds);
  for (const std::string name : {"full", "reclaim", "half"}) {
    const ScheduleInput in = Scenario(name, cpu, seed);
    int64_t free_slots = 0;
    for (const ClusterSlot& s : in.slots) free_slots += s.free ? 1 : 0;
    std::vector<double> ms;
    ms.reserve(rounds);
    Plan plan;
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      plan = PlanSchedule(in);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    size_t placed_ranks = 0;
    for (const auto& a : plan.assignments) placed_ranks += a.ranks.size();
    std::printf("%-8s queued=%zu running=%zu free=%lld  p50=%.3f ms p99=%.3f ms max=%.3f ms  "
                "assignments=%zu (%zu ranks) preemptions=%zu blocked=%zu unschedulable=%zu\n",
                name.c_str(), in.queue.size(), in.running.size(), static_cast<long long>(free_slots),
                Percentile(ms, 0.50), Percentile(ms, 0.99), *std::max_element(ms.begin(), ms.end()),
                plan.assignments.size(), placed_ranks, plan.preemptions.size(), plan.blocked.size(), plan.unschedulable.size());
  }
  return 0;
}
