// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: every JobService request message through the daemon's validators
// (daemon/api/validation.cc) and, for a valid CreateJob, the one preparation of a new job
// (daemon/core/new_job.cc). The first byte picks the method; the rest is parsed as that
// method's request, the way the raw handlers parse the bytes gRPC hands them. Validation must
// answer OK or INVALID_ARGUMENT with a message, and never crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "daemon/api/validation.h"
#include "daemon/core/new_job.h"

namespace {

void Check(const fp8::Status& st) {
  if (st.ok()) return;
  if (st.code() != fp8::StatusCode::kInvalidArgument || st.message().empty()) std::abort();
}

template <typename Request>
bool Parse(const uint8_t* data, size_t size, Request* request) {
  return request->ParseFromArray(data, static_cast<int>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t method = data[0] % 7;
  ++data;
  --size;
  using namespace fp8d;
  switch (method) {
    case 0: {
      v1::CreateJobRequest r;
      if (!Parse(data, size, &r)) return 0;
      const fp8::Status st = api::ValidateCreateJobRequest(r);
      Check(st);
      if (st.ok()) {
        // A valid request is always prepared, stays valid, and preparing it again changes
        // nothing.
        auto hash = core::PrepareNewJob(r.mutable_job(), "/cwd", 1764600000000);
        if (!hash.ok()) std::abort();
        Check(api::ValidateCreateJobRequest(r));
        v1::Job again = r.job();
        if (!core::PrepareNewJob(&again, "/cwd", 1764600000000).ok() ||
            again.SerializeAsString() != r.job().SerializeAsString()) {
          std::abort();
        }
      }
      break;
    }
    case 1: {
      v1::GetJobRequest r;
      if (Parse(data, size, &r)) Check(api::ValidateGetJobRequest(r));
      break;
    }
    case 2: {
      v1::ListJobsRequest r;
      if (Parse(data, size, &r)) Check(api::ValidateListJobsRequest(r));
      break;
    }
    case 3: {
      v1::WatchJobRequest r;
      if (Parse(data, size, &r)) Check(api::ValidateWatchJobRequest(r));
      break;
    }
    case 4: {
      v1::CancelJobRequest r;
      if (Parse(data, size, &r)) Check(api::ValidateCancelJobRequest(r));
      break;
    }
    case 5: {
      v1::GetJobLogsRequest r;
      if (Parse(data, size, &r)) Check(api::ValidateGetJobLogsRequest(r));
      break;
    }
    case 6: {
      v1::DeleteJobRequest r;
      if (Parse(data, size, &r)) Check(api::ValidateDeleteJobRequest(r));
      break;
    }
  }
  return 0;
}
