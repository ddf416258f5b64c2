// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/job_fields.h"

#include <cmath>
#include <cstdint>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include "daemon/core/job_lifecycle.h"

namespace fp8d::core {

using fp8d::v1::FailureClass;
using fp8d::v1::Job;
using google::protobuf::util::TimeUtil;

namespace {
constexpr char kJobsPrefix[] = "jobs/";
}  // namespace

std::string JobIdOf(const std::string& name) {
  if (name.rfind(kJobsPrefix, 0) == 0) return name.substr(sizeof(kJobsPrefix) - 1);
  return name;
}

std::string AttemptDirOf(const std::string& data_dir, const std::string& name, int attempt) {
  return data_dir + "/jobs/" + JobIdOf(name) + "/attempt-" + std::to_string(attempt);
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
    case fp8d::v1::DEPENDENCY_FAILED: return 9;    // FAILED_PRECONDITION: a dependency did not succeed
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
  // Only FP8 recipes (and MoE models) report these; absent otherwise (not 0, which would be a
  // real reading).
  using P = fp8d::v1::Progress;
  using E = fp8d::v1::WorkerEvent::Progress;
  auto copy_optional = [&](bool (E::*has)() const, double (E::*get)() const,
                           void (P::*set)(double), void (P::*clear)()) {
    if ((event.*has)()) (progress->*set)((event.*get)());
    else (progress->*clear)();
  };
  copy_optional(&E::has_fp8_amax_max, &E::fp8_amax_max, &P::set_fp8_amax_max, &P::clear_fp8_amax_max);
  copy_optional(&E::has_fp8_saturation_fraction, &E::fp8_saturation_fraction,
                &P::set_fp8_saturation_fraction, &P::clear_fp8_saturation_fraction);
  copy_optional(&E::has_moe_load_min, &E::moe_load_min, &P::set_moe_load_min, &P::clear_moe_load_min);
  copy_optional(&E::has_moe_load_max, &E::moe_load_max, &P::set_moe_load_max, &P::clear_moe_load_max);
  copy_optional(&E::has_moe_load_cv, &E::moe_load_cv, &P::set_moe_load_cv, &P::clear_moe_load_cv);
  copy_optional(&E::has_moe_dropped_fraction, &E::moe_dropped_fraction,
                &P::set_moe_dropped_fraction, &P::clear_moe_dropped_fraction);
  copy_optional(&E::has_moe_aux_loss, &E::moe_aux_loss, &P::set_moe_aux_loss, &P::clear_moe_aux_loss);
}

}  // namespace fp8d::core
