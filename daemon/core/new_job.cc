// SPDX-License-Identifier: Apache-2.0
// PrepareNewJob (new_job.h).
#include "daemon/core/new_job.h"

#include <cstdio>
#include <filesystem>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "jobspec/defaults.h"
#include "jobspec/kind.h"

namespace fp8d::core {

using fp8d::v1::Job;

namespace {

std::string Absolute(const std::string& path, const std::string& cwd) {
  if (path.empty()) return path;
  std::filesystem::path p(path);
  if (p.is_absolute()) return p.lexically_normal().string();
  return (std::filesystem::path(cwd) / p).lexically_normal().string();
}

// 64-bit FNV-1a. Not cryptographic: the hash only tells two bodies sent under one request_id
// apart, and it must be stable across daemon restarts (std::hash is not promised to be).
uint64_t Fnv1a64(const std::string& bytes, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

void ClearOutputOnlyFields(Job* job) {
  job->clear_name();
  job->clear_pending_reason();
  job->clear_state();
  job->clear_attempt();
  job->clear_progress();
  job->clear_checkpoint();
  job->clear_result();
  job->clear_error();
  job->clear_create_time();
  job->clear_start_time();
  job->clear_end_time();
  job->clear_update_time();
  job->clear_version();
  job->clear_attempts();
  job->clear_events();
}

}  // namespace

std::string RequestHash(const Job& job) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream raw(&bytes);
    google::protobuf::io::CodedOutputStream out(&raw);
    // Map fields (labels) are written in key order, so equal bodies give equal bytes.
    out.SetSerializationDeterministic(true);
    job.SerializeToCodedStream(&out);
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx",
                static_cast<unsigned long long>(Fnv1a64(bytes, 14695981039346656037ULL)),
                static_cast<unsigned long long>(Fnv1a64(bytes, 0x9e3779b97f4a7c15ULL)));
  return buf;
}

fp8::StatusOr<std::string> PrepareNewJob(Job* job, const std::string& cwd, int64_t now_ms) {
  if (job->spec_case() == Job::SPEC_NOT_SET) {
    return fp8::InvalidArgumentError("job.spec: one of job.train or job.calibrate is required");
  }
  // 1. The effective body.
  job->set_kind(fp8::jobspec::KindOf(*job));
  fp8::jobspec::ApplySpecDefaults(job);
  fp8d::v1::Resources& res = *job->mutable_resources();
  if (res.ranks() <= 0) {
    // Validated: nodes × ranks_per_node fits; with neither set the default is 1 rank.
    res.set_ranks(res.nodes() > 0 ? res.nodes() * (res.ranks_per_node() > 0 ? res.ranks_per_node() : 1) : 1);
  }
  ClearOutputOnlyFields(job);
  // 2. Its hash, which only a repeated request_id ever compares.
  std::string hash = job->request_id().empty() ? std::string() : RequestHash(*job);
  // 3. The daemon's own fields.
  switch (job->spec_case()) {
    case Job::kTrain:
      job->mutable_train()->set_output_dir(Absolute(job->train().output_dir(), cwd));
      break;
    case Job::kCalibrate:
      job->mutable_calibrate()->set_output_dir(Absolute(job->calibrate().output_dir(), cwd));
      break;
    case Job::SPEC_NOT_SET:
      break;
  }
  // The effective policy goes into the job, so `fp8ctl describe` shows what will happen.
  const EffectiveRetryPolicy policy = ResolveRetryPolicy(job->retry());
  auto* retry = job->mutable_retry();
  retry->set_max_attempts(policy.max_attempts);
  *retry->mutable_initial_backoff() = DurationFromMs(policy.initial_backoff_ms);
  *retry->mutable_max_backoff() = DurationFromMs(policy.max_backoff_ms);
  retry->set_multiplier(policy.multiplier);
  retry->set_jitter(policy.jitter);
  auto* timeouts = job->mutable_timeouts();
  if (MsFromDuration(timeouts->heartbeat_timeout()) <= 0)
    *timeouts->mutable_heartbeat_timeout() = DurationFromMs(30'000);
  if (MsFromDuration(timeouts->progress_timeout()) <= 0)
    *timeouts->mutable_progress_timeout() = DurationFromMs(300'000);
  if (MsFromDuration(timeouts->attempt_deadline()) < 0) timeouts->clear_attempt_deadline();
  job->set_state(fp8d::v1::QUEUED);
  job->set_version(1);
  *job->mutable_create_time() = TimestampFromMs(now_ms);
  *job->mutable_update_time() = job->create_time();
  return hash;
}

}  // namespace fp8d::core
