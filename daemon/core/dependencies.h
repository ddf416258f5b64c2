// SPDX-License-Identifier: Apache-2.0
// Job dependencies (Job.depends_on): the pure decisions, and the reverse index the manager
// keeps. A job that depends on others waits QUEUED (pending_reason `waiting for jobs/x`) until
// all of them have SUCCEEDED; once one ends FAILED or CANCELLED, or no longer exists (deleted,
// or expired by job_ttl_after_finished), the waiting job ends FAILED with DEPENDENCY_FAILED.
// Only a job's first attempt waits: a job that has started once had all its dependencies
// succeed, and a retry must not fail because a dependency was deleted since.
//
// The manager's side (the create check against existing jobs, the terminal hook, recovery) is
// job_dependencies.cc; what here decides is table-tested (tests/core_lifecycle).
//
// THREADING: DependencyIndex is used on the manager's io thread only.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::core {

// At most this many entries in Job.depends_on.
inline constexpr int kMaxDependencies = 64;

// What a dependency has come to, as far as a job waiting on it is concerned.
enum class DependencyOutcome {
  kPending,    // not finished yet, or not known yet (being looked up)
  kSucceeded,
  kFailed,
  kCancelled,
  kGone,       // deleted (by DeleteJob or the TTL sweep): counts as failed
};

// The outcome of a job in `state`: kPending unless it is terminal.
DependencyOutcome OutcomeOfState(fp8d::v1::JobState state);

// Where a waiting job stands.
struct DependencyJudgement {
  enum Kind { kReady, kWaiting, kFailed } kind = kReady;
  std::string dependency;  // kWaiting: the first unfinished one; kFailed: the first that failed
  std::string message;     // kWaiting: the pending_reason; kFailed: the job's error message
};

// kFailed if any dependency failed, was cancelled or is gone (the first such, in depends_on
// order: nothing can save the job then), else kWaiting on the first pending one, else kReady.
DependencyJudgement JudgeDependencies(const std::vector<std::string>& depends_on,
                                      const std::function<DependencyOutcome(const std::string&)>& outcome_of);

// The dependency path start → ... → start through `depends_on_of` (a job's depends_on; empty
// for a job that is unknown), or empty when `start` is on no cycle. Iterative: a long chain
// cannot overflow the stack.
std::vector<std::string> FindDependencyCycle(
    const std::string& start, const std::function<std::vector<std::string>(const std::string&)>& depends_on_of);

// The create-time check of a job's depends_on, INVALID_ARGUMENT naming `job.depends_on[i]`:
// more than kMaxDependencies entries, a duplicate, the job itself (`self`, empty while it has
// no name yet), a job `exists` does not know, or one whose dependencies lead back to `self`.
// The form of each entry (jobs/<id>) is the API's validation (daemon/api/validation.cc).
fp8::Status CheckDependsOn(const std::string& self, const std::vector<std::string>& depends_on,
                           const std::function<bool(const std::string&)>& exists,
                           const std::function<std::vector<std::string>(const std::string&)>& depends_on_of);

// Job.depends_on as a vector.
std::vector<std::string> DependsOnOf(const fp8d::v1::Job& job);

// dependency → the jobs that wait on it, and what each finished dependency came to (kept only
// while a job still waits on it: a finished job leaves the manager's cache).
class DependencyIndex {
 public:
  void Add(const std::string& dependent, const std::vector<std::string>& depends_on);
  // The dependent finished: it waits on nothing any more.
  void Remove(const std::string& dependent, const std::vector<std::string>& depends_on);
  // The jobs waiting on `dependency` (a copy: acting on them may change the index).
  std::vector<std::string> DependentsOf(const std::string& dependency) const;
  bool HasDependents(const std::string& dependency) const { return dependents_.count(dependency) > 0; }
  // Records a finished (or gone) dependency's outcome, if anything waits on it.
  void SetOutcome(const std::string& dependency, DependencyOutcome outcome);
  // The recorded outcome; nullopt when none was recorded.
  std::optional<DependencyOutcome> RecordedOutcome(const std::string& dependency) const;
  size_t size() const { return dependents_.size(); }

 private:
  std::unordered_map<std::string, std::set<std::string>> dependents_;
  std::unordered_map<std::string, DependencyOutcome> outcomes_;
};

}  // namespace fp8d::core
