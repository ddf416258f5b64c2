// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/job_service.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <boost/asio/post.hpp>
#include <google/protobuf/empty.pb.h>

#include "daemon/api/http_metrics.h"
#include "daemon/api/job_env.h"
#include "daemon/api/queue_admission.h"
#include "daemon/api/status_mapping.h"
#include "daemon/api/stream_reactors.h"
#include "daemon/api/validation.h"
#include "jobspec/paths.h"

namespace fp8d::api {

using fp8d::v1::Job;

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Finishes a unary call from the manager's callback: serialize the value into gRPC's response
// buffer (alive until Finish) or map the error 1:1.
template <typename T>
auto Responder(grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* response, const char* method,
               Clock::time_point start = Clock::now()) {
  return [reactor, response, method, start](fp8::StatusOr<T> result) {
    RecordGrpcCall(method, result.status().code(), SecondsSince(start));
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

grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context, const fp8::Status& status,
                                 const char* method) {
  RecordGrpcCall(method, status.code(), 0);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// Any caller may read every job (GetJob), so the rule that limits depends_on is the owner rule
// of cancel and delete: a caller that is not an admin depends only on its own jobs. Each
// dependency is read through GetJob (on io: the cache, else the store); one that does not
// exist is left to the manager's check, which names the field as well. INVALID_ARGUMENT naming
// the first entry (in depends_on order) of another owner.
void CheckDependencyOwners(core::JobManager* manager, const Principal& principal, const Job& job,
                           std::function<void(fp8::Status)> then) {
  if (principal.role == Role::kAdmin || job.depends_on_size() == 0) return then(fp8::OkStatus());
  struct Pending {
    std::vector<fp8::Status> results;
    size_t left;
    std::function<void(fp8::Status)> then;
  };
  const size_t n = static_cast<size_t>(job.depends_on_size());
  auto pending = std::make_shared<Pending>(Pending{std::vector<fp8::Status>(n), n, std::move(then)});
  for (size_t i = 0; i < n; ++i) {
    const std::string& name = job.depends_on(static_cast<int>(i));
    fp8d::v1::GetJobRequest get;
    get.set_name(name);
    manager->GetJob(std::move(get), [pending, principal, i, name](fp8::StatusOr<Job> dep) {
      fp8::Status& result = pending->results[i];
      if (dep.ok()) {
        if (!AuthorizeOwner(principal, dep->owner(), "CreateJob", name).ok()) {
          result = fp8::InvalidArgumentError("job.depends_on[" + std::to_string(i) + "]: " + name +
                                             " is owned by " + dep->owner() +
                                             "; only its owner or an admin may depend on it");
        }
      } else if (dep.status().code() != fp8::StatusCode::kNotFound) {
        result = dep.status();
      }
      if (--pending->left > 0) return;
      for (const fp8::Status& st : pending->results) {
        if (!st.ok()) return pending->then(st);
      }
      pending->then(fp8::OkStatus());
    });
  }
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
                                                    const grpc::ByteBuffer* raw,
                                                    grpc::ByteBuffer* response) {
  fp8d::v1::CreateJobRequest parsed_request;
  const fp8::Status parsed = ParseRawRequest(*raw, &parsed_request);
  const fp8d::v1::CreateJobRequest* request = &parsed_request;
  // Validation fills in the spec's defaults: what is stored is what was checked.
  auto admitted = Admit(*context, "CreateJob", parsed.ok() ? ValidateCreateJobRequest(&parsed_request) : parsed);
  if (!admitted.ok()) return Refuse(context, admitted.status(), "CreateJob");
  const Principal principal = *admitted;
  const fp8::StatusOr<int64_t> run_as = RunAsUid(options_.isolation, principal);
  const int64_t run_as_uid = run_as.ok() ? *run_as : -1;
  fp8::Status isolated = run_as.status();
  if (isolated.ok()) isolated = ValidateJobEnv(request->job(), options_.isolation.job_env_allow);
  const std::vector<std::string> roots = AllowedRoots(options_.isolation, run_as_uid);
  fp8::jobspec::ResolvedPaths resolved;
  if (isolated.ok()) isolated = CheckJobPaths(request->job(), roots, run_as_uid, &resolved);
  if (isolated.ok()) isolated = AdmitToQueue(options_.queues, principal.name, parsed_request.mutable_job());
  if (!isolated.ok()) {
    AuditLog(principal, "CreateJob", "", isolated);
    return Refuse(context, isolated, "CreateJob");
  }
  auto* reactor = context->DefaultReactor();
  // The manager prepares the rest of the new job (daemon/core/new_job.h).
  fp8d::v1::CreateJobRequest normalized = std::move(parsed_request);
  normalized.mutable_job()->set_owner(principal.name);
  normalized.mutable_job()->set_run_as_uid(run_as_uid);
  normalized.mutable_job()->set_request_id(normalized.request_id());
  // The worker checks its paths again, against the same roots, before it opens them.
  fp8::jobspec::SetAllowedRoots(normalized.mutable_job(), roots);
  auto respond = Responder<Job>(reactor, response, "CreateJob");
  // The output-dir admission keys on the output_dir as resolved here (JobManager::CreateJob).
  boost::asio::post(io_, [this, respond, principal, req = std::move(normalized),
                          key = std::move(resolved.output_dir)]() mutable {
    auto create = [this, respond, principal](fp8d::v1::CreateJobRequest req, std::optional<std::string> key) {
      manager_->CreateJob(std::move(req), std::move(key), [respond, principal](fp8::StatusOr<Job> job) {
        AuditLog(principal, "CreateJob", job.ok() ? job->name() : "", job.status());
        respond(std::move(job));
      });
    };
    if (req.job().depends_on_size() == 0) return create(std::move(req), std::move(key));
    const Job job = req.job();
    CheckDependencyOwners(manager_, principal, job,
                          [create, respond, principal, req = std::move(req), key = std::move(key)](fp8::Status owners) mutable {
                            if (!owners.ok()) {
                              AuditLog(principal, "CreateJob", "", owners);
                              return respond(owners);
                            }
                            create(std::move(req), std::move(key));
                          });
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* raw,
                                                 grpc::ByteBuffer* response) {
  fp8d::v1::GetJobRequest request;
  const fp8::Status parsed = ParseRawRequest(*raw, &request);
  auto admitted = Admit(*context, "GetJob", parsed.ok() ? ValidateGetJobRequest(request) : parsed);
  if (!admitted.ok()) return Refuse(context, admitted.status(), "GetJob");
  auto* reactor = context->DefaultReactor();
  boost::asio::post(io_, [this, reactor, response, req = std::move(request)]() mutable {
    manager_->GetJob(std::move(req), Responder<Job>(reactor, response, "GetJob"));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response) {
  fp8d::v1::ListJobsRequest req;
  const fp8::Status parsed = ParseRawRequest(*raw, &req);
  auto admitted = Admit(*context, "ListJobs", parsed.ok() ? ValidateListJobsRequest(req) : parsed);
  if (!admitted.ok()) return Refuse(context, admitted.status(), "ListJobs");
  auto* reactor = context->DefaultReactor();
  if (req.page_size() == 0) req.set_page_size(50);
  if (req.owner() == "me") req.set_owner(admitted->name);
  boost::asio::post(io_, [this, reactor, response, req = std::move(req)]() mutable {
    manager_->ListJobs(std::move(req), Responder<fp8d::v1::ListJobsResponse>(reactor, response, "ListJobs"));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* raw,
                                                    grpc::ByteBuffer* response) {
  fp8d::v1::CancelJobRequest request;
  const fp8::Status parsed = ParseRawRequest(*raw, &request);
  auto admitted = Admit(*context, "CancelJob", parsed.ok() ? ValidateCancelJobRequest(request) : parsed);
  if (!admitted.ok()) return Refuse(context, admitted.status(), "CancelJob");
  auto* reactor = context->DefaultReactor();
  // The owner never changes after create, so checking it first and cancelling next is safe.
  auto respond = Responder<Job>(reactor, response, "CancelJob");
  boost::asio::post(io_, [this, respond, principal = *admitted, req = std::move(request)]() mutable {
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

grpc::ServerUnaryReactor* JobServiceImpl::DeleteJob(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* raw,
                                                    grpc::ByteBuffer* response) {
  fp8d::v1::DeleteJobRequest request;
  const fp8::Status parsed = ParseRawRequest(*raw, &request);
  auto admitted = Admit(*context, "DeleteJob", parsed.ok() ? ValidateDeleteJobRequest(request) : parsed);
  if (!admitted.ok()) return Refuse(context, admitted.status(), "DeleteJob");
  auto* reactor = context->DefaultReactor();
  // Only the owner (or an admin) deletes a job, as for cancel.
  auto respond = Responder<google::protobuf::Empty>(reactor, response, "DeleteJob");
  boost::asio::post(io_, [this, respond, principal = *admitted, req = std::move(request)]() mutable {
    fp8d::v1::GetJobRequest get;
    get.set_name(req.name());
    manager_->GetJob(std::move(get), [this, respond, principal,
                                      req = std::move(req)](fp8::StatusOr<Job> job) mutable {
      fp8::Status allowed = job.ok() ? AuthorizeOwner(principal, job->owner(), "DeleteJob", req.name())
                                     : job.status();
      if (!allowed.ok()) {
        AuditLog(principal, "DeleteJob", req.name(), allowed);
        respond(fp8::StatusOr<google::protobuf::Empty>(allowed));
        return;
      }
      const std::string name = req.name();
      manager_->DeleteJob(std::move(req), [respond, principal, name](fp8::StatusOr<google::protobuf::Empty> result) {
        AuditLog(principal, "DeleteJob", name, result.status());
        respond(std::move(result));
      });
    });
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::ListQueues(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* raw,
                                                     grpc::ByteBuffer* response) {
  fp8d::v1::ListQueuesRequest request;
  const fp8::Status parsed = ParseRawRequest(*raw, &request);
  auto admitted = Admit(*context, "ListQueues", parsed);
  if (!admitted.ok()) return Refuse(context, admitted.status(), "ListQueues");
  auto* reactor = context->DefaultReactor();
  boost::asio::post(io_, [this, reactor, response, req = std::move(request)]() mutable {
    manager_->ListQueues(std::move(req), Responder<fp8d::v1::ListQueuesResponse>(reactor, response, "ListQueues"));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetUsage(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response) {
  fp8d::v1::GetUsageRequest request;
  const fp8::Status parsed = ParseRawRequest(*raw, &request);
  auto admitted = Admit(*context, "GetUsage", parsed);
  if (!admitted.ok()) return Refuse(context, admitted.status(), "GetUsage");
  auto* reactor = context->DefaultReactor();
  boost::asio::post(io_, [this, reactor, response, req = std::move(request)]() mutable {
    manager_->GetUsage(std::move(req), Responder<fp8d::v1::GetUsageResponse>(reactor, response, "GetUsage"));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetServerInfo(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* raw,
                                                        grpc::ByteBuffer* response) {
  fp8d::v1::GetServerInfoRequest request;
  const fp8::Status parsed = ParseRawRequest(*raw, &request);
  auto admitted = Admit(*context, "GetServerInfo", parsed);
  if (!admitted.ok()) return Refuse(context, admitted.status(), "GetServerInfo");
  // Fixed at start-up: answered here, without a trip through the manager's io.
  auto* reactor = context->DefaultReactor();
  Responder<fp8d::v1::ServerInfo>(reactor, response, "GetServerInfo")(options_.server_info);
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

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobServiceImpl::GetJobLogs(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  fp8d::v1::GetJobLogsRequest request;
  const fp8::Status parsed = ParseRawRequest(*raw, &request);
  auto admitted = Admit(*context, "GetJobLogs", parsed.ok() ? ValidateGetJobLogsRequest(request) : parsed);
  if (!admitted.ok()) {
    return new FinishedWriteReactor<grpc::ByteBuffer>(ToGrpcStatus(admitted.status()));
  }
  LogStreamOptions log_options;
  log_options.chunk_bytes = options_.log_chunk_bytes;
  log_options.poll_ms = options_.log_poll_ms;
  return NewLogReactor(io_, manager_, readers_, std::move(request), log_options);
}

}  // namespace fp8d::api
