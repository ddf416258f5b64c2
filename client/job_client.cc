// SPDX-License-Identifier: Apache-2.0
#include "client/job_client.h"

#include <arpa/inet.h>

#include <condition_variable>
#include <fstream>
#include <sstream>
#include <mutex>
#include <thread>

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

namespace fp8d::client {

Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return fp8::OkStatus();
  return Status(static_cast<fp8::StatusCode>(static_cast<int>(status.error_code())),
                status.error_message());
}

std::string NormalizeJobName(const std::string& job) {
  if (job.rfind("jobs/", 0) == 0) return job;
  return "jobs/" + job;
}

std::string ChannelTarget(const std::string& address) {
  if (address.find("://") != std::string::npos || address.rfind("unix:", 0) == 0 ||
      address.rfind("ipv4:", 0) == 0 || address.rfind("ipv6:", 0) == 0 || address.rfind("dns:", 0) == 0) {
    return address;
  }
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    in6_addr v6{};
    if (close != std::string::npos &&
        inet_pton(AF_INET6, address.substr(1, close - 1).c_str(), &v6) == 1) {
      return "ipv6:" + address;
    }
    return address;
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return address;
  in_addr v4{};
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &v4) == 1) return "ipv4:" + address;
  return address;
}

namespace {

StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return fp8::InvalidArgumentError(std::string(what) + " " + path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ConnectionOptions& options) {
  if (!options.tls && options.ca_file.empty() && options.client_cert.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.ca_file.empty()) {
    FP8_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(options.ca_file, "--tls-ca"));
  }
  if (!options.client_cert.empty()) {
    FP8_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(options.client_cert, "client-cert"));
    FP8_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(options.client_key, "client-key"));
  }
  return grpc::SslCredentials(ssl);
}

JobClient::JobClient(const ConnectionOptions& options) : token_(options.token) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  if (!options.server_name.empty()) args.SetSslTargetNameOverride(options.server_name);
  auto creds = MakeChannelCredentials(options);
  // Without TLS a literal address skips the resolver; with TLS the target stays as given, since
  // it also names the host the certificate is checked against.
  const bool tls = options.tls || !options.ca_file.empty() || !options.client_cert.empty();
  // An unreadable file leaves a channel whose calls fail UNAVAILABLE; fp8ctl checks first.
  channel_ = grpc::CreateCustomChannel(tls ? options.address : ChannelTarget(options.address),
                                       creds.ok() ? *creds : grpc::InsecureChannelCredentials(), args);
  stub_ = fp8d::v1::JobService::NewStub(channel_);
}

void JobClient::AddToken(grpc::ClientContext* context) const {
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
}

JobClient::JobClient(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // Each JobClient gets its own connection (benchmarks run many clients in one process).
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  channel_ = grpc::CreateCustomChannel(ChannelTarget(address), grpc::InsecureChannelCredentials(), args);
  stub_ = fp8d::v1::JobService::NewStub(channel_);
}

void JobClient::SetDeadline(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() + deadline_);
}

StatusOr<fp8d::v1::Job> JobClient::CreateJob(const fp8d::v1::Job& job, const std::string& request_id) {
  fp8d::v1::CreateJobRequest request;
  *request.mutable_job() = job;
  request.set_request_id(request_id);
  grpc::ClientContext context;
  AddToken(&context);
  SetDeadline(&context);
  fp8d::v1::Job response;
  grpc::Status st = stub_->CreateJob(&context, request, &response);
  if (!st.ok()) return FromGrpc(st);
  return response;
}

StatusOr<fp8d::v1::Job> JobClient::GetJob(const std::string& name, fp8d::v1::JobView view) {
  fp8d::v1::GetJobRequest request;
  request.set_name(name);
  request.set_view(view);
  grpc::ClientContext context;
  AddToken(&context);
  SetDeadline(&context);
  fp8d::v1::Job response;
  grpc::Status st = stub_->GetJob(&context, request, &response);
  if (!st.ok()) return FromGrpc(st);
  return response;
}

StatusOr<fp8d::v1::ListJobsResponse> JobClient::ListJobs(const fp8d::v1::ListJobsRequest& request) {
  grpc::ClientContext context;
  AddToken(&context);
  SetDeadline(&context);
  fp8d::v1::ListJobsResponse response;
  grpc::Status st = stub_->ListJobs(&context, request, &response);
  if (!st.ok()) return FromGrpc(st);
  return response;
}

StatusOr<fp8d::v1::Job> JobClient::CancelJob(const std::string& name) {
  fp8d::v1::CancelJobRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  AddToken(&context);
  SetDeadline(&context);
  fp8d::v1::Job response;
  grpc::Status st = stub_->CancelJob(&context, request, &response);
  if (!st.ok()) return FromGrpc(st);
  return response;
}

Status JobClient::DeleteJob(const std::string& name) {
  fp8d::v1::DeleteJobRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  SetDeadline(&context);
  AddToken(&context);
  google::protobuf::Empty response;
  return FromGrpc(stub_->DeleteJob(&context, request, &response));
}

StatusOr<fp8d::v1::ListQueuesResponse> JobClient::ListQueues() {
  grpc::ClientContext context;
  SetDeadline(&context);
  AddToken(&context);
  fp8d::v1::ListQueuesResponse response;
  grpc::Status st = stub_->ListQueues(&context, fp8d::v1::ListQueuesRequest(), &response);
  if (!st.ok()) return FromGrpc(st);
  return response;
}

StatusOr<fp8d::v1::GetUsageResponse> JobClient::GetUsage(const fp8d::v1::GetUsageRequest& request) {
  grpc::ClientContext context;
  SetDeadline(&context);
  AddToken(&context);
  fp8d::v1::GetUsageResponse response;
  grpc::Status st = stub_->GetUsage(&context, request, &response);
  if (!st.ok()) return FromGrpc(st);
  return response;
}

StatusOr<fp8d::v1::ServerInfo> JobClient::GetServerInfo() {
  grpc::ClientContext context;
  SetDeadline(&context);
  AddToken(&context);
  fp8d::v1::ServerInfo response;
  grpc::Status st = stub_->GetServerInfo(&context, fp8d::v1::GetServerInfoRequest(), &response);
  if (!st.ok()) return FromGrpc(st);
  return response;
}

Status JobClient::WatchJob(const std::string& name, int64_t since_version,
                           const std::function<bool(const fp8d::v1::Job&)>& on_update,
                           std::chrono::steady_clock::time_point deadline) {
  fp8d::v1::WatchJobRequest request;
  request.set_name(name);
  request.set_since_version(since_version);
  grpc::ClientContext context;
  AddToken(&context);
  if (deadline != std::chrono::steady_clock::time_point::max()) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::system_clock::duration>(
                             deadline - std::chrono::steady_clock::now()));
  }
  auto reader = stub_->WatchJob(&context, request);
  fp8d::v1::WatchJobResponse response;
  bool stopped = false;
  while (reader->Read(&response)) {
    if (!on_update(response.job())) {
      stopped = true;
      context.TryCancel();
      break;
    }
  }
  grpc::Status st = reader->Finish();
  if (stopped) return Status(fp8::StatusCode::kCancelled, "stopped by the caller");
  return FromGrpc(st);
}

Status JobClient::GetJobLogs(const fp8d::v1::GetJobLogsRequest& request,
                             const std::function<void(const std::string&)>& on_data) {
  grpc::ClientContext context;
  AddToken(&context);
  auto reader = stub_->GetJobLogs(&context, request);
  fp8d::v1::LogChunk chunk;
  while (reader->Read(&chunk)) on_data(chunk.data());
  return FromGrpc(reader->Finish());
}

StatusOr<bool> JobClient::IsServing(std::chrono::milliseconds timeout) {
  // grpc.health.v1.Health/Check through the generic stub: HealthCheckRequest{service: ""} is
  // empty on the wire; the response is field 1 (status) as a varint, SERVING = 1.
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  AddToken(&context);
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::ByteBuffer request_buffer;  // empty message
  grpc::Slice empty("", 0);
  request_buffer = grpc::ByteBuffer(&empty, 1);
  grpc::ByteBuffer response_buffer;
  grpc::Status result;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request_buffer,
                    &response_buffer, [&](grpc::Status st) {
                      std::lock_guard<std::mutex> lock(mu);
                      result = st;
                      done = true;
                      cv.notify_one();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!result.ok()) return FromGrpc(result);
  std::vector<grpc::Slice> slices;
  (void)response_buffer.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes.size() >= 2 && bytes[0] == 0x08 && bytes[1] == 0x01;
}

bool JobClient::WaitForServing(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    auto serving = IsServing(std::chrono::milliseconds(1000));
    if (serving.ok() && *serving) return true;
    // A health check costs the server next to nothing: poll often, so a caller that times
    // the start-up (bench/control_plane) is not off by a long sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace fp8d::client
