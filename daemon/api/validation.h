// SPDX-License-Identifier: Apache-2.0
// Request validation for JobService (docs/design.md §3). Every check names the offending
// field with its full path ("job.train.training.learning_rate: must be in (0, 10]") so a client
// can point at the line of its job file. The spec's own checks and defaults are fp8_jobspec's
// (jobspec/), the ones the worker runs; the filesystem checks of paths are jobspec/paths.h's,
// run by the caller as the job's owner. Validation touches no state and no file, callable from
// any thread, so the gRPC reactors run it before posting anything to the manager.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "fp8d/v1/job_service.pb.h"

namespace fp8d::api {

// Limits shared with fp8ctl and the tests (they name the bounds in their messages).
inline constexpr int kMaxRanks = 1024;
inline constexpr size_t kMaxRequestIdLength = 128;
inline constexpr size_t kMaxDisplayNameLength = 256;
inline constexpr int kMaxLabels = 64;
inline constexpr size_t kMaxLabelKeyLength = 63;
inline constexpr size_t kMaxLabelValueLength = 256;
inline constexpr int kMaxPageSize = 1000;
inline constexpr int kMaxAttempts = 100;
inline constexpr int kMinPriority = -1000;
inline constexpr int kMaxPriority = 1000;

// CreateJob: the job body and request_id. Output-only fields are ignored (daemon/core/new_job.h clears them).
// The spec is checked as it will be stored, with jobspec's defaults: this form writes them
// into request->job() itself (jobspec::ApplySpecDefaults, which PrepareNewJob applies again to
// the same effect: it is idempotent), so a create copies no spec; the const form, into a copy.
fp8::Status ValidateCreateJobRequest(fp8d::v1::CreateJobRequest* request);
fp8::Status ValidateCreateJobRequest(const fp8d::v1::CreateJobRequest& request);

fp8::Status ValidateGetJobRequest(const fp8d::v1::GetJobRequest& request);
fp8::Status ValidateListJobsRequest(const fp8d::v1::ListJobsRequest& request);
fp8::Status ValidateWatchJobRequest(const fp8d::v1::WatchJobRequest& request);
fp8::Status ValidateCancelJobRequest(const fp8d::v1::CancelJobRequest& request);
fp8::Status ValidateGetJobLogsRequest(const fp8d::v1::GetJobLogsRequest& request);
fp8::Status ValidateDeleteJobRequest(const fp8d::v1::DeleteJobRequest& request);

// `jobs/<id>` where id is 1..128 of [A-Za-z0-9._-]. `field` names the field in the message.
fp8::Status ValidateJobName(std::string_view name, std::string_view field);

}  // namespace fp8d::api
