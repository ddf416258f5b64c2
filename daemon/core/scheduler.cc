// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/scheduler.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/core/queues.h"

namespace fp8d::core {
namespace {

// Free slots of one kind (GPU or CPU), per node, each node's slots in ascending GPU order.
class FreePool {
 public:
  void Add(const SlotRef& slot) { by_node_[slot.node].push_back(slot.gpu); }
  void SortSlots() {
    for (auto& [node, gpus] : by_node_) std::sort(gpus.begin(), gpus.end());
  }
  int64_t Total() const {
    int64_t n = 0;
    for (const auto& [node, gpus] : by_node_) n += static_cast<int64_t>(gpus.size());
    return n;
  }

  // Takes `ranks` slots following the packing rule of scheduler.h, or nothing.
  std::optional<std::vector<SlotRef>> Take(int32_t ranks) {
    if (Total() < ranks) return std::nullopt;
    std::vector<std::string> order = NodesForGang(ranks);
    std::vector<SlotRef> out;
    out.reserve(ranks);
    for (const std::string& node : order) {
      auto& gpus = by_node_[node];
      while (!gpus.empty() && static_cast<int32_t>(out.size()) < ranks) {
        out.push_back(SlotRef{node, gpus.front()});
        gpus.erase(gpus.begin());
      }
      if (gpus.empty()) by_node_.erase(node);
      if (static_cast<int32_t>(out.size()) == ranks) break;
    }
    return out;
  }

 private:
  std::vector<std::string> NodesForGang(int32_t ranks) const {
    // One node if possible: the tightest fit (fewest free slots that still fit), then by name.
    const std::string* best = nullptr;
    size_t best_free = 0;
    for (const auto& [node, gpus] : by_node_) {
      if (static_cast<int32_t>(gpus.size()) >= ranks && (best == nullptr || gpus.size() < best_free)) {
        best = &node;
        best_free = gpus.size();
      }
    }
    if (best != nullptr) return {*best};
    // Spread: most free slots first (fewest nodes), ties by name (map order, stable sort).
    std::vector<std::string> nodes;
    for (const auto& [node, gpus] : by_node_) nodes.push_back(node);
    std::stable_sort(nodes.begin(), nodes.end(), [&](const std::string& a, const std::string& b) {
      return by_node_.at(a).size() > by_node_.at(b).size();
    });
    return nodes;
  }

  std::map<std::string, std::vector<int32_t>> by_node_;
};

constexpr int kGpu = 0;
constexpr int kCpu = 1;
const char* const kKindWord[] = {"GPU", "CPU"};
constexpr const char* kDefaultQueue = kDefaultQueueName;

int KindOf(const std::vector<SlotRef>& slots) { return !slots.empty() && slots[0].gpu >= 0 ? kGpu : kCpu; }

// One queue's view during planning.
struct QueueState {
  std::string name;
  int64_t quota[2] = {0, 0};
  double weight = 1;
  int64_t used[2] = {0, 0};              // held slots, less those already being preempted
  std::vector<const QueuedJob*> jobs;    // scheduling order
  size_t next = 0;                       // first job not placed yet
  bool blocked = false;
};

QueueState NewQueue(const std::string& name, int64_t gpus, int64_t cpu_slots, double weight) {
  QueueState q;
  q.name = name;
  q.quota[kGpu] = gpus;
  q.quota[kCpu] = cpu_slots;
  q.weight = weight;
  return q;
}

// "queue team-a: waiting for 4 GPU slots": the pending_reason of a queue's blocked head.
std::string WaitingReason(const QueueState& queue, const QueuedJob& job, int kind) {
  return "queue " + queue.name + ": waiting for " + std::to_string(job.ranks) + " " + kKindWord[kind] +
         (job.ranks == 1 ? " slot" : " slots");
}

struct Holder {
  const RunningJob* job;
  QueueState* queue;
  int kind;
  int64_t size;
  bool chosen = false;
};

class QueuePlanner {
 public:
  QueuePlanner(const ScheduleInput& input, const int64_t cluster[2]) : cluster_{cluster[0], cluster[1]} {
    if (input.queues.empty()) {
      queues_.push_back(NewQueue(kDefaultQueue, cluster[kGpu], cluster[kCpu], 1));
    }
    for (const QueueQuota& q : input.queues) queues_.push_back(NewQueue(q.name, q.gpus, q.cpu_slots, q.weight));
    for (const RunningJob& r : input.running) {
      if (r.slots.empty()) continue;
      QueueState& q = Queue(r.queue);
      const int kind = KindOf(r.slots);
      holders_.push_back(Holder{&r, &q, kind, static_cast<int64_t>(r.slots.size())});
      if (r.preempting) {
        soon_free_[kind] += holders_.back().size;
      } else {
        q.used[kind] += holders_.back().size;
      }
    }
  }

  // The queue of that name; one of quota 0 for a name the config does not have.
  QueueState& Queue(const std::string& name) {
    const std::string key = name.empty() ? std::string(kDefaultQueue) : name;
    for (QueueState& q : queues_) {
      if (q.name == key) return q;
    }
    queues_.push_back(NewQueue(key, 0, 0, 1));
    return queues_.back();
  }

  double Share(const QueueState& q) const {
    double share = 0;
    for (int k : {kGpu, kCpu}) {
      if (cluster_[k] > 0) share = std::max(share, static_cast<double>(q.used[k]) / static_cast<double>(cluster_[k]));
    }
    return share / q.weight;
  }

  // The unblocked queue with jobs left and the lowest share (ties: config order).
  QueueState* NextQueue() {
    QueueState* best = nullptr;
    double best_share = 0;
    for (QueueState& q : queues_) {
      if (q.blocked || q.next >= q.jobs.size()) continue;
      const double share = Share(q);
      if (best == nullptr || share < best_share) {
        best = &q;
        best_share = share;
      }
    }
    return best;
  }

  bool FitsQuota(const QueueState& q, int kind, int64_t ranks) const { return q.used[kind] + ranks <= q.quota[kind]; }

  // After placement every queue with jobs left is blocked. Walks those jobs in their queues'
  // order, the queue of a job within its quota first, then the lowest share, and finds each its
  // slots: ones free soon (free now, or held by jobs being preempted), else by preempting. A
  // queue stops at its first job that cannot be given slots (no backfill).
  void Preempt(const int64_t free_now[2], Plan* plan) {
    int64_t spare[2] = {free_now[kGpu] + soon_free_[kGpu], free_now[kCpu] + soon_free_[kCpu]};
    for (QueueState& q : queues_) q.blocked = q.next < q.jobs.size();
    while (true) {
      QueueState* queue = nullptr;
      bool queue_within = false;
      double queue_share = 0;
      for (QueueState& q : queues_) {
        if (!q.blocked) continue;
        const QueuedJob& next = *q.jobs[q.next];
        const bool within = FitsQuota(q, KindFor(next), next.ranks);
        const double share = Share(q);
        if (queue == nullptr || (within && !queue_within) || (within == queue_within && share < queue_share)) {
          queue = &q;
          queue_within = within;
          queue_share = share;
        }
      }
      if (queue == nullptr) return;
      const QueuedJob* job = queue->jobs[queue->next];
      const int kind = KindFor(*job);
      const int64_t need = job->ranks - spare[kind];
      if (need > 0) {
        std::string why = "queue " + queue->name + " below its quota";
        std::vector<Holder*> victims;
        if (queue_within) victims = Reclaim(*queue, kind, need);
        if (victims.empty()) {
          victims = LowerPriority(*queue, *job, kind, need);
          why = "priority " + std::to_string(job->priority);
        }
        if (victims.empty()) {
          queue->blocked = false;  // done: nothing more for this queue in this round
          continue;
        }
        for (Holder* v : victims) {
          v->chosen = true;
          v->queue->used[kind] -= v->size;
          spare[kind] += v->size;
          plan->preemptions.push_back({v->job->name, job->name, "preempted by " + job->name + " (" + why + ")"});
        }
      }
      spare[kind] -= job->ranks;
      queue->used[kind] += job->ranks;
      if (++queue->next >= queue->jobs.size()) queue->blocked = false;
    }
  }

  // The kind is fixed per job (GPUs whenever the cluster has enough), so a GPU job never
  // lands on CPU slots just because the GPUs are busy right now.
  int KindFor(const QueuedJob& job) const { return job.ranks <= cluster_[kGpu] ? kGpu : kCpu; }

 private:
  // Youngest first, from queues above their quota, never taking one below it; all or nothing.
  std::vector<Holder*> Reclaim(const QueueState& for_queue, int kind, int64_t need) {
    std::vector<Holder*> candidates;
    for (Holder& h : holders_) {
      if (h.chosen || h.job->preempting || !h.job->preemptible || h.kind != kind || h.queue == &for_queue) continue;
      candidates.push_back(&h);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Holder* a, const Holder* b) { return a->job->start_seq > b->job->start_seq; });
    std::map<const QueueState*, int64_t> used;
    std::vector<Holder*> out;
    int64_t got = 0;
    for (Holder* h : candidates) {
      if (got >= need) break;
      auto it = used.try_emplace(h->queue, h->queue->used[kind]).first;
      if (it->second - h->size < h->queue->quota[kind]) continue;
      it->second -= h->size;
      got += h->size;
      out.push_back(h);
    }
    if (got < need) out.clear();
    return out;
  }

  // Lowest priority, then youngest, of the head's own queue; all or nothing.
  std::vector<Holder*> LowerPriority(const QueueState& queue, const QueuedJob& head, int kind, int64_t need) {
    std::vector<Holder*> candidates;
    for (Holder& h : holders_) {
      if (h.chosen || h.job->preempting || !h.job->preemptible || h.kind != kind || h.queue != &queue ||
          h.job->priority >= head.priority) {
        continue;
      }
      candidates.push_back(&h);
    }
    std::stable_sort(candidates.begin(), candidates.end(), [](const Holder* a, const Holder* b) {
      if (a->job->priority != b->job->priority) return a->job->priority < b->job->priority;
      return a->job->start_seq > b->job->start_seq;
    });
    std::vector<Holder*> out;
    int64_t got = 0;
    for (Holder* h : candidates) {
      if (got >= need) break;
      got += h->size;
      out.push_back(h);
    }
    if (got < need) out.clear();
    return out;
  }

  int64_t cluster_[2];
  std::deque<QueueState> queues_;  // a deque: Queue() appends while references are held
  std::vector<Holder> holders_;
  int64_t soon_free_[2] = {0, 0};
};

}  // namespace

Plan PlanSchedule(const ScheduleInput& input) {
  FreePool pools[2];
  int64_t cluster[2] = {0, 0};
  for (const ClusterSlot& s : input.slots) {
    const int kind = s.slot.gpu >= 0 ? kGpu : kCpu;
    cluster[kind]++;
    if (s.free) pools[kind].Add(s.slot);
  }
  pools[kGpu].SortSlots();
  pools[kCpu].SortSlots();

  std::vector<const QueuedJob*> order;
  order.reserve(input.queue.size());
  for (const QueuedJob& j : input.queue) order.push_back(&j);
  std::stable_sort(order.begin(), order.end(), [](const QueuedJob* a, const QueuedJob* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->create_seq < b->create_seq;
  });

  QueuePlanner planner(input, cluster);

  Plan plan;
  for (const QueuedJob* job : order) {
    if (job->ranks < 1) {
      plan.unschedulable.push_back(
          {job->name, "resources.ranks is " + std::to_string(job->ranks) + "; it must be at least 1"});
      continue;
    }
    if (job->ranks > cluster[kGpu] && job->ranks > cluster[kCpu]) {
      plan.unschedulable.push_back(
          {job->name, "resources.ranks is " + std::to_string(job->ranks) + " but the cluster has " +
                          std::to_string(cluster[kGpu]) + " GPU slots and " +
                          std::to_string(cluster[kCpu]) + " CPU slots"});
      continue;
    }
    planner.Queue(job->queue).jobs.push_back(job);
  }

  // Free slots go one job at a time to the queue of the lowest share.
  bool reclaim_waits[2] = {false, false};  // a queue within its quota waits for this kind
  while (QueueState* queue = planner.NextQueue()) {
    const QueuedJob* job = queue->jobs[queue->next];
    const int kind = planner.KindFor(*job);
    const bool within_quota = planner.FitsQuota(*queue, kind, job->ranks);
    std::optional<std::vector<SlotRef>> slots;
    std::string reason;
    if (!within_quota && reclaim_waits[kind]) {
      reason = WaitingReason(*queue, *job, kind) + " (idle ones are held for a queue within its quota)";
    } else {
      slots = pools[kind].Take(job->ranks);
      if (!slots) {
        reason = WaitingReason(*queue, *job, kind);
      }
    }
    if (!slots) {
      queue->blocked = true;  // no backfill past the blocked head, in its own queue
      if (within_quota) reclaim_waits[kind] = true;
      if (plan.blocked_by.empty()) plan.blocked_by = job->name;
      plan.blocked.push_back({job->name, queue->name, reason});
      continue;
    }
    queue->used[kind] += job->ranks;
    queue->next++;
    plan.assignments.push_back({job->name, std::move(*slots)});
  }

  const int64_t free_now[2] = {pools[kGpu].Total(), pools[kCpu].Total()};
  planner.Preempt(free_now, &plan);
  return plan;
}

// Until PlanSchedule chooses its first victim, holders are as given and a queue's usage only
// grows (placements), so whatever that first choice needs holds of the input already:
// LowerPriority a preemptible holder of the job's queue below the job's priority; Reclaim
// the job within its queue's quota and a preemptible holder of another queue, of its kind.
bool MayPreempt(const ScheduleInput& input, const std::vector<QueuedSummary>& queued) {
  int64_t cluster[2] = {0, 0};
  for (const ClusterSlot& s : input.slots) cluster[s.slot.gpu >= 0 ? kGpu : kCpu]++;
  QueuePlanner planner(input, cluster);
  for (const QueuedSummary& summary : queued) {
    const QueueState& q = planner.Queue(summary.queue);
    for (const RunningJob& h : input.running) {
      if (!h.preemptible || h.preempting || h.slots.empty()) continue;
      const QueueState& of = planner.Queue(h.queue);
      if (&of == &q && h.priority < summary.max_priority) return true;
      if (&of != &q && planner.FitsQuota(q, KindOf(h.slots), summary.min_ranks)) return true;
    }
  }
  return false;
}

}  // namespace fp8d::core
