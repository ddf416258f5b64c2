// Scheduler rounds: build the snapshot of slots (launcher slots minus those held by attempts
// whose workers have not all exited) and of the queue, let the pure planner (scheduler.h)
// decide, fail what can never fit, and hand each placement to the AttemptLauncher.
#include <algorithm>
#include <map>
#include <utility>

#include <spdlog/spdlog.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager_impl.h"
#include "daemon/core/scheduler.h"

namespace fp8d::core {

void JobManagerImpl::Schedule() {
  if (!started_ || shutting_down_) return;

  const std::vector<std::string> fresh = cache_.TakeNewlyQueued();
  if (cache_.queued().empty()) return;
  // A QUEUED job whose previous attempt still has workers waits for them to exit.
  auto schedulable = [this](const std::string& name) -> JobEntry* {
    JobEntry* e = Find(name);
    if (e == nullptr || e->job.state() != fp8d::v1::QUEUED) return nullptr;
    if (e->run != nullptr && !e->run->AllExited()) return nullptr;
    return e;
  };

  if (launcher_->QueuesJobs()) {
    // The launcher has a queue of its own (Slurm): it places and starts the ranks when the
    // cluster has room, so every queued job is handed over now, with no local slots held.
    const std::vector<std::string> names(cache_.queued().begin(), cache_.queued().end());
    for (const std::string& name : names) {
      JobEntry* e = schedulable(name);
      if (e == nullptr) continue;
      const int32_t ranks = std::max(1, e->job.resources().ranks());
      attempt_launcher_->StartAttempt(*e, std::vector<launcher::Slot>(ranks, launcher::Slot{"slurm", -1}));
    }
    return;
  }

  // Slots held by runs that still have workers (or are about to start them). CPU slots of a
  // node are interchangeable ({node, -1}), so holdings are counted, not matched one to one.
  std::map<std::pair<std::string, int>, int> held;
  for (const std::string& name : cache_.with_run()) {
    const JobEntry* e = Find(name);
    if (e == nullptr || e->run == nullptr || e->run->AllExited()) continue;
    for (const RankRun& r : e->run->ranks) ++held[{r.slot.node, r.slot.gpu}];
  }
  ScheduleInput input;
  bool any_free = false;
  for (const launcher::Slot& s : launcher_->Slots()) {
    int& h = held[{s.node, s.gpu}];
    input.slots.push_back(ClusterSlot{SlotRef{s.node, s.gpu}, h == 0});
    any_free = any_free || h == 0;
    if (h > 0) --h;
  }
  if (any_free) {
    for (const std::string& name : cache_.queued()) {
      if (const JobEntry* e = schedulable(name)) {
        input.queue.push_back(
            QueuedJob{name, e->job.priority(), e->create_seq, e->job.resources().ranks()});
      }
    }
  } else {
    // Every slot is held, so nothing can be placed: plan only the jobs queued since the last
    // round that can never fit, so they fail at once. A deep queue costs nothing per create.
    const size_t total_slots = input.slots.size();
    for (const std::string& name : fresh) {
      const JobEntry* e = schedulable(name);
      if (e == nullptr) continue;
      const int32_t ranks = e->job.resources().ranks();
      if (ranks < 0 || static_cast<size_t>(ranks) > total_slots) {
        input.queue.push_back(QueuedJob{name, e->job.priority(), e->create_seq, ranks});
      }
    }
  }
  if (input.queue.empty()) return;

  Plan plan = PlanSchedule(input);
  for (const Unschedulable& u : plan.unschedulable) {
    JobEntry* e = Find(u.name);
    if (e == nullptr) continue;
    e->BeforeChange();
    fp8d::v1::JobError* err = e->job.mutable_error();
    err->set_code(RpcCodeFor(fp8d::v1::INVALID_SPEC));
    err->set_message(u.reason);
    err->set_failure_class(fp8d::v1::INVALID_SPEC);
    writer_->Transition(*e, fp8d::v1::FAILED, "unschedulable: " + u.reason);
  }
  for (const Assignment& a : plan.assignments) {
    JobEntry* e = Find(a.name);
    if (e == nullptr) continue;
    std::vector<launcher::Slot> slots;
    for (const SlotRef& r : a.ranks) slots.push_back(launcher::Slot{r.node, r.gpu});
    attempt_launcher_->StartAttempt(*e, slots);
  }
}

}  // namespace fp8d::core
