#include "daemon/api/job_service.h"

#include <algorithm>
#include <thread>

#include <boost/asio/post.hpp>
#include <google/protobuf/empty.pb.h>

#include "daemon/api/status_mapping.h"
#include "daemon/api/stream_reactors.h"
#include "daemon/api/validation.h"

namespace fp8d::api {

using fp8d::v1::Job;

namespace {

// Finishes a unary call from the manager's callback: serialize the value into gRPC's response
// buffer (alive until Finish) or map the error 1:1.
template <typename T>
auto Responder(grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* response) {
  return [reactor, response](fp8::StatusOr<T> result) {
    if (!result.ok()) {
      reactor->Finish(ToGrpcStatus(result.status()));
      return;
    }
    std::string bytes;
    if (!result->SerializeToString(&bytes)) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INTERNAL, "response did not serialize"));
      return;
    }
    grpc::Slice slice(std::move(bytes));
    *response = grpc::ByteBuffer(&slice, 1);
    reactor->Finish(grpc::Status::OK);
  };
}

size_t WriterThreads(const JobServiceOptions& options) {
  if (options.watch_writer_threads > 0) return static_cast<size_t>(options.watch_writer_threads);
  return std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 2, 8);
}

grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context, const fp8::Status& status) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

JobServiceImpl::JobServiceImpl(boost::asio::io_context& io, core::JobManager* manager,
                               std::shared_ptr<const AuthPolicy> auth, JobServiceOptions options)
    : io_(io), manager_(manager), auth_(std::move(auth)), options_(options),
      readers_(std::make_shared<boost::asio::thread_pool>(options.log_reader_threads)),
      writers_(std::make_shared<boost::asio::thread_pool>(WriterThreads(options))) {}

JobServiceImpl::~JobServiceImpl() { Stop(); }

void JobServiceImpl::Stop() {
  readers_->stop();
  readers_->join();
  writers_->stop();
  writers_->join();
}

fp8::Status JobServiceImpl::Admit(const grpc::CallbackServerContext& context, const char* method,
                                  const fp8::Status& validation) const {
  FP8_RETURN_IF_ERROR(auth_->Authorize(context, method));
  if (!ready_.load()) return fp8::UnavailableError("fp8d is recovering its jobs; retry shortly");
  return validation;
}

grpc::ServerUnaryReactor* JobServiceImpl::CreateJob(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* raw,
                                                    grpc::ByteBuffer* response) {
  fp8d::v1::CreateJobRequest request;
  fp8::Status parsed = ParseRawRequest(*raw, &request);
  fp8::Status admitted = Admit(*context, "CreateJob", parsed.ok() ? ValidateCreateJobRequest(request) : parsed);
  if (!admitted.ok()) return Refuse(context, admitted);
  auto* reactor = context->DefaultReactor();
  NormalizeCreateJobRequest(request);
  boost::asio::post(io_, [this, reactor, response, req = std::move(request)]() mutable {
    manager_->CreateJob(std::move(req), Responder<Job>(reactor, response));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* raw,
                                                 grpc::ByteBuffer* response) {
  fp8d::v1::GetJobRequest request;
  fp8::Status parsed = ParseRawRequest(*raw, &request);
  fp8::Status admitted = Admit(*context, "GetJob", parsed.ok() ? ValidateGetJobRequest(request) : parsed);
  if (!admitted.ok()) return Refuse(context, admitted);
  auto* reactor = context->DefaultReactor();
  boost::asio::post(io_, [this, reactor, response, req = std::move(request)]() mutable {
    manager_->GetJob(std::move(req), Responder<Job>(reactor, response));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response) {
  fp8d::v1::ListJobsRequest req;
  fp8::Status parsed = ParseRawRequest(*raw, &req);
  fp8::Status admitted = Admit(*context, "ListJobs", parsed.ok() ? ValidateListJobsRequest(req) : parsed);
  if (!admitted.ok()) return Refuse(context, admitted);
  auto* reactor = context->DefaultReactor();
  if (req.page_size() == 0) req.set_page_size(50);
  boost::asio::post(io_, [this, reactor, response, req = std::move(req)]() mutable {
    manager_->ListJobs(std::move(req), Responder<fp8d::v1::ListJobsResponse>(reactor, response));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* raw,
                                                    grpc::ByteBuffer* response) {
  fp8d::v1::CancelJobRequest request;
  fp8::Status parsed = ParseRawRequest(*raw, &request);
  fp8::Status admitted = Admit(*context, "CancelJob", parsed.ok() ? ValidateCancelJobRequest(request) : parsed);
  if (!admitted.ok()) return Refuse(context, admitted);
  auto* reactor = context->DefaultReactor();
  boost::asio::post(io_, [this, reactor, response, req = std::move(request)]() mutable {
    manager_->CancelJob(std::move(req), Responder<Job>(reactor, response));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::DeleteJob(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* raw,
                                                    grpc::ByteBuffer* response) {
  fp8d::v1::DeleteJobRequest request;
  fp8::Status parsed = ParseRawRequest(*raw, &request);
  fp8::Status admitted = Admit(*context, "DeleteJob", parsed.ok() ? ValidateDeleteJobRequest(request) : parsed);
  if (!admitted.ok()) return Refuse(context, admitted);
  auto* reactor = context->DefaultReactor();
  boost::asio::post(io_, [this, reactor, response, req = std::move(request)]() mutable {
    manager_->DeleteJob(std::move(req), Responder<google::protobuf::Empty>(reactor, response));
  });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  fp8d::v1::WatchJobRequest request;
  fp8::Status parsed = ParseRawRequest(*raw, &request);
  fp8::Status admitted =
      Admit(*context, "WatchJob", parsed.ok() ? ValidateWatchJobRequest(request) : parsed);
  if (!admitted.ok()) return new FinishedWriteReactor<grpc::ByteBuffer>(ToGrpcStatus(admitted));
  return NewWatchReactor(io_, manager_, writers_, std::move(request), options_.watch_queue_limit);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobServiceImpl::GetJobLogs(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  fp8d::v1::GetJobLogsRequest request;
  fp8::Status parsed = ParseRawRequest(*raw, &request);
  fp8::Status admitted =
      Admit(*context, "GetJobLogs", parsed.ok() ? ValidateGetJobLogsRequest(request) : parsed);
  if (!admitted.ok()) {
    return new FinishedWriteReactor<grpc::ByteBuffer>(ToGrpcStatus(admitted));
  }
  LogStreamOptions log_options;
  log_options.chunk_bytes = options_.log_chunk_bytes;
  log_options.poll_ms = options_.log_poll_ms;
  return NewLogReactor(io_, manager_, readers_, std::move(request), log_options);
}

}  // namespace fp8d::api
