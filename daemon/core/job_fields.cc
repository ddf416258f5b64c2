#include "daemon/core/job_fields.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include "daemon/core/job_lifecycle.h"

namespace fp8d::core {

using fp8d::v1::FailureClass;
using fp8d::v1::Job;
using google::protobuf::util::TimeUtil;

namespace {

constexpr char kJobsPrefix[] = "jobs/";

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

}  // namespace

fp8::Status PrepareNewJob(Job* job, const std::string& cwd) {
  switch (job->spec_case()) {
    case Job::kTrain:
      job->set_kind(fp8d::v1::TRAIN);
      job->mutable_train()->set_output_dir(Absolute(job->train().output_dir(), cwd));
      break;
    case Job::kCalibrate:
      job->set_kind(fp8d::v1::CALIBRATE);
      job->mutable_calibrate()->set_output_dir(Absolute(job->calibrate().output_dir(), cwd));
      break;
    case Job::SPEC_NOT_SET:
      return fp8::InvalidArgumentError("job.spec: one of job.train or job.calibrate is required");
  }
  if (job->resources().ranks() <= 0) job->mutable_resources()->set_ranks(1);

  // Write the effective policy into the job, so `fp8ctl describe` shows what will happen.
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

  // Output-only fields: whatever the client sent there is not ours to keep.
  job->clear_name();
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
  job->set_state(fp8d::v1::QUEUED);
  return fp8::OkStatus();
}

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

std::string JobIdOf(const std::string& name) {
  if (name.rfind(kJobsPrefix, 0) == 0) return name.substr(sizeof(kJobsPrefix) - 1);
  return name;
}

fp8::StatusOr<WorkerSpec> MakeWorkerSpec(const Job& job, const std::string& default_output_dir) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;  // the worker reads snake_case (job.proto)
  WorkerSpec out;
  google::protobuf::util::Status st;
  // One exhaustive switch names the worker subcommand: a new kind of job fails to compile
  // here (-Wswitch) instead of launching as the wrong one.
  switch (job.spec_case()) {
    case Job::kTrain: {
      fp8d::v1::TrainSpec spec = job.train();
      if (spec.output_dir().empty()) spec.set_output_dir(default_output_dir);
      out.kind = "train";
      out.output_dir = spec.output_dir();
      st = google::protobuf::util::MessageToJsonString(spec, &out.json, options);
      break;
    }
    case Job::kCalibrate: {
      fp8d::v1::CalibrateSpec spec = job.calibrate();
      if (spec.output_dir().empty()) spec.set_output_dir(default_output_dir);
      out.kind = "calibrate";
      out.output_dir = spec.output_dir();
      st = google::protobuf::util::MessageToJsonString(spec, &out.json, options);
      break;
    }
    case Job::SPEC_NOT_SET:
      return fp8::InvalidArgumentError("job.spec: " + job.name() + " has neither train nor calibrate");
  }
  if (!st.ok()) return fp8::InternalError("spec.json of " + job.name() + ": " + st.ToString());
  return out;
}

int32_t RpcCodeFor(FailureClass failure) {
  switch (failure) {
    case fp8d::v1::INVALID_SPEC: return 3;         // INVALID_ARGUMENT
    case fp8d::v1::DATA_ERROR: return 9;           // FAILED_PRECONDITION: the input is unusable
    case fp8d::v1::HUNG: return 4;                 // DEADLINE_EXCEEDED: nothing happened in time
    case fp8d::v1::DEADLINE_EXCEEDED: return 4;
    case fp8d::v1::NODE_LOST: return 14;           // UNAVAILABLE
    case fp8d::v1::CONTROLLER_RESTART: return 14;
    case fp8d::v1::RESOURCE_EXHAUSTED: return 8;   // RESOURCE_EXHAUSTED
    case fp8d::v1::WORKER_CRASH:
    case fp8d::v1::NUMERIC:
    case fp8d::v1::INTERNAL_ERROR:
    default: return 13;                            // INTERNAL
  }
}

google::protobuf::Timestamp TimestampFromMs(int64_t ms) {
  return TimeUtil::MillisecondsToTimestamp(ms);
}

int64_t MsFromDuration(const google::protobuf::Duration& d) {
  return TimeUtil::DurationToMilliseconds(d);
}

google::protobuf::Duration DurationFromMs(int64_t ms) {
  return TimeUtil::MillisecondsToDuration(ms);
}

void ApplyProgressEvent(const fp8d::v1::WorkerEvent::Progress& event, fp8d::v1::Progress* progress) {
  progress->set_step(event.step());
  progress->set_total_steps(event.total_steps());
  progress->set_loss(event.loss());
  progress->set_learning_rate(event.lr());
  progress->set_grad_norm(event.grad_norm());
  progress->set_tokens_per_second(event.tokens_per_sec());
  progress->set_mfu(event.mfu());
  progress->set_eta_seconds(event.eta_seconds());
  // Only FP8 recipes report these; absent otherwise (not 0, which would be a real reading).
  if (event.has_fp8_amax_max()) progress->set_fp8_amax_max(event.fp8_amax_max());
  else progress->clear_fp8_amax_max();
  if (event.has_fp8_saturation_fraction()) {
    progress->set_fp8_saturation_fraction(event.fp8_saturation_fraction());
  } else {
    progress->clear_fp8_saturation_fraction();
  }
}

}  // namespace fp8d::core
