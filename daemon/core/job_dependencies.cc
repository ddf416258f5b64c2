// SPDX-License-Identifier: Apache-2.0
// Job dependencies in the manager (the rules are dependencies.h's): the create-time check
// against the existing jobs, the reverse index (dependency → waiting jobs) kept from create,
// recovery and every durable terminal state, the scheduler's gate, and failing the waiting
// jobs of a dependency that failed, was cancelled or is gone.
//
// A dependency in the cache is judged by the state watchers were sent (durable); one that has
// left it (finished earlier) by the outcome recorded when it finished, or, when nothing waited
// on it then, by one store read. Until that read answers the dependency counts as pending.
#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "daemon/core/dependencies.h"
#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager_impl.h"

namespace fp8d::core {

void JobManagerImpl::CheckDependencies(const Job& job, std::function<void(Status)> then) {
  std::vector<std::string> deps = DependsOnOf(job);
  // Count and duplicates first: a request with 10,000 entries costs no store reads.
  const auto known = [](const std::string&) { return true; };
  const auto none = [](const std::string&) { return std::vector<std::string>{}; };
  if (Status st = CheckDependsOn("", deps, known, none); !st.ok()) return then(st);
  std::vector<std::string> uncached;
  for (const std::string& dep : deps) {
    if (Find(dep) == nullptr) uncached.push_back(dep);
  }
  auto judge = [this, deps, none](const std::set<std::string>& stored) {
    return CheckDependsOn(
        "", deps, [&](const std::string& n) { return Find(n) != nullptr || stored.count(n) > 0; }, none);
  };
  if (uncached.empty()) return then(judge({}));
  // Finished jobs are only in the store.
  store_thread_->Run<StatusOr<std::set<std::string>>>(
      [uncached = std::move(uncached)](store::JobStore& s) -> StatusOr<std::set<std::string>> {
        std::set<std::string> found;
        for (const std::string& name : uncached) {
          StatusOr<Job> got = s.GetJob(name);
          if (got.ok()) {
            found.insert(name);
          } else if (got.status().code() != fp8::StatusCode::kNotFound) {
            return got.status();
          }
        }
        return found;
      },
      [judge, then = std::move(then)](StatusOr<std::set<std::string>> found) {
        if (!found.ok()) return then(found.status());
        then(judge(*found));
      });
}

DependencyOutcome JobManagerImpl::DependencyOutcomeOf(const std::string& name) const {
  if (const JobEntry* d = cache_.Find(name)) return OutcomeOfState(d->delivered().state());
  return dependencies_.RecordedOutcome(name).value_or(DependencyOutcome::kPending);
}

bool JobManagerImpl::DependenciesMet(const JobEntry& e) const {
  // Only the first attempt waits (dependencies.h).
  if (e.job.attempt() > 0) return true;
  return JudgeDependencies(DependsOnOf(e.job), [this](const std::string& n) {
           return DependencyOutcomeOf(n);
         }).kind == DependencyJudgement::kReady;
}

void JobManagerImpl::RegisterDependent(const std::string& name) {
  JobEntry* e = Find(name);
  if (e == nullptr || e->job.depends_on_size() == 0) return;
  if (e->job.state() != fp8d::v1::QUEUED || e->job.attempt() > 0) return;
  const std::vector<std::string> deps = DependsOnOf(e->job);
  dependencies_.Add(name, deps);
  std::vector<std::string> unknown;
  for (const std::string& dep : deps) {
    if (const JobEntry* d = Find(dep)) {
      // Finished, but not yet out of the cache: its outcome must outlive it.
      if (IsTerminal(d->delivered().state())) {
        dependencies_.SetOutcome(dep, OutcomeOfState(d->delivered().state()));
      }
    } else if (!dependencies_.RecordedOutcome(dep)) {
      unknown.push_back(dep);
    }
  }
  if (!unknown.empty()) ResolveDependencies(std::move(unknown));
  EvaluateDependent(*e);
}

void JobManagerImpl::ResolveDependencies(std::vector<std::string> names) {
  using Resolved = std::vector<std::pair<std::string, StatusOr<JobState>>>;
  store_thread_->Run<Resolved>(
      [names = std::move(names)](store::JobStore& s) {
        Resolved out;
        for (const std::string& name : names) {
          StatusOr<Job> got = s.GetJob(name);
          out.emplace_back(name, got.ok() ? StatusOr<JobState>(got->state()) : StatusOr<JobState>(got.status()));
        }
        return out;
      },
      [this](Resolved resolved) {
        for (auto& [name, state] : resolved) {
          if (Find(name) != nullptr) continue;  // active after all: its own transitions tell
          if (!state.ok() && state.status().code() != fp8::StatusCode::kNotFound) {
            // The waiting jobs stay QUEUED (pending) rather than fail for a store error.
            spdlog::error("dependency {}: reading its state: {}", name, state.status().ToString());
            continue;
          }
          OnDependencyOutcome(name, state.ok() ? OutcomeOfState(*state) : DependencyOutcome::kGone);
        }
      });
}

bool JobManagerImpl::EvaluateDependent(JobEntry& e) {
  if (e.job.state() != fp8d::v1::QUEUED || e.job.attempt() > 0 || e.job.depends_on_size() == 0) return false;
  const DependencyJudgement j = JudgeDependencies(
      DependsOnOf(e.job), [this](const std::string& n) { return DependencyOutcomeOf(n); });
  switch (j.kind) {
    case DependencyJudgement::kReady:
      // Only its own reason goes: one the scheduler set (its queue's) stays until it starts.
      if (e.job.pending_reason().rfind("waiting for jobs/", 0) == 0) {
        e.BeforeChange();
        e.job.clear_pending_reason();
        cache_.PublishChange(e, NowMs());
      }
      return true;
    case DependencyJudgement::kWaiting:
      if (e.job.pending_reason() != j.message) {
        e.BeforeChange();
        e.job.set_pending_reason(j.message);
        cache_.PublishChange(e, NowMs());
      }
      return false;
    case DependencyJudgement::kFailed:
      FailDependent(e, j.message);
      return false;
  }
  return false;
}

void JobManagerImpl::FailDependent(JobEntry& e, const std::string& message) {
  e.BeforeChange();
  e.job.clear_pending_reason();
  fp8d::v1::JobError* err = e.job.mutable_error();
  err->set_code(RpcCodeFor(fp8d::v1::DEPENDENCY_FAILED));
  err->set_message(message);
  err->set_failure_class(fp8d::v1::DEPENDENCY_FAILED);
  writer_->Transition(e, fp8d::v1::FAILED, message);
}

void JobManagerImpl::OnDependencyOutcome(const std::string& dependency, DependencyOutcome outcome) {
  if (!dependencies_.HasDependents(dependency)) return;
  dependencies_.SetOutcome(dependency, outcome);
  bool ready = false;
  for (const std::string& name : dependencies_.DependentsOf(dependency)) {
    if (JobEntry* e = Find(name)) ready = EvaluateDependent(*e) || ready;
  }
  // Placed in a round of its own, not inside the handler that finished the dependency.
  if (ready) Defer([this] { Schedule(); });
}

void JobManagerImpl::OnJobFinished(const Job& job) {
  if (job.depends_on_size() > 0) dependencies_.Remove(job.name(), DependsOnOf(job));
  OnDependencyOutcome(job.name(), OutcomeOfState(job.state()));
}

void JobManagerImpl::OnJobDeleted(const std::string& name) {
  OnDependencyOutcome(name, DependencyOutcome::kGone);
}

void JobManagerImpl::RecoverDependencies() {
  std::vector<std::string> waiting;
  cache_.ForEach([&](JobEntry& e) {
    if (e.job.depends_on_size() > 0 && e.job.state() == fp8d::v1::QUEUED && e.job.attempt() == 0) {
      waiting.push_back(e.job.name());
    }
  });
  // A cycle can only come from outside CreateJob's check (a restored store): its jobs would
  // wait for each other forever. Only waiting jobs are its edges: one that has started will end.
  const std::set<std::string> waits(waiting.begin(), waiting.end());
  const auto depends_on_of = [this, &waits](const std::string& n) {
    const JobEntry* e = waits.count(n) > 0 ? Find(n) : nullptr;
    return e != nullptr ? DependsOnOf(e->job) : std::vector<std::string>{};
  };
  // Every job on a cycle is found before any fails (a failed one would hide the cycle from the
  // next), then the rest join the index.
  std::vector<std::pair<std::string, std::string>> cyclic;  // name, message
  std::set<std::string> on_cycle;
  for (const std::string& name : waiting) {
    if (std::vector<std::string> cycle = FindDependencyCycle(name, depends_on_of); !cycle.empty()) {
      std::string path;
      for (const std::string& n : cycle) path += (path.empty() ? "" : " -> ") + n;
      cyclic.emplace_back(name, "dependency cycle " + path);
      on_cycle.insert(name);
    }
  }
  for (const auto& [name, message] : cyclic) {
    if (JobEntry* e = Find(name)) FailDependent(*e, message);
  }
  for (const std::string& name : waiting) {
    if (on_cycle.count(name) == 0) RegisterDependent(name);
  }
  if (!waiting.empty()) spdlog::info("recovery: {} job(s) wait on dependencies", waiting.size());
}

}  // namespace fp8d::core
