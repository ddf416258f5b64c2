// Pure helpers the manager uses to fill, hash and translate job fields: defaults for a new
// job, the idempotency hash, the worker's spec.json, and the mapping from worker events
// (worker/common/events.h) to Job.progress / Job.checkpoint / Job.result. No I/O, no state.
#pragma once

#include <cstdint>
#include <string>

#include <google/protobuf/duration.pb.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/timestamp.pb.h>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"
#include "fp8d/v1/worker_event.pb.h"

namespace fp8d::core {

// A job as the store should first see it: kind from the spec oneof, defaults filled in
// (ranks 1; retry 3 attempts, 1 s .. 60 s backoff, x2, jitter 0.2; heartbeat 30 s, progress
// 300 s), output-only fields cleared, state QUEUED, and a relative output_dir made absolute
// against `cwd` (the daemon's working directory when the job was created, because the worker
// runs elsewhere). INVALID_ARGUMENT when neither spec is set.
fp8::Status PrepareNewJob(fp8d::v1::Job* job, const std::string& cwd);
// The job's output_dir, normalized, as the key of the active-output-dir index ("" if unset).
std::string OutputDirKey(const fp8d::v1::Job& job);

// Hash of the deterministic serialization of the job exactly as the client sent it: the
// same request_id with a different body must be told apart (docs/design.md §3).
std::string RequestHash(const fp8d::v1::Job& job);

// "jobs/<id>" → "<id>"; a string without the prefix is returned unchanged.
std::string JobIdOf(const std::string& name);

// The worker subcommand ("train" | "calibrate") and spec.json (snake_case field names) of the
// job. A train job without output_dir gets `default_output_dir`.
struct WorkerSpec {
  std::string kind;
  std::string json;
  std::string output_dir;  // absolute; empty for calibrate jobs without one
};
fp8::StatusOr<WorkerSpec> MakeWorkerSpec(const fp8d::v1::Job& job,
                                         const std::string& default_output_dir);

// google.rpc code a job error carries for each failure class (JobError.code).
int32_t RpcCodeFor(fp8d::v1::FailureClass failure);

google::protobuf::Timestamp TimestampFromMs(int64_t ms);
int64_t MsFromDuration(const google::protobuf::Duration& d);
google::protobuf::Duration DurationFromMs(int64_t ms);

// Copies the figures of a worker's `progress` event into the job's Progress.
void ApplyProgressEvent(const fp8d::v1::WorkerEvent::Progress& event, fp8d::v1::Progress* progress);

}  // namespace fp8d::core
