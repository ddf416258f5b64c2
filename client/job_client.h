// SPDX-License-Identifier: Apache-2.0
// fp8_client: a small synchronous client for fp8d's JobService and health service. fp8ctl and
// the integration tests use it; it holds no server logic, only the RPCs and their status.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>

#include "common/status.h"
#include "fp8d/v1/job_service.grpc.pb.h"

namespace fp8d::client {

using fp8::Status;
using fp8::StatusOr;

// grpc::Status → fp8::Status (the codes are the same numbers).
Status FromGrpc(const grpc::Status& status);

// gRPC's target for an address: a literal IPv4/IPv6 "host:port" gets the ipv4:/ipv6: scheme,
// so no DNS resolver (and its threads) starts for it; names and unix: pass through.
std::string ChannelTarget(const std::string& address);

// "jobs/<id>" stays as is; "<id>" becomes "jobs/<id>".
std::string NormalizeJobName(const std::string& job);

// How to reach fp8d: the address, and for a remote one TLS (CA, optional client certificate for
// mTLS) and a bearer token. Files are read when the client is made.
struct ConnectionOptions {
  std::string address;
  bool tls = false;            // implied by ca_file or client_cert
  std::string ca_file;         // PEM roots; empty with tls: the system roots
  std::string client_cert;     // PEM, for mutual TLS
  std::string client_key;
  std::string token;           // sent as "authorization: Bearer <token>"
  std::string server_name;     // TLS name to verify instead of the address's host
};

// The channel credentials for `options`: INVALID_ARGUMENT naming an unreadable file.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ConnectionOptions& options);

class JobClient {
 public:
  explicit JobClient(const std::string& address);
  // INVALID_ARGUMENT-worthy problems (unreadable files) surface as a channel that fails its
  // calls; use MakeJobClient to get them as a status instead.
  explicit JobClient(const ConnectionOptions& options);

  StatusOr<fp8d::v1::Job> CreateJob(const fp8d::v1::Job& job, const std::string& request_id = "");
  StatusOr<fp8d::v1::Job> GetJob(const std::string& name,
                                 fp8d::v1::JobView view = fp8d::v1::JOB_VIEW_BASIC);
  StatusOr<fp8d::v1::ListJobsResponse> ListJobs(const fp8d::v1::ListJobsRequest& request);
  StatusOr<fp8d::v1::Job> CancelJob(const std::string& name);
  Status DeleteJob(const std::string& name);
  StatusOr<fp8d::v1::ListQueuesResponse> ListQueues();
  StatusOr<fp8d::v1::GetUsageResponse> GetUsage(const fp8d::v1::GetUsageRequest& request);
  StatusOr<fp8d::v1::ServerInfo> GetServerInfo();

  // Streams WatchJob until the stream ends or `on_update` returns false. Returns the stream's
  // final status (OK when the job reached a terminal state, CANCELLED when stopped by the
  // callback). `since_version` resumes after a break.
  // `deadline` ends the stream with DEADLINE_EXCEEDED (fp8ctl wait --timeout).
  Status WatchJob(const std::string& name, int64_t since_version,
                  const std::function<bool(const fp8d::v1::Job&)>& on_update,
                  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  // Streams a rank's log; `on_data` gets each chunk.
  Status GetJobLogs(const fp8d::v1::GetJobLogsRequest& request,
                    const std::function<void(const std::string&)>& on_data);

  // grpc.health.v1 Check for the whole server: true when SERVING.
  StatusOr<bool> IsServing(std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));
  // Polls IsServing until true or `timeout`.
  bool WaitForServing(std::chrono::milliseconds timeout);

  // Per-call deadline for unary calls (default 30 s).
  void set_deadline(std::chrono::milliseconds deadline) { deadline_ = deadline; }
  fp8d::v1::JobService::Stub* stub() { return stub_.get(); }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  void SetDeadline(grpc::ClientContext* context) const;
  void AddToken(grpc::ClientContext* context) const;
  std::string token_;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<fp8d::v1::JobService::Stub> stub_;
  std::chrono::milliseconds deadline_{30000};
};

}  // namespace fp8d::client
