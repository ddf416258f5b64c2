// Prometheus metrics (prometheus-cpp): the job figures are computed from the jobs at each
// scrape (so they always agree with GetJob), the gRPC call figures are counted as calls finish.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::api {

// Counts one finished gRPC call: fp8d_grpc_requests_total{method,code} and
// fp8d_grpc_request_duration_seconds{method}. Thread-safe.
void RecordGrpcCall(std::string_view method, fp8::StatusCode code, double seconds);

// Observes one store write transaction: fp8d_store_commit_seconds. Thread-safe; the server
// hands it to store::SetCommitObserver.
void RecordStoreCommit(double seconds);

// The text exposition format (0.0.4) of the job metrics for `jobs` plus the gRPC counters.
std::string RenderMetrics(const std::vector<fp8d::v1::Job>& jobs);

}  // namespace fp8d::api
