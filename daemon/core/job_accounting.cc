// SPDX-License-Identifier: Apache-2.0
// GetUsage: the stored attempts are listed and summed on the store thread (usage.h), so a
// long history costs io nothing.
#include <google/protobuf/util/time_util.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_manager_impl.h"
#include "daemon/core/usage.h"

namespace fp8d::core {

void JobManagerImpl::GetUsage(fp8d::v1::GetUsageRequest request,
                              std::function<void(StatusOr<fp8d::v1::GetUsageResponse>)> done) {
  const int64_t since_ms =
      request.has_since() ? google::protobuf::util::TimeUtil::TimestampToMilliseconds(request.since()) : 0;
  const int64_t now_ms = NowMs();
  store_thread_->Run<StatusOr<fp8d::v1::GetUsageResponse>>(
      [request = std::move(request), since_ms, now_ms](store::JobStore& s) -> StatusOr<fp8d::v1::GetUsageResponse> {
        FP8_ASSIGN_OR_RETURN(auto attempts, s.ListAttemptUsage(since_ms));
        FP8_ASSIGN_OR_RETURN(auto rows, SumUsage(attempts, since_ms, now_ms, request.by()));
        fp8d::v1::GetUsageResponse response;
        for (auto& row : rows) *response.add_rows() = std::move(row);
        if (request.has_since()) *response.mutable_since() = request.since();
        *response.mutable_until() = TimestampFromMs(now_ms);
        return response;
      },
      std::move(done));
}

}  // namespace fp8d::core
