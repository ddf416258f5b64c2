// SPDX-License-Identifier: Apache-2.0
// Pure helpers the manager uses to translate job fields: names and folders, the worker's
// spec.json, and the mapping from worker events
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

// "jobs/<id>" → "<id>"; a string without the prefix is returned unchanged.
std::string JobIdOf(const std::string& name);
// <data dir>/jobs/<id>/attempt-<n>: where the launcher keeps an attempt's files.
std::string AttemptDirOf(const std::string& data_dir, const std::string& name, int attempt);

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
