// Local isolation of jobs, decided at CreateJob: which uid a job's workers run as, which paths
// it may read and write (under allowed roots, after resolving symlinks), and which extra
// environment it may set. The agent enforces the uid and the environment at launch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/api/auth_policy.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::api {

struct IsolationOptions {
  // fp8d is root and starts workers as their owner's uid. Off: workers run as fp8d's own uid
  // (a non-root fp8d cannot switch users, and its workers cannot exceed its own rights).
  bool run_as_owner = false;
  int64_t default_uid = -1;  // the default user's uid, for principals without one; never 0
  // Roots the job's input and output paths must resolve under. Empty: the data dir and the
  // home directory of the uid the job runs as.
  std::vector<std::string> allowed_roots;
  std::string data_dir;
};

// The uid for Job.run_as_uid: 0 means fp8d's own (no switch). A principal mapped to root runs
// its jobs as the default user: never as root.
int64_t RunAsUid(const IsolationOptions& options, const Principal& principal);

// The roots that apply to a job running as `run_as_uid`, each resolved with realpath.
std::vector<std::string> AllowedRoots(const IsolationOptions& options, int64_t run_as_uid);

// INVALID_ARGUMENT naming the field ("job.train.output_dir: ...") when a path is relative or
// does not resolve under one of `roots`. A path that does not exist yet is judged by its
// nearest existing ancestor; a glob by the directory before its first wildcard.
fp8::Status CheckJobPaths(const fp8d::v1::Job& job, const std::vector<std::string>& roots);

// Job.env: keys [A-Za-z_][A-Za-z0-9_]*, not FP8D_* (the launcher's), bounded sizes.
fp8::Status ValidateJobEnv(const fp8d::v1::Job& job);

}  // namespace fp8d::api
