// SPDX-License-Identifier: Apache-2.0
// The scheduler: pure logic over a snapshot of the cluster's slots and the queue. The manager
// builds the snapshot, calls PlanSchedule, persists QUEUED → STARTING for each assignment and
// QUEUED → FAILED for each unschedulable job, then starts the workers.
//
// Rules:
// - Gang placement: a job gets all its ranks at once or nothing.
// - Order: higher priority first, then FIFO (lower create sequence first).
// - No backfill: once a job that could fit the cluster cannot be placed now, no job after it
//   is placed in this round (a stream of small jobs must not starve a big one). A job that can
//   NEVER fit (more ranks than the cluster has slots of any one kind) does not block; it is
//   reported in Plan::unschedulable so the manager can fail it with a clear message.
// - A gang uses one kind of slot: GPUs whenever the cluster has enough GPUs for it (even if
//   they are busy now: it waits), CPU slots (gpu = -1) otherwise.
// - Packing: a gang goes on one node when any node has enough free slots (the node with the
//   fewest free slots that still fits, to keep big holes for big jobs); otherwise it spreads
//   over as few nodes as possible (those with the most free slots first).
// - Ranks are numbered node by node, GPU by GPU, so ranks on one node are contiguous.
//
// Queues (fp8d's `queues:` config; none given: one queue `default` whose quota is the cluster):
// - The order and no-backfill rules above hold within each queue: a blocked head stops its own
//   queue only.
// - Across queues, free slots go one job at a time to the queue of the lowest dominant share
//   (max(used GPUs / cluster GPUs, used CPU slots / cluster CPU slots) / weight), ties in config
//   order. A queue may borrow idle slots beyond its quota, except slots of a kind that a queue
//   within its quota is waiting for in this round.
// - Preemption walks each blocked queue's jobs in order (queues whose next job fits within its
//   quota first, then by share) and stops a queue at the first job it cannot make room for, so
//   several jobs of a queue may reclaim in one round:
//   - reclaim: a job that fits within its queue's quota but not in the free slots preempts
//     preemptible jobs of queues above their quota, youngest first, never taking a queue below
//     its quota, and only when that frees enough for the job (else nothing);
//   - priority: otherwise a job preempts preemptible jobs of its own queue with a lower
//     priority, lowest priority then youngest first, again only when that frees enough.
// - Slots free now and slots of jobs already being preempted count as soon free: they go to
//   waiting jobs before anything more is preempted.
// A job naming a queue the input does not have belongs to a queue of quota 0 and weight 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp8d::core {

struct SlotRef {
  std::string node;
  int32_t gpu = -1;  // GPU index on the node, or -1 for a CPU slot

  bool operator==(const SlotRef&) const = default;
};

struct ClusterSlot {
  SlotRef slot;
  bool free = true;  // false: held by a running (or starting / cancelling) job
};

struct QueuedJob {
  std::string name;       // jobs/<id>
  int32_t priority = 0;   // higher first
  int64_t create_seq = 0; // FIFO among equal priorities: lower first
  int32_t ranks = 1;
  std::string queue;      // empty: `default`
};

// A queue's guarantee and share of what is idle beyond it.
struct QueueQuota {
  std::string name;
  int64_t gpus = 0;       // quota of GPU slots
  int64_t cpu_slots = 0;  // quota of CPU slots
  double weight = 1;      // > 0: share of borrowed capacity
};

// A job holding slots (STARTING, RUNNING, CANCELLING): counts toward its queue's usage and may
// be preempted.
struct RunningJob {
  std::string name;
  std::string queue;        // empty: `default`
  int32_t priority = 0;
  bool preemptible = true;
  int64_t start_seq = 0;    // higher = started later (younger)
  std::vector<SlotRef> slots;
  bool preempting = false;  // already asked to stop: its slots are soon free
};

struct Preemption {
  std::string victim;   // jobs/<id> to preempt
  std::string for_job;  // the queued job it makes room for
  std::string reason;   // e.g. "preempted by jobs/7 (queue team-b below its quota)"
};

// The head of a queue that could not be placed this round.
struct BlockedHead {
  std::string name;
  std::string queue;
  std::string reason;  // e.g. "queue team-a: waiting for 4 GPU slots"
};

struct Assignment {
  std::string name;
  std::vector<SlotRef> ranks;  // ranks[r] is rank r's slot
};

struct Unschedulable {
  std::string name;
  std::string reason;  // e.g. "resources.ranks is 9 but the cluster has 8 GPU slots and 0 CPU slots"
};

struct Plan {
  std::vector<Assignment> assignments;       // in scheduling order
  std::vector<Unschedulable> unschedulable;  // can never fit; fail them
  std::string blocked_by;                    // the first blocked head (see `blocked`), if any
  std::vector<BlockedHead> blocked;          // every queue's blocked head, in the order met
  std::vector<Preemption> preemptions;       // preempt these now; the for_job starts later
};

struct ScheduleInput {
  std::vector<ClusterSlot> slots;  // every slot of every node, free or not
  std::vector<QueuedJob> queue;    // QUEUED jobs, any order
  std::vector<QueueQuota> queues;  // empty: one queue `default` with the cluster as its quota
  std::vector<RunningJob> running; // the holders of the busy slots
};

Plan PlanSchedule(const ScheduleInput& input);

// What a round needs to know of one queue's QUEUED jobs to tell whether any of them could
// preempt: the highest priority and the smallest gang among them.
struct QueuedSummary {
  std::string queue;         // empty: `default`
  int32_t max_priority = 0;
  int32_t min_ranks = 1;
};

// False only when PlanSchedule(input) plans no preemption for any set of queued jobs that these
// summaries describe (input.queue is not read): no queue has a job of a higher priority than a
// preemptible holder of its own queue, and none that fits within its quota while another
// queue's job holds preemptible slots of that kind. A deep queue behind a full cluster is then
// planned without its old jobs, which can be placed only once slots free up.
bool MayPreempt(const ScheduleInput& input, const std::vector<QueuedSummary>& queued);

}  // namespace fp8d::core
