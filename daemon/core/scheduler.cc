#include "daemon/core/scheduler.h"

#include <algorithm>
#include <map>
#include <optional>

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

}  // namespace

Plan PlanSchedule(const ScheduleInput& input) {
  FreePool free_gpus, free_cpus;
  int64_t cluster_gpus = 0, cluster_cpus = 0;
  for (const ClusterSlot& s : input.slots) {
    const bool is_gpu = s.slot.gpu >= 0;
    (is_gpu ? cluster_gpus : cluster_cpus)++;
    if (s.free) (is_gpu ? free_gpus : free_cpus).Add(s.slot);
  }
  free_gpus.SortSlots();
  free_cpus.SortSlots();

  std::vector<const QueuedJob*> order;
  order.reserve(input.queue.size());
  for (const QueuedJob& j : input.queue) order.push_back(&j);
  std::stable_sort(order.begin(), order.end(), [](const QueuedJob* a, const QueuedJob* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->create_seq < b->create_seq;
  });

  Plan plan;
  for (const QueuedJob* job : order) {
    if (job->ranks < 1) {
      plan.unschedulable.push_back(
          {job->name, "resources.ranks is " + std::to_string(job->ranks) + "; it must be at least 1"});
      continue;
    }
    const bool fits_gpus = job->ranks <= cluster_gpus;
    const bool fits_cpus = job->ranks <= cluster_cpus;
    if (!fits_gpus && !fits_cpus) {
      plan.unschedulable.push_back(
          {job->name, "resources.ranks is " + std::to_string(job->ranks) + " but the cluster has " +
                          std::to_string(cluster_gpus) + " GPU slots and " +
                          std::to_string(cluster_cpus) + " CPU slots"});
      continue;
    }
    if (!plan.blocked_by.empty()) continue;  // no backfill past a blocked job
    // The kind is fixed per job (GPUs whenever the cluster has enough), so a GPU job never
    // lands on CPU slots just because the GPUs are busy right now.
    std::optional<std::vector<SlotRef>> slots =
        fits_gpus ? free_gpus.Take(job->ranks) : free_cpus.Take(job->ranks);
    if (!slots) {
      plan.blocked_by = job->name;
      continue;  // keep scanning only to report jobs that can never fit
    }
    plan.assignments.push_back({job->name, std::move(*slots)});
  }
  return plan;
}

}  // namespace fp8d::core
