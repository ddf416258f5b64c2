// SPDX-License-Identifier: Apache-2.0
// Job dependencies: the pure decisions and the reverse index (dependencies.h).
#include "daemon/core/dependencies.h"

#include <unordered_map>
#include <unordered_set>

#include "daemon/core/job_lifecycle.h"

namespace fp8d::core {

namespace {

std::string Field(size_t i) { return "job.depends_on[" + std::to_string(i) + "]"; }

const char* OutcomeWords(DependencyOutcome outcome) {
  switch (outcome) {
    case DependencyOutcome::kFailed:
      return "ended FAILED";
    case DependencyOutcome::kCancelled:
      return "ended CANCELLED";
    case DependencyOutcome::kGone:
      return "no longer exists (deleted)";
    case DependencyOutcome::kPending:
    case DependencyOutcome::kSucceeded:
      break;
  }
  return "";
}

}  // namespace

DependencyOutcome OutcomeOfState(fp8d::v1::JobState state) {
  // Which states are terminal is the lifecycle's; of those, only SUCCEEDED lets a job run.
  if (!IsTerminal(state)) return DependencyOutcome::kPending;
  if (state == fp8d::v1::SUCCEEDED) return DependencyOutcome::kSucceeded;
  return state == fp8d::v1::CANCELLED ? DependencyOutcome::kCancelled : DependencyOutcome::kFailed;
}

DependencyJudgement JudgeDependencies(const std::vector<std::string>& depends_on,
                                      const std::function<DependencyOutcome(const std::string&)>& outcome_of) {
  DependencyJudgement out;
  for (const std::string& dep : depends_on) {
    const DependencyOutcome outcome = outcome_of(dep);
    if (outcome == DependencyOutcome::kSucceeded) continue;
    if (outcome == DependencyOutcome::kPending) {
      if (out.kind == DependencyJudgement::kReady) {
        out.kind = DependencyJudgement::kWaiting;
        out.dependency = dep;
        out.message = "waiting for " + dep;
      }
      continue;
    }
    out.kind = DependencyJudgement::kFailed;
    out.dependency = dep;
    out.message = "dependency " + dep + " " + OutcomeWords(outcome);
    return out;
  }
  return out;
}

std::vector<std::string> FindDependencyCycle(
    const std::string& start, const std::function<std::vector<std::string>(const std::string&)>& depends_on_of) {
  // Depth-first from start; a path that reaches start again is the cycle. Each job is
  // expanded once, so the walk costs the edges reachable from start.
  struct Frame {
    std::string name;
    std::vector<std::string> next;
    size_t i = 0;
  };
  std::vector<Frame> path;
  std::unordered_set<std::string> expanded;
  path.push_back(Frame{start, depends_on_of(start), 0});
  expanded.insert(start);
  while (!path.empty()) {
    Frame& top = path.back();
    if (top.i == top.next.size()) {
      path.pop_back();
      continue;
    }
    std::string dep = top.next[top.i++];
    if (dep == start) {
      std::vector<std::string> cycle;
      for (const Frame& f : path) cycle.push_back(f.name);
      cycle.push_back(start);
      return cycle;
    }
    if (!expanded.insert(dep).second) continue;
    std::vector<std::string> next = depends_on_of(dep);
    path.push_back(Frame{std::move(dep), std::move(next), 0});
  }
  return {};
}

fp8::Status CheckDependsOn(const std::string& self, const std::vector<std::string>& depends_on,
                           const std::function<bool(const std::string&)>& exists,
                           const std::function<std::vector<std::string>(const std::string&)>& depends_on_of) {
  if (depends_on.size() > static_cast<size_t>(kMaxDependencies)) {
    return fp8::InvalidArgumentError("job.depends_on: at most " + std::to_string(kMaxDependencies) +
                                     " dependencies, got " + std::to_string(depends_on.size()));
  }
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < depends_on.size(); ++i) {
    const std::string& dep = depends_on[i];
    if (auto [it, fresh] = seen.emplace(dep, i); !fresh) {
      return fp8::InvalidArgumentError(Field(i) + ": " + dep + " is already " + Field(it->second));
    }
    if (!self.empty() && dep == self) {
      return fp8::InvalidArgumentError(Field(i) + ": a job cannot depend on itself");
    }
    if (!exists(dep)) return fp8::InvalidArgumentError(Field(i) + ": " + dep + " does not exist");
  }
  if (self.empty()) return fp8::OkStatus();  // nothing can name a job that has no name yet
  const std::vector<std::string> cycle = FindDependencyCycle(
      self, [&](const std::string& name) { return name == self ? depends_on : depends_on_of(name); });
  if (cycle.size() >= 2) {
    std::string path;
    for (const std::string& name : cycle) path += (path.empty() ? "" : " -> ") + name;
    return fp8::InvalidArgumentError(Field(seen[cycle[1]]) + ": " + cycle[1] +
                                     " depends on this job (cycle " + path + ")");
  }
  return fp8::OkStatus();
}

std::vector<std::string> DependsOnOf(const fp8d::v1::Job& job) {
  return std::vector<std::string>(job.depends_on().begin(), job.depends_on().end());
}

void DependencyIndex::Add(const std::string& dependent, const std::vector<std::string>& depends_on) {
  for (const std::string& dep : depends_on) dependents_[dep].insert(dependent);
}

void DependencyIndex::Remove(const std::string& dependent, const std::vector<std::string>& depends_on) {
  for (const std::string& dep : depends_on) {
    auto it = dependents_.find(dep);
    if (it == dependents_.end()) continue;
    it->second.erase(dependent);
    if (it->second.empty()) {
      dependents_.erase(it);
      outcomes_.erase(dep);
    }
  }
}

std::vector<std::string> DependencyIndex::DependentsOf(const std::string& dependency) const {
  auto it = dependents_.find(dependency);
  if (it == dependents_.end()) return {};
  return std::vector<std::string>(it->second.begin(), it->second.end());
}

void DependencyIndex::SetOutcome(const std::string& dependency, DependencyOutcome outcome) {
  if (HasDependents(dependency)) outcomes_[dependency] = outcome;
}

std::optional<DependencyOutcome> DependencyIndex::RecordedOutcome(const std::string& dependency) const {
  auto it = outcomes_.find(dependency);
  if (it == outcomes_.end()) return std::nullopt;
  return it->second;
}

}  // namespace fp8d::core
