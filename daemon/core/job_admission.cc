// SPDX-License-Identifier: Apache-2.0
// JobAdmission (job_admission.h).
#include "daemon/core/job_admission.h"

#include <filesystem>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "jobspec/kind.h"
#include "jobspec/paths.h"

namespace fp8d::core {

using fp8d::v1::Job;

std::string OutputDirKey(const Job& job) {
  const std::string& dir = fp8::jobspec::SpecOutputDir(job);
  if (dir.empty()) return "";
  // lstat and readlink of the path's components (jobspec/paths.h); a path that cannot be
  // resolved (it was checked at create, so it has changed since) is compared as written.
  if (auto resolved = fp8::jobspec::ResolvePath(dir); resolved.ok()) return *resolved;
  std::string key = std::filesystem::path(dir).lexically_normal().string();
  while (key.size() > 1 && key.back() == '/') key.pop_back();
  return key;
}

fp8::Status JobAdmission::CheckBackend(const Job& job) const {
  if (fp8::jobspec::SpecBackend(job) != "cuda") return fp8::OkStatus();
  for (const auto& slot : launcher_.Slots()) {
    if (slot.gpu >= 0) return fp8::OkStatus();
  }
  return fp8::FailedPreconditionError(std::string(fp8::jobspec::SpecFieldPath(job)) + ".backend" +
                                      ": cuda, but no node of this fp8d has a GPU; use auto or cpu");
}

void JobAdmission::BuildIndex() {
  cache_.ForEach([this](const JobEntry& e) {
    const std::string key = OutputDirKey(e.job);
    if (!key.empty() && !IsTerminal(e.job.state())) {
      output_dirs_[key] = OutputDirUser{e.job.name(), e.job.request_id()};
    }
  });
  built_ = true;
}

fp8::StatusOr<std::string> JobAdmission::Admit(const Job& job, const std::string& request_id, std::string key) {
  FP8_RETURN_IF_ERROR(CheckBackend(job));
  if (!built_) BuildIndex();
  if (key.empty()) return key;
  // One lookup: a new entry is this create's claim; an existing one is checked first.
  auto [it, fresh] = output_dirs_.try_emplace(key);
  if (!fresh) {
    const std::string& written = fp8::jobspec::SpecOutputDir(job);
    const OutputDirUser& user = it->second;
    // A retried create (same request_id) is the store's to deduplicate, not a second user.
    const bool retried = !request_id.empty() && user.request_id == request_id;
    if (!retried && user.name.empty()) {
      return fp8::FailedPreconditionError("output_dir " + written + " is used by a job being created now");
    }
    const JobEntry* active = retried ? nullptr : cache_.Find(user.name);
    if (active != nullptr && !IsTerminal(active->job.state())) {
      return fp8::FailedPreconditionError("output_dir " + written + " is used by " + user.name + " (" +
                                          fp8d::v1::JobState_Name(active->job.state()) +
                                          "); wait for it to finish, or choose another output_dir");
    }
  }
  it->second = OutputDirUser{"", request_id};  // claimed until Settle
  return key;
}

void JobAdmission::Settle(const std::string& key, const fp8::StatusOr<Job>& created) {
  if (key.empty()) return;
  auto it = output_dirs_.find(key);
  if (it == output_dirs_.end() || !it->second.name.empty()) return;
  if (created.ok()) {
    it->second.name = created->name();
  } else {
    output_dirs_.erase(it);
  }
}

void JobAdmission::Release(const Job& job) {
  auto it = output_dirs_.find(OutputDirKey(job));
  if (it != output_dirs_.end() && it->second.name == job.name()) output_dirs_.erase(it);
}

}  // namespace fp8d::core
