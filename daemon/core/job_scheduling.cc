// SPDX-License-Identifier: Apache-2.0
// Scheduler rounds: build the snapshot of slots (launcher slots minus those held by attempts
// whose workers have not all exited), of the jobs holding them and of the queue, with the
// configured queues (queues.h), let the pure planner (scheduler.h) decide, fail what can never
// fit, hand each placement to the AttemptLauncher, ask PreemptAttempt to stop each victim, and
// show each queue's blocked head why it waits (pending_reason). ListQueues reads the same view.
#include <algorithm>
#include <map>
#include <utility>

#include <spdlog/spdlog.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager_impl.h"
#include "daemon/core/scheduler.h"

namespace fp8d::core {
namespace {

// How the pending_reason of a queue's blocked head starts (scheduler.cc's BlockedHead::reason).
constexpr const char* kQueueReasonPrefix = "queue ";

std::vector<QueueQuota> QueueQuotas(const std::vector<QueueConfig>& queues) {
  std::vector<QueueQuota> out;
  out.reserve(queues.size());
  for (const QueueConfig& q : queues) out.push_back({q.name, q.quota_gpus, q.quota_cpu_slots, q.weight});
  return out;
}

// A job holding slots as the planner sees it. Only a STARTING or RUNNING attempt whose outcome
// is open may be preempted; one that is ending (cancelled, failed, its workers still exiting)
// just holds its slots.
RunningJob HolderOf(const JobEntry& e) {
  RunningJob r;
  r.name = e.job.name();
  r.queue = e.job.queue();
  r.priority = e.job.priority();
  const bool live = (e.job.state() == fp8d::v1::STARTING || e.job.state() == fp8d::v1::RUNNING) && !e.run->finished;
  r.preempting = e.run->preempting;
  r.preemptible = live && !r.preempting && (!e.job.has_preemptible() || e.job.preemptible());
  // Younger = started later; within one millisecond (one round), created later.
  r.start_seq = e.run->start_ms * 1000000 + e.create_seq % 1000000;
  // Every rank's slot is held until all have exited (as Schedule counts them).
  for (const RankRun& rank : e.run->ranks) r.slots.push_back(SlotRef{rank.slot.node, rank.slot.gpu});
  return r;
}

}  // namespace

void JobManagerImpl::Schedule() {
  if (!started_ || shutting_down_) return;

  const std::vector<std::string> fresh = cache_.TakeNewlyQueued();
  if (cache_.queued().empty()) return;
  // A QUEUED job whose previous attempt still has workers waits for them to exit.
  auto schedulable = [this](const std::string& name) -> JobEntry* {
    JobEntry* e = Find(name);
    if (e == nullptr || e->job.state() != fp8d::v1::QUEUED) return nullptr;
    if (e->run != nullptr && !e->run->AllExited()) return nullptr;
    // A job waiting on its dependencies (job_dependencies.cc) is not offered.
    if (e->job.depends_on_size() > 0 && !DependenciesMet(*e)) return nullptr;
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
  ScheduleInput input;
  input.queues = QueueQuotas(options_.queues);
  std::map<std::pair<std::string, int>, int> held;
  for (const std::string& name : cache_.with_run()) {
    const JobEntry* e = Find(name);
    if (e == nullptr || e->run == nullptr || e->run->AllExited()) continue;
    for (const RankRun& r : e->run->ranks) ++held[{r.slot.node, r.slot.gpu}];
    input.running.push_back(HolderOf(*e));
  }
  bool any_free = false;
  for (const launcher::Slot& s : launcher_->Slots()) {
    int& h = held[{s.node, s.gpu}];
    input.slots.push_back(ClusterSlot{SlotRef{s.node, s.gpu}, h == 0});
    any_free = any_free || h == 0;
    if (h > 0) --h;
  }
  // With every slot held nothing can be placed, but a job queued since the last round may
  // preempt (for its queue's quota or its priority), and with it, older jobs ahead of it.
  if (any_free || (!fresh.empty() && MayPreempt(input, cache_.QueuedSummaries()))) {
    for (const std::string& name : cache_.queued()) {
      if (const JobEntry* e = schedulable(name)) {
        input.queue.push_back(QueuedJob{name, e->job.priority(), e->create_seq, e->job.resources().ranks(), e->job.queue()});
      }
    }
  } else {
    // Plan only the jobs queued since the last round: one that can never fit fails at once,
    // the others are told why they wait (pending_reason). A deep queue costs nothing per create.
    for (const std::string& name : fresh) {
      if (const JobEntry* e = schedulable(name)) {
        input.queue.push_back(QueuedJob{name, e->job.priority(), e->create_seq, e->job.resources().ranks(), e->job.queue()});
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
    if (!e->job.pending_reason().empty()) {  // it waits no more (written with STARTING)
      e->BeforeChange();
      e->job.clear_pending_reason();
    }
    std::vector<launcher::Slot> slots;
    for (const SlotRef& r : a.ranks) slots.push_back(launcher::Slot{r.node, r.gpu});
    attempt_launcher_->StartAttempt(*e, slots);
  }
  for (const Preemption& p : plan.preemptions) {
    JobEntry* victim = Find(p.victim);
    if (victim == nullptr) continue;
    spdlog::info("{}: {}", p.victim, p.reason);
    const bool was_preempting = victim->run != nullptr && victim->run->preempting;
    PreemptAttempt(*victim, p.reason);
    if (!was_preempting && victim->run != nullptr && victim->run->preempting) {
      ++preemptions_by_queue_[victim->job.queue().empty() ? std::string(kDefaultQueueName) : victim->job.queue()];
    }
  }
  for (const BlockedHead& b : plan.blocked) {
    JobEntry* e = Find(b.name);
    // Only a reason the scheduler wrote itself is replaced (not "preempted by", "waiting for
    // jobs/x"); published when it changes, so a waiting queue writes nothing per round.
    if (e == nullptr || e->job.state() != fp8d::v1::QUEUED || e->job.pending_reason() == b.reason) continue;
    if (!e->job.pending_reason().empty() && e->job.pending_reason().rfind(kQueueReasonPrefix, 0) != 0) continue;
    e->BeforeChange();
    e->job.set_pending_reason(b.reason);
    cache_.PublishChange(*e, NowMs());
  }
}

void JobManagerImpl::ListQueues(fp8d::v1::ListQueuesRequest /*request*/,
                                std::function<void(StatusOr<fp8d::v1::ListQueuesResponse>)> done) {
  done(QueueView());
}

fp8d::v1::ListQueuesResponse JobManagerImpl::QueueView() const {
  fp8d::v1::ListQueuesResponse out;
  const bool local_slots = !launcher_->QueuesJobs();
  if (local_slots) {
    for (const launcher::Slot& s : launcher_->Slots()) {
      if (s.gpu >= 0) {
        out.set_cluster_gpus(out.cluster_gpus() + 1);
      } else {
        out.set_cluster_cpu_slots(out.cluster_cpu_slots() + 1);
      }
    }
  }
  std::vector<QueueConfig> queues = options_.queues;
  if (queues.empty()) queues.push_back({kDefaultQueueName, out.cluster_gpus(), out.cluster_cpu_slots(), 1, {}});
  std::map<std::string, fp8d::v1::QueueStatus*> by_name;
  auto status_of = [&](const std::string& job_queue) {
    const std::string name = job_queue.empty() ? std::string(kDefaultQueueName) : job_queue;
    auto it = by_name.find(name);
    if (it != by_name.end()) return it->second;
    fp8d::v1::QueueStatus* q = out.add_queues();  // a queue the config no longer has
    q->set_name(name);
    return by_name[name] = q;
  };
  for (const QueueConfig& c : queues) {
    fp8d::v1::QueueStatus* q = out.add_queues();
    q->set_name(c.name);
    q->set_quota_gpus(c.quota_gpus);
    q->set_quota_cpu_slots(c.quota_cpu_slots);
    q->set_weight(c.weight);
    for (const std::string& p : c.principals) q->add_principals(p);
    by_name[c.name] = q;
  }
  for (const std::string& name : cache_.queued()) {
    if (const JobEntry* e = cache_.Find(name)) {
      fp8d::v1::QueueStatus* q = status_of(e->job.queue());
      q->set_pending_jobs(q->pending_jobs() + 1);
    }
  }
  for (const std::string& name : cache_.with_run()) {
    const JobEntry* e = cache_.Find(name);
    if (e == nullptr || e->run == nullptr || e->run->AllExited()) continue;
    fp8d::v1::QueueStatus* q = status_of(e->job.queue());
    if (!IsTerminal(e->job.state()) && e->job.state() != fp8d::v1::QUEUED) q->set_running_jobs(q->running_jobs() + 1);
    if (!local_slots) continue;
    for (const RankRun& r : e->run->ranks) {
      if (r.slot.gpu >= 0) {
        q->set_used_gpus(q->used_gpus() + 1);
      } else {
        q->set_used_cpu_slots(q->used_cpu_slots() + 1);
      }
    }
  }
  for (const auto& [queue, count] : preemptions_by_queue_) status_of(queue)->set_preemptions(count);
  for (fp8d::v1::QueueStatus& q : *out.mutable_queues()) {
    q.set_borrowed_gpus(std::max<int64_t>(0, q.used_gpus() - q.quota_gpus()));
    q.set_borrowed_cpu_slots(std::max<int64_t>(0, q.used_cpu_slots() - q.quota_cpu_slots()));
  }
  return out;
}

}  // namespace fp8d::core
