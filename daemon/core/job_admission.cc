// Checks a new job must pass against what this fp8d runs, beyond validation of the request:
//   - `backend: cuda` when no slot of the agent is a GPU is refused at create, the same for
//     train and calibrate, instead of failing (or being retried) at start;
//   - an output_dir that an active job writes to is refused, naming that job (two jobs in one
//     checkpoint folder would overwrite each other's checkpoints).
// The output-dir index is built from the active jobs at the first create (after recovery), with
// each job's request_id (so a create retried across a restart is still the same create), and
// kept by CreateJob; an entry whose job has since finished is stale and simply replaced. Its
// keys are resolved paths, so a symlink alias of a folder in use is refused too; a refusal
// prints the output_dir as the caller wrote it.
#include <filesystem>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager_impl.h"
#include "jobspec/kind.h"
#include "jobspec/paths.h"

namespace fp8d::core {

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

Status JobManagerImpl::CheckAdmission(const Job& job, const std::string& request_id) {
  if (fp8::jobspec::SpecBackend(job) == "cuda") {
    bool any_gpu = false;
    for (const auto& slot : agent_->Slots()) any_gpu = any_gpu || slot.gpu >= 0;
    if (!any_gpu) {
      return fp8::FailedPreconditionError(
          std::string(fp8::jobspec::SpecFieldPath(job)) + ".backend" +
          ": cuda, but no node of this fp8d has a GPU; use auto or cpu");
    }
  }
  if (!output_dirs_built_) {
    cache_.ForEach([this](const JobEntry& e) {
      const std::string key = OutputDirKey(e.job);
      if (!key.empty() && !IsTerminal(e.job.state())) {
        output_dirs_[key] = OutputDirUser{e.job.name(), e.job.request_id()};
      }
    });
    output_dirs_built_ = true;
  }
  const std::string key = OutputDirKey(job);
  const std::string& written = fp8::jobspec::SpecOutputDir(job);
  auto it = key.empty() ? output_dirs_.end() : output_dirs_.find(key);
  if (it == output_dirs_.end()) return fp8::OkStatus();
  // A retried create (same request_id) is the store's to deduplicate, not a second user.
  if (!request_id.empty() && it->second.request_id == request_id) return fp8::OkStatus();
  if (it->second.name.empty()) {
    return fp8::FailedPreconditionError("output_dir " + written + " is used by a job being created now");
  }
  JobEntry* user = Find(it->second.name);
  if (user != nullptr && !IsTerminal(user->job.state())) {
    return fp8::FailedPreconditionError("output_dir " + written + " is used by " + it->second.name + " (" +
                                        fp8d::v1::JobState_Name(user->job.state()) +
                                        "); wait for it to finish, or choose another output_dir");
  }
  output_dirs_.erase(it);  // its job has finished
  return fp8::OkStatus();
}

void JobManagerImpl::ReleaseOutputDir(const Job& job) {
  auto it = output_dirs_.find(OutputDirKey(job));
  if (it != output_dirs_.end() && it->second.name == job.name()) output_dirs_.erase(it);
}

}  // namespace fp8d::core
