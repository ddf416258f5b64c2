// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/validation.h"

#include <cmath>

#include "common/label_selector.h"
#include "daemon/core/dependencies.h"
#include "jobspec/defaults.h"
#include "jobspec/kind.h"
#include "jobspec/validate.h"

namespace fp8d::api {
namespace {

using fp8::InvalidArgumentError;
using fp8::OkStatus;
using fp8::Status;

Status Bad(std::string_view field, std::string_view why) {
  return InvalidArgumentError(std::string(field) + ": " + std::string(why));
}

Status NonNegative(std::string_view field, int64_t v) {
  return v < 0 ? Bad(field, "must be >= 0") : OkStatus();
}

Status InRange(std::string_view field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return Bad(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  return OkStatus();
}

bool HasControlChars(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

Status ValidDuration(std::string_view field, const google::protobuf::Duration& d) {
  // google.protobuf.Duration: |seconds| ≤ 315576000000, |nanos| < 1e9, same sign.
  if (d.seconds() < 0 || d.nanos() < 0) return Bad(field, "must be non-negative");
  if (d.nanos() >= 1000000000) return Bad(field, "nanos must be < 1e9");
  if (d.seconds() > 315576000000LL) return Bad(field, "is too large");
  return OkStatus();
}

int64_t DurationNanos(const google::protobuf::Duration& d) {
  return d.seconds() * 1000000000LL + d.nanos();
}

// The spec's checks are jobspec's, the worker's own: run on the spec as it will be stored, with
// the defaults already filled in (ValidateCreateJobRequest).
Status ValidateDefaultedSpec(const fp8d::v1::Job& job) {
  switch (job.spec_case()) {
    case fp8d::v1::Job::kTrain: {
      const fp8d::v1::TrainSpec& spec = job.train();
      // init_from's directory is looked at with the owner's rights, with the paths
      // (job_isolation.h), not here as root.
      FP8_RETURN_IF_ERROR(fp8::jobspec::ValidateTrainSpec(spec, "job.train"));
      return fp8::jobspec::ValidateExpertParallel(spec, job.resources(), "job");
    }
    case fp8d::v1::Job::kCalibrate: {
      if (job.resources().expert_parallel() > 1) {
        return Bad("job.resources.expert_parallel", "applies to train jobs only (got " +
                                                        std::to_string(job.resources().expert_parallel()) + ")");
      }
      return fp8::jobspec::ValidateCalibrateSpec(job.calibrate(), "job.calibrate");
    }
    case fp8d::v1::Job::SPEC_NOT_SET:
      return Bad("job", "exactly one of train or calibrate must be set");
  }
  return Bad("job", "exactly one of train or calibrate must be set");
}

bool IsLabelKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' ||
         c == '/';
}

Status ValidateLabels(const google::protobuf::Map<std::string, std::string>& labels) {
  if (labels.size() > static_cast<size_t>(kMaxLabels)) {
    return Bad("job.labels", "at most " + std::to_string(kMaxLabels) + " labels");
  }
  for (const auto& [key, value] : labels) {
    const std::string field = "job.labels[\"" + key.substr(0, 64) + "\"]";
    if (key.empty()) return Bad("job.labels", "keys must not be empty");
    if (key.size() > kMaxLabelKeyLength) {
      return Bad(field, "key must be at most " + std::to_string(kMaxLabelKeyLength) + " characters");
    }
    if (!(key[0] >= 'a' && key[0] <= 'z')) return Bad(field, "key must start with a lowercase letter");
    for (char c : key) {
      if (!IsLabelKeyChar(c)) return Bad(field, "key may only contain [a-z0-9_./-]");
    }
    if (value.size() > kMaxLabelValueLength) {
      return Bad(field, "value must be at most " + std::to_string(kMaxLabelValueLength) + " characters");
    }
    if (HasControlChars(value)) return Bad(field, "value must not contain control characters");
  }
  return OkStatus();
}

// A duration that is set (non-zero) must reach `floor_ns`: a 1 ns heartbeat timeout cannot be
// met by any worker, and rounding it to "unset" would silently mean the default.
Status AtLeast(std::string_view field, const google::protobuf::Duration& d, int64_t floor_ns,
               const char* floor_text) {
  const int64_t ns = DurationNanos(d);
  if (ns > 0 && ns < floor_ns) {
    return Bad(field, std::string("must be 0 (the default) or at least ") + floor_text);
  }
  return OkStatus();
}

Status ValidateRetry(const fp8d::v1::RetryPolicy& r) {
  FP8_RETURN_IF_ERROR(InRange("job.retry.max_attempts", r.max_attempts(), 0, kMaxAttempts));
  FP8_RETURN_IF_ERROR(ValidDuration("job.retry.initial_backoff", r.initial_backoff()));
  FP8_RETURN_IF_ERROR(ValidDuration("job.retry.max_backoff", r.max_backoff()));
  FP8_RETURN_IF_ERROR(AtLeast("job.retry.initial_backoff", r.initial_backoff(), 10'000'000, "10ms"));
  FP8_RETURN_IF_ERROR(AtLeast("job.retry.max_backoff", r.max_backoff(), 10'000'000, "10ms"));
  if (r.has_initial_backoff() && r.has_max_backoff() &&
      DurationNanos(r.max_backoff()) > 0 &&
      DurationNanos(r.max_backoff()) < DurationNanos(r.initial_backoff())) {
    return Bad("job.retry.max_backoff", "must be >= initial_backoff");
  }
  if (!std::isfinite(r.multiplier()) || (r.multiplier() != 0 && r.multiplier() < 1) ||
      r.multiplier() > 100) {
    return Bad("job.retry.multiplier", "must be 0 (default) or between 1 and 100");
  }
  if (!std::isfinite(r.jitter()) || r.jitter() < 0 || r.jitter() > 1) {
    return Bad("job.retry.jitter", "must be between 0 and 1");
  }
  return OkStatus();
}

// A Slurm name (partition, account, qos) or constraint expression goes into sbatch's argv:
// printable ASCII without spaces keeps it one argument and readable in squeue.
Status SlurmName(std::string_view field, const std::string& v) {
  if (v.size() > 256) return Bad(field, "at most 256 characters");
  for (char c : v) {
    if (c <= ' ' || c > '~') return Bad(field, "must be printable ASCII without spaces");
  }
  return OkStatus();
}

// ranks, nodes and ranks_per_node: 0 means "derive" (see job.proto); set ones must agree.
Status ValidateResources(const fp8d::v1::Resources& r) {
  if (r.ranks() != 0) FP8_RETURN_IF_ERROR(InRange("job.resources.ranks", r.ranks(), 1, kMaxRanks));
  if (r.nodes() != 0) FP8_RETURN_IF_ERROR(InRange("job.resources.nodes", r.nodes(), 1, kMaxRanks));
  if (r.ranks_per_node() != 0) {
    FP8_RETURN_IF_ERROR(InRange("job.resources.ranks_per_node", r.ranks_per_node(), 1, kMaxRanks));
  }
  if (r.nodes() != 0) {
    const int64_t per_node = r.ranks_per_node() != 0 ? r.ranks_per_node() : 1;
    const int64_t product = int64_t{r.nodes()} * per_node;
    if (product > kMaxRanks) {
      return Bad("job.resources.nodes", "nodes × ranks_per_node must be at most " + std::to_string(kMaxRanks));
    }
    if (r.ranks() != 0 && r.ranks() != product) {
      return Bad("job.resources.ranks", "must equal nodes × ranks_per_node (" + std::to_string(r.nodes()) +
                                            " × " + std::to_string(per_node) + " = " + std::to_string(product) +
                                            ") when both are set");
    }
  } else if (r.ranks_per_node() != 0 && r.ranks() != 0 && r.ranks() % r.ranks_per_node() != 0) {
    return Bad("job.resources.ranks", "must be a multiple of ranks_per_node");
  }
  FP8_RETURN_IF_ERROR(SlurmName("job.resources.slurm.partition", r.slurm().partition()));
  FP8_RETURN_IF_ERROR(SlurmName("job.resources.slurm.account", r.slurm().account()));
  FP8_RETURN_IF_ERROR(SlurmName("job.resources.slurm.qos", r.slurm().qos()));
  FP8_RETURN_IF_ERROR(SlurmName("job.resources.slurm.constraint", r.slurm().constraint()));
  return OkStatus();
}

Status ValidateTimeouts(const fp8d::v1::Timeouts& t) {
  FP8_RETURN_IF_ERROR(ValidDuration("job.timeouts.attempt_deadline", t.attempt_deadline()));
  FP8_RETURN_IF_ERROR(ValidDuration("job.timeouts.heartbeat_timeout", t.heartbeat_timeout()));
  FP8_RETURN_IF_ERROR(ValidDuration("job.timeouts.progress_timeout", t.progress_timeout()));
  constexpr int64_t kSecond = 1'000'000'000;
  FP8_RETURN_IF_ERROR(AtLeast("job.timeouts.attempt_deadline", t.attempt_deadline(), kSecond, "1s"));
  FP8_RETURN_IF_ERROR(AtLeast("job.timeouts.heartbeat_timeout", t.heartbeat_timeout(), kSecond, "1s"));
  FP8_RETURN_IF_ERROR(AtLeast("job.timeouts.progress_timeout", t.progress_timeout(), kSecond, "1s"));
  return OkStatus();
}

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

}  // namespace

Status ValidateJobName(std::string_view name, std::string_view field) {
  constexpr std::string_view kPrefix = "jobs/";
  if (name.empty()) return Bad(field, "must not be empty (expected jobs/<id>)");
  if (name.substr(0, kPrefix.size()) != kPrefix || name.size() == kPrefix.size() ||
      name.size() > kPrefix.size() + 128) {
    return Bad(field, "must have the form jobs/<id>");
  }
  for (char c : name.substr(kPrefix.size())) {
    if (!IsIdChar(c)) return Bad(field, "must have the form jobs/<id> with id of [A-Za-z0-9._-]");
  }
  return OkStatus();
}

namespace {

// The form of each entry; whether each names a job the caller may depend on is the manager's
// check (daemon/core/dependencies.h) and the owner rule's (job_service.cc).
Status ValidateDependsOn(const google::protobuf::RepeatedPtrField<std::string>& depends_on) {
  if (depends_on.size() > fp8d::core::kMaxDependencies) {
    return Bad("job.depends_on", "at most " + std::to_string(fp8d::core::kMaxDependencies) +
                                     " dependencies, got " + std::to_string(depends_on.size()));
  }
  for (int i = 0; i < depends_on.size(); ++i) {
    FP8_RETURN_IF_ERROR(ValidateJobName(depends_on[i], "job.depends_on[" + std::to_string(i) + "]"));
  }
  return OkStatus();
}

// ValidateCreateJobRequest's checks, on a request whose spec has its defaults.
Status ValidateDefaultedRequest(const fp8d::v1::CreateJobRequest& request) {
  if (request.request_id().size() > kMaxRequestIdLength) {
    return Bad("request_id", "must be at most " + std::to_string(kMaxRequestIdLength) + " characters");
  }
  if (HasControlChars(request.request_id())) return Bad("request_id", "must not contain control characters");
  if (!request.has_job()) return Bad("job", "must be set");
  const fp8d::v1::Job& job = request.job();
  if (job.display_name().size() > kMaxDisplayNameLength) {
    return Bad("job.display_name",
               "must be at most " + std::to_string(kMaxDisplayNameLength) + " characters");
  }
  if (HasControlChars(job.display_name())) {
    return Bad("job.display_name", "must not contain control characters");
  }
  FP8_RETURN_IF_ERROR(ValidateDefaultedSpec(job));
  // kind is output only but a client may echo it back; it must then agree with the spec.
  if (job.kind() != fp8d::v1::JOB_KIND_UNSPECIFIED && job.kind() != fp8::jobspec::KindOf(job)) {
    return Bad("job.kind", "does not match the spec that is set");
  }
  FP8_RETURN_IF_ERROR(ValidateResources(job.resources()));
  FP8_RETURN_IF_ERROR(InRange("job.priority", job.priority(), kMinPriority, kMaxPriority));
  FP8_RETURN_IF_ERROR(ValidateLabels(job.labels()));
  FP8_RETURN_IF_ERROR(ValidateRetry(job.retry()));
  FP8_RETURN_IF_ERROR(ValidateTimeouts(job.timeouts()));
  FP8_RETURN_IF_ERROR(ValidateDependsOn(job.depends_on()));
  return OkStatus();
}

}  // namespace

Status ValidateCreateJobRequest(fp8d::v1::CreateJobRequest* request) {
  if (request->has_job()) fp8::jobspec::ApplySpecDefaults(request->mutable_job());
  return ValidateDefaultedRequest(*request);
}

Status ValidateCreateJobRequest(const fp8d::v1::CreateJobRequest& request) {
  fp8d::v1::CreateJobRequest copy = request;
  return ValidateCreateJobRequest(&copy);
}

Status ValidateGetJobRequest(const fp8d::v1::GetJobRequest& request) {
  FP8_RETURN_IF_ERROR(ValidateJobName(request.name(), "name"));
  if (!fp8d::v1::JobView_IsValid(request.view())) return Bad("view", "unknown value");
  return OkStatus();
}

Status ValidateListJobsRequest(const fp8d::v1::ListJobsRequest& request) {
  if (!fp8d::v1::JobState_IsValid(request.state())) return Bad("state", "unknown value");
  if (!fp8d::v1::JobKind_IsValid(request.kind())) return Bad("kind", "unknown value");
  FP8_RETURN_IF_ERROR(InRange("page_size", request.page_size(), 0, kMaxPageSize));
  if (request.page_token().size() > 1024) return Bad("page_token", "is not a token this server issued");
  if (request.label_selector().size() > 4096) return Bad("label_selector", "longer than 4096 bytes");
  if (request.owner().size() > 256) return Bad("owner", "longer than 256 bytes");
  return fp8::ParseLabelSelector(request.label_selector()).status();
}

Status ValidateDeleteJobRequest(const fp8d::v1::DeleteJobRequest& request) {
  return ValidateJobName(request.name(), "name");
}

Status ValidateWatchJobRequest(const fp8d::v1::WatchJobRequest& request) {
  FP8_RETURN_IF_ERROR(ValidateJobName(request.name(), "name"));
  return NonNegative("since_version", request.since_version());
}

Status ValidateCancelJobRequest(const fp8d::v1::CancelJobRequest& request) {
  return ValidateJobName(request.name(), "name");
}

Status ValidateGetJobLogsRequest(const fp8d::v1::GetJobLogsRequest& request) {
  FP8_RETURN_IF_ERROR(ValidateJobName(request.name(), "name"));
  FP8_RETURN_IF_ERROR(InRange("rank", request.rank(), 0, kMaxRanks - 1));
  return NonNegative("attempt", request.attempt());
}

}  // namespace fp8d::api
