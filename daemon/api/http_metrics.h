// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics (prometheus-cpp). Gauges of the jobs (by state, each running job's
// progress) are computed from the jobs at each scrape, so they always agree with GetJob; the
// job counters and histograms come from the manager (core::JobCounters), which counts them as
// transitions commit, so they never go down when jobs are deleted; the gRPC and store figures
// are counted as calls finish. Also fp8d_build_info, the capacity gauges and the process_*
// metrics of every Prometheus client.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/core/job_counters.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::api {

// Counts one finished gRPC call: fp8d_grpc_requests_total{method,code} and
// fp8d_grpc_request_duration_seconds{method}. Thread-safe.
void RecordGrpcCall(std::string_view method, fp8::StatusCode code, double seconds);

// Observes one store write transaction: fp8d_store_commit_seconds. Thread-safe; the server
// hands it to store::SetCommitObserver.
void RecordStoreCommit(double seconds);

// The label that names a job in the per-job gauges. Not "job": Prometheus sets that to the
// scrape job's name and would rename ours to exported_job.
inline constexpr const char* kJobLabel = "fp8d_job";

// The text exposition format (0.0.4) of everything: the gauges of `jobs`, the manager's
// `figures`, the gRPC and store figures, build info and the process metrics.
std::string RenderMetrics(const std::vector<fp8d::v1::Job>& jobs, const core::ManagerFigures& figures);

}  // namespace fp8d::api
