// Scheduler rounds and attempt start: build the snapshot of slots (agent slots minus those
// held by attempts whose workers have not all exited) and of the queue, let the pure planner
// (scheduler.h) decide, persist QUEUED → STARTING with the attempt record, then launch.
#include <algorithm>
#include <csignal>
#include <map>
#include <utility>

#include <spdlog/spdlog.h>

#include "daemon/api/job_env.h"
#include "daemon/core/failpoint.h"
#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager_impl.h"
#include "daemon/core/scheduler.h"

extern char** environ;

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

  if (agent_->QueuesJobs()) {
    // The launcher has a queue of its own (Slurm): it places and starts the ranks when the
    // cluster has room, so every queued job is handed over now, with no local slots held.
    const std::vector<std::string> names(cache_.queued().begin(), cache_.queued().end());
    for (const std::string& name : names) {
      JobEntry* e = schedulable(name);
      if (e == nullptr) continue;
      const int32_t ranks = std::max(1, e->job.resources().ranks());
      StartAttempt(*e, std::vector<agent::Slot>(ranks, agent::Slot{"slurm", -1}));
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
  for (const agent::Slot& s : agent_->Slots()) {
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
    fp8d::v1::JobError* err = e->job.mutable_error();
    err->set_code(RpcCodeFor(fp8d::v1::INVALID_SPEC));
    err->set_message(u.reason);
    err->set_failure_class(fp8d::v1::INVALID_SPEC);
    Transition(*e, fp8d::v1::FAILED, "unschedulable: " + u.reason);
  }
  for (const Assignment& a : plan.assignments) {
    JobEntry* e = Find(a.name);
    if (e == nullptr) continue;
    std::vector<agent::Slot> slots;
    for (const SlotRef& r : a.ranks) slots.push_back(agent::Slot{r.node, r.gpu});
    StartAttempt(*e, slots);
  }
}

std::string JobManagerImpl::ChooseResume(const JobEntry& e) const {
  // Checkpoints are only reported once complete on disk (docs/design.md §4), oldest first here.
  size_t usable = e.checkpoints.size();
  // NaN/Inf loss: the newest checkpoint may already carry the divergence, so go one back
  // (docs/design.md §2, NUMERIC); with only one, start fresh.
  if (e.skip_newest_checkpoint && usable > 0) --usable;
  return usable == 0 ? std::string() : e.checkpoints[usable - 1].path();
}

void JobManagerImpl::StartAttempt(JobEntry& e, const std::vector<agent::Slot>& slots) {
  const int64_t now = NowMs();
  auto run = std::make_unique<AttemptRun>();
  run->number = e.job.attempt() + 1;
  fp8d::v1::Attempt& a = run->record.attempt;
  a.set_number(run->number);
  *a.mutable_start_time() = TimestampFromMs(now);
  a.set_resumed_from(ChooseResume(e));
  for (size_t r = 0; r < slots.size(); ++r) {
    fp8d::v1::RankPlacement* p = a.add_ranks();
    p->set_rank(static_cast<int32_t>(r));
    p->set_node(slots[r].node);
    p->set_gpu(slots[r].gpu);
    p->set_exit_status(-1);
    RankRun rank;
    rank.slot = slots[r];
    rank.last_seen_ms = now;
    run->ranks.push_back(std::move(rank));
  }
  run->start_ms = now;
  run->last_progress_ms = now;

  e.job.set_attempt(run->number);
  e.job.clear_error();  // the previous attempt's failure is in its attempt record
  ++e.counted_attempts;
  e.skip_newest_checkpoint = false;

  std::string where;
  for (const auto& s : slots) {
    if (!where.empty()) where += ", ";
    where += s.node + (s.gpu >= 0 ? ":gpu" + std::to_string(s.gpu) : ":cpu");
  }
  const std::string name = e.job.name();
  const int number = run->number;
  store::AttemptRecord record = run->record;
  const std::string resumed = a.resumed_from();
  e.run = std::move(run);
  cache_.AddRun(e);
  Transition(
      e, fp8d::v1::STARTING,
      "attempt " + std::to_string(number) + " placed on " + where +
          (resumed.empty() ? "" : "; resuming from " + resumed),
      [this, name, number](Status st) {
        if (!st.ok()) return;
        Failpoint("after_intent");
        Launch(name, number);
      },
      [name, record](store::JobStore& s) { return s.PutAttempt(name, record); });
}

void JobManagerImpl::Launch(const std::string& name, int number) {
  JobEntry* e = Find(name);
  if (e == nullptr || e->run == nullptr || e->run->number != number || shutting_down_) return;
  AttemptRun& run = *e->run;
  if (e->job.state() != fp8d::v1::STARTING || run.finished) {
    // Cancelled (or failed) before its workers existed: there is nothing to stop.
    for (RankRun& r : run.ranks) r.exited = true;
    supervisor_->OnRunExited(*e);
    return;
  }
  const std::string default_output = options_.data_dir + "/jobs/" + JobIdOf(name) + "/output";
  StatusOr<WorkerSpec> spec = MakeWorkerSpec(e->job, default_output);
  // A job stored before the allowlist (or before the operator narrowed it) is not launched
  // with an environment CreateJob would refuse now; INVALID_SPEC is final, not retried.
  if (spec.ok()) {
    if (Status env = api::ValidateJobEnv(e->job, options_.job_env_allow); !env.ok()) spec = env;
  }
  if (!spec.ok()) {
    for (RankRun& r : run.ranks) r.exited = true;
    supervisor_->FailAttempt(*e, fp8d::v1::INVALID_SPEC, spec.status().message());
    supervisor_->OnRunExited(*e);
    return;
  }
  agent::LaunchRequest request;
  request.job_id = JobIdOf(name);
  request.attempt = number;
  request.kind = spec->kind;
  request.spec_json = spec->json;
  request.attempt_dir = AttemptDir(name, number);
  for (const RankRun& r : run.ranks) request.slots.push_back(r.slot);
  if (e->job.has_train()) request.checkpoint_dir = spec->output_dir + "/checkpoints";
  request.resume_from = run.record.attempt.resumed_from();
  request.worker_argv_prefix = options_.worker_argv_prefix;
  request.uid = e->job.run_as_uid();
  if (options_.clean_worker_env) {
    std::map<std::string, std::string> env =
        agent::AllowlistedEnvironment(environ, options_.worker_env_allow);
    for (const auto& [k, v] : options_.worker_env) env[k] = v;
    for (const auto& [k, v] : e->job.env()) env[k] = v;
    request.env = std::move(env);
  }
  const fp8d::v1::Resources& res = e->job.resources();
  request.nodes = res.nodes();
  request.ranks_per_node = res.ranks_per_node();
  request.partition = res.slurm().partition();
  request.account = res.slurm().account();
  request.qos = res.slurm().qos();
  request.constraint = res.slurm().constraint();
  if (const int64_t deadline = MsFromDuration(e->job.timeouts().attempt_deadline()); deadline > 0) {
    request.time_limit_ms = deadline + options_.cancel_grace_ms;  // fp8d stops it first
  }

  const int64_t now = NowMs();
  for (RankRun& r : run.ranks) r.last_seen_ms = now;
  std::weak_ptr<int> alive = alive_;
  // Spawning writes spec.json and creates files: off the io thread.
  launcher_->Post([this, alive, request = std::move(request), name, number] {
    auto result = std::make_shared<StatusOr<std::vector<agent::RankProcess>>>(
        agent_->Launch(request));
    if (result->ok()) Failpoint("after_spawn");
    boost::asio::post(io_, [this, alive, name, number, result] {
      if (!alive.expired()) OnLaunched(name, number, std::move(*result));
    });
  });
}

void JobManagerImpl::OnLaunched(const std::string& name, int number,
                                StatusOr<std::vector<agent::RankProcess>> result) {
  JobEntry* e = Find(name);
  if (e == nullptr || e->run == nullptr || e->run->number != number) return;
  AttemptRun& run = *e->run;
  if (!result.ok()) {
    spdlog::error("{}: launching attempt {} failed: {}", name, number, result.status().ToString());
    for (RankRun& r : run.ranks) r.exited = true;  // the agent started none (or reaped them)
    if (!run.finished && e->job.state() == fp8d::v1::STARTING) {
      if (result.status().code() == fp8::StatusCode::kUnavailable) {
        // The controller could not write the attempt's own files (its disk, not the job's
        // fault): retried with backoff, not counted against max_attempts.
        run.record.attempt.set_controller_fault(true);
        --e->counted_attempts;
        supervisor_->FailAttempt(*e, fp8d::v1::INTERNAL_ERROR,
                    "the controller could not prepare the attempt (" + result.status().message() +
                        "); retried, not counted as an attempt");
      } else {
        // INVALID_ARGUMENT: the launcher refused the request itself (Slurm rejected the job:
        // unknown partition, an account it does not know); asking again cannot help.
        const bool refused = result.status().code() == fp8::StatusCode::kInvalidArgument;
        supervisor_->FailAttempt(*e, refused ? fp8d::v1::INVALID_SPEC : fp8d::v1::INTERNAL_ERROR,
                    "could not start the workers: " + result.status().message());
      }
    }
    supervisor_->OnRunExited(*e);
    return;
  }
  const int64_t now = NowMs();
  run.launched = true;
  run.start_ms = now;
  run.last_progress_ms = now;
  for (const agent::RankProcess& p : *result) {
    if (p.rank < 0 || p.rank >= static_cast<int>(run.ranks.size())) continue;
    RankRun& r = run.ranks[p.rank];
    r.handle = p.handle;
    r.offset = std::max(r.offset, p.events_offset);
    r.last_seen_ms = std::max(r.last_seen_ms, now);
    run.record.attempt.mutable_ranks(p.rank)->set_pid(p.pid);
  }
  // The launcher's handles: what recovery needs to re-adopt (it can also find the workers
  // without them, by their environment).
  supervisor_->SaveAttempt(*e, [](Status st) {
    if (st.ok()) Failpoint("after_pid_save");
  });
  spdlog::info("{}: attempt {} launched {} rank(s)", name, number, run.ranks.size());
  // A cancel or a failure verdict that came while the workers were being started.
  if (e->job.state() == fp8d::v1::CANCELLING || run.finished) {
    if (run.AnyLive()) {
      supervisor_->TerminateWorkers(*e);
    } else {
      supervisor_->OnRunExited(*e);
    }
  }
}

}  // namespace fp8d::core
