// SPDX-License-Identifier: Apache-2.0
// Local isolation of jobs, decided at CreateJob: which uid a job's workers run as, which paths
// it may read and write (under allowed roots, after resolving symlinks). The launcher enforces the
// uid at launch. Which environment a job may set is job_env.h's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/api/auth_policy.h"
#include "fp8d/v1/job.pb.h"
#include "jobspec/paths.h"

namespace fp8d::api {

struct IsolationOptions {
  // fp8d is root and starts workers as their owner's uid. Off: workers run as fp8d's own uid
  // (a non-root fp8d cannot switch users, and its workers cannot exceed its own rights).
  bool run_as_owner = false;
  int64_t default_uid = -1;  // the default user's uid, for principals without one; never 0
  bool allow_root_jobs = false;  // --allow-root-jobs: uid 0's own jobs run as root
  std::vector<std::string> job_env_allow;  // --job-env-allow: Job.env names beyond job_env.h's
  // Roots the job's input and output paths must resolve under. Empty: the data dir and the
  // home directory of the uid the job runs as.
  std::vector<std::string> allowed_roots;
  std::string data_dir;
};

// The uid for Job.run_as_uid: 0 means fp8d's own (no switch). A principal mapped to uid 0 (a
// root unix-socket peer, a token line with uid 0) runs its jobs as root only with
// allow_root_jobs; otherwise FAILED_PRECONDITION saying so (running them as someone else
// instead would hand root's job to that user, who could then signal or read it).
fp8::StatusOr<int64_t> RunAsUid(const IsolationOptions& options, const Principal& principal);

// The roots that apply to a job running as `run_as_uid`, each resolved with realpath.
std::vector<std::string> AllowedRoots(const IsolationOptions& options, int64_t run_as_uid);

// INVALID_ARGUMENT naming the field ("job.train.output_dir: ...") when a path field of the job
// breaks jobspec/paths.h's rule for `roots`, or init_from names no model directory. When fp8d
// is root and the job runs as `run_as_uid` (> 0), the filesystem is looked at with that user's
// rights, so a refusal tells the caller nothing about paths the owner cannot see. `resolved`,
// when given, receives what the check resolved (the output_dir, as that user sees it).
fp8::Status CheckJobPaths(const fp8d::v1::Job& job, const std::vector<std::string>& roots, int64_t run_as_uid,
                          fp8::jobspec::ResolvedPaths* resolved = nullptr);

}  // namespace fp8d::api
