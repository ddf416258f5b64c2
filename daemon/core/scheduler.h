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
  std::string blocked_by;                    // the job that waits for slots and stops the round, if any
};

struct ScheduleInput {
  std::vector<ClusterSlot> slots;  // every slot of every node, free or not
  std::vector<QueuedJob> queue;    // QUEUED jobs, any order
};

Plan PlanSchedule(const ScheduleInput& input);

}  // namespace fp8d::core
