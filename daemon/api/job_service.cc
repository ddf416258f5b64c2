#include "daemon/api/job_service.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <boost/asio/post.hpp>

#include "daemon/api/http_metrics.h"
#include "daemon/api/status_mapping.h"
#include "daemon/api/stream_reactors.h"
#include "daemon/api/validation.h"

namespace fp8d::api {

using fp8d::v1::Job;

namespace {

// Finishes a unary call from the manager's callback: copy the value into gRPC's response
// object (alive until Finish) or map the error 1:1.
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

template <typename T>
auto Responder(grpc::ServerUnaryReactor* reactor, T* response, const char* method,
               Clock::time_point start = Clock::now()) {
  return [reactor, response, method, start](fp8::StatusOr<T> result) {
    RecordGrpcCall(method, result.status().code(), SecondsSince(start));
    if (!result.ok()) {
      reactor->Finish(ToGrpcStatus(result.status()));
      return;
    }
    *response = std::move(result).value();
    reactor->Finish(grpc::Status::OK);
  };
}

size_t WriterThreads(const JobServiceOptions& options) {
  if (options.watch_writer_threads > 0) return static_cast<size_t>(options.watch_writer_threads);
  return std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 2, 8);
}

grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context, const fp8::Status& status,
                                 const char* method) {
  RecordGrpcCall(method, status.code(), 0);
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

fp8::StatusOr<Principal> JobServiceImpl::Admit(const grpc::CallbackServerContext& context,
                                               const char* method,
                                               const fp8::Status& validation) const {
  fp8::StatusOr<Principal> principal = auth_->Authenticate(CallerFromGrpc(context));
  fp8::Status admitted = principal.status();
  if (admitted.ok()) admitted = AuthorizeMethod(*principal, method);
  if (admitted.ok() && !ready_.load()) {
    admitted = fp8::UnavailableError("fp8d is recovering its jobs; retry shortly");
  }
  if (admitted.ok()) admitted = validation;
  if (admitted.ok()) return principal;
  // Refused mutating calls are audited too (accepted ones when they finish).
  if (!IsReadOnlyMethod(method)) {
    AuditLog(principal.ok() ? *principal : Principal{"(unauthenticated)", Role::kViewer, -1}, method,
             "", admitted);
  }
  return admitted;
}

grpc::ServerUnaryReactor* JobServiceImpl::CreateJob(grpc::CallbackServerContext* context,
                                                    const fp8d::v1::CreateJobRequest* request,
                                                    Job* response) {
  auto admitted = Admit(*context, "CreateJob", ValidateCreateJobRequest(*request));
  if (!admitted.ok()) return Refuse(context, admitted.status(), "CreateJob");
  const Principal principal = *admitted;
  const int64_t run_as_uid = RunAsUid(options_.isolation, principal);
  fp8::Status isolated = ValidateJobEnv(request->job());
  if (isolated.ok()) {
    isolated = CheckJobPaths(request->job(), AllowedRoots(options_.isolation, run_as_uid));
  }
  if (!isolated.ok()) {
    AuditLog(principal, "CreateJob", "", isolated);
    return Refuse(context, isolated, "CreateJob");
  }
  auto* reactor = context->DefaultReactor();
  fp8d::v1::CreateJobRequest normalized = *request;
  NormalizeCreateJobRequest(normalized);
  normalized.mutable_job()->set_owner(principal.name);
  normalized.mutable_job()->set_run_as_uid(run_as_uid);
  auto respond = Responder(reactor, response, "CreateJob");
  boost::asio::post(io_, [this, respond, principal, req = std::move(normalized)]() mutable {
    manager_->CreateJob(std::move(req), [respond, principal](fp8::StatusOr<Job> job) {
      AuditLog(principal, "CreateJob", job.ok() ? job->name() : "", job.status());
      respond(std::move(job));
    });
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                 const fp8d::v1::GetJobRequest* request,
                                                 Job* response) {
  auto admitted = Admit(*context, "GetJob", ValidateGetJobRequest(*request));
  if (!admitted.ok()) return Refuse(context, admitted.status(), "GetJob");
  auto* reactor = context->DefaultReactor();
  boost::asio::post(io_, [this, reactor, response, req = *request]() mutable {
    manager_->GetJob(std::move(req), Responder(reactor, response, "GetJob"));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const fp8d::v1::ListJobsRequest* request,
                                                   fp8d::v1::ListJobsResponse* response) {
  auto admitted = Admit(*context, "ListJobs", ValidateListJobsRequest(*request));
  if (!admitted.ok()) return Refuse(context, admitted.status(), "ListJobs");
  auto* reactor = context->DefaultReactor();
  fp8d::v1::ListJobsRequest req = *request;
  if (req.page_size() == 0) req.set_page_size(50);
  boost::asio::post(io_, [this, reactor, response, req = std::move(req)]() mutable {
    manager_->ListJobs(std::move(req), Responder(reactor, response, "ListJobs"));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                    const fp8d::v1::CancelJobRequest* request,
                                                    Job* response) {
  auto admitted = Admit(*context, "CancelJob", ValidateCancelJobRequest(*request));
  if (!admitted.ok()) return Refuse(context, admitted.status(), "CancelJob");
  auto* reactor = context->DefaultReactor();
  // The owner never changes after create, so checking it first and cancelling next is safe.
  auto respond = Responder(reactor, response, "CancelJob");
  boost::asio::post(io_, [this, respond, principal = *admitted, req = *request]() mutable {
    fp8d::v1::GetJobRequest get;
    get.set_name(req.name());
    manager_->GetJob(std::move(get), [this, respond, principal,
                                      req = std::move(req)](fp8::StatusOr<Job> job) mutable {
      fp8::Status allowed = job.ok() ? AuthorizeOwner(principal, job->owner(), "CancelJob", req.name())
                                     : job.status();
      if (!allowed.ok()) {
        AuditLog(principal, "CancelJob", req.name(), allowed);
        respond(fp8::StatusOr<Job>(allowed));
        return;
      }
      const std::string name = req.name();
      manager_->CancelJob(std::move(req), [respond, principal, name](fp8::StatusOr<Job> result) {
        AuditLog(principal, "CancelJob", name, result.status());
        respond(std::move(result));
      });
    });
  });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  fp8d::v1::WatchJobRequest request;
  fp8::Status parsed = ParseRawRequest(*raw, &request);
  auto admitted =
      Admit(*context, "WatchJob", parsed.ok() ? ValidateWatchJobRequest(request) : parsed);
  if (!admitted.ok()) {
    return new FinishedWriteReactor<grpc::ByteBuffer>(ToGrpcStatus(admitted.status()));
  }
  return NewWatchReactor(io_, manager_, writers_, std::move(request), options_.watch_queue_limit);
}

grpc::ServerWriteReactor<fp8d::v1::LogChunk>* JobServiceImpl::GetJobLogs(
    grpc::CallbackServerContext* context, const fp8d::v1::GetJobLogsRequest* request) {
  auto admitted = Admit(*context, "GetJobLogs", ValidateGetJobLogsRequest(*request));
  if (!admitted.ok()) {
    return new FinishedWriteReactor<fp8d::v1::LogChunk>(ToGrpcStatus(admitted.status()));
  }
  LogStreamOptions log_options;
  log_options.chunk_bytes = options_.log_chunk_bytes;
  log_options.poll_ms = options_.log_poll_ms;
  return NewLogReactor(io_, manager_, readers_, *request, log_options);
}

}  // namespace fp8d::api
