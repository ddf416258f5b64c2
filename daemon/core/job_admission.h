// SPDX-License-Identifier: Apache-2.0
// JobAdmission: the checks a new job must pass against what this fp8d runs, beyond validation
// of the request:
//   - `backend: cuda` when no slot of the launcher is a GPU is refused at create, the same for
//     train and calibrate, instead of failing (or being retried) at start;
//   - an output_dir that an active job writes to is refused, naming that job (two jobs in one
//     checkpoint folder would overwrite each other's checkpoints).
// The output-dir index is built from the active jobs at the first create (after recovery), with
// each job's request_id (so a create retried across a restart is still the same create), and
// kept by CreateJob; an entry whose job has since finished is stale and simply replaced. Its
// keys are resolved paths, so a symlink alias of a folder in use is refused too; a refusal
// prints the output_dir as the caller wrote it. A create's key comes resolved from the API's
// path check, run as the job's owner off the io thread; recovery's and Release's are resolved
// here.
//
// THREADING: io thread only.
#pragma once

#include <string>
#include <unordered_map>

#include "common/status.h"
#include "daemon/launcher/launcher.h"
#include "daemon/core/job_cache.h"

namespace fp8d::core {

// The job's output_dir resolved (jobspec::ResolvePath), as the index's key ("" if unset).
std::string OutputDirKey(const fp8d::v1::Job& job);

class JobAdmission {
 public:
  JobAdmission(JobCache& cache, launcher::Launcher& launcher) : cache_(cache), launcher_(launcher) {}

  // FAILED_PRECONDITION (naming the field, or the job using the output_dir), else the job's
  // output dir is claimed for this create until Settle: the key to settle it with ("" for a
  // job without an output_dir). `key` is OutputDirKey(job), or what the API's path check
  // resolved the same output_dir to (then no path is walked here).
  fp8::StatusOr<std::string> Admit(const fp8d::v1::Job& job, const std::string& request_id, std::string key);
  // The create claimed under `key` was answered: its job now holds the dir, or (create failed)
  // nothing does.
  void Settle(const std::string& key, const fp8::StatusOr<fp8d::v1::Job>& created);
  // A finished job left the cache: its entry goes, so the index holds only active jobs.
  void Release(const fp8d::v1::Job& job);

 private:
  struct OutputDirUser {
    std::string name;        // empty while its create is being written
    std::string request_id;  // of that create, so its retries are not refused
  };
  fp8::Status CheckBackend(const fp8d::v1::Job& job) const;
  void BuildIndex();

  JobCache& cache_;
  launcher::Launcher& launcher_;
  std::unordered_map<std::string, OutputDirUser> output_dirs_;
  bool built_ = false;
};

}  // namespace fp8d::core
