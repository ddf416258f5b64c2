// SPDX-License-Identifier: Apache-2.0
// fp8d.v1.JobService on gRPC's callback API. A handler authorizes, validates, then posts one
// command to the manager's io_context and returns its reactor; the reactor finishes from the
// callback the manager posts back. No handler blocks a gRPC thread or the io thread: log files
// are read on a small reader pool, and waits are io timers.
#pragma once

#include <atomic>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "daemon/api/auth_policy.h"
#include "daemon/api/job_isolation.h"
#include "daemon/core/job_manager.h"
#include "fp8d/v1/job_service.grpc.pb.h"

namespace fp8d::api {

struct JobServiceOptions {
  // Updates queued for one slow WatchJob client before progress-only updates are coalesced
  // (state changes are never dropped, and nothing is reordered).
  size_t watch_queue_limit = 64;
  size_t log_chunk_bytes = 64 * 1024;
  int log_poll_ms = 200;         // how often GetJobLogs(follow) looks for new bytes
  int log_reader_threads = 2;
  int watch_writer_threads = 0;  // 0 = half the cores, at least 2, at most 8
  IsolationOptions isolation;    // run-as uid and path roots of new jobs
  std::vector<core::QueueConfig> queues;  // Job.queue's choices (queue_admission.h); empty: `default`
  // What GetServerInfo answers: the daemon knows its version and launcher, the API layer not.
  fp8d::v1::ServerInfo server_info;
};

// Every method is registered raw (bytes in, bytes out) and parses its own request: gRPC's
// typed callback handlers answer a request that does not parse with UNIMPLEMENTED and an
// empty message (server_callback_handlers.h), where the API promises INVALID_ARGUMENT naming
// the message. WatchJob also gains from it: one update goes to every watcher of a job, so it
// is serialized once per version and the same bytes are shared by all the streams.
using RawJobService = fp8d::v1::JobService::WithRawCallbackMethod_CreateJob<
    fp8d::v1::JobService::WithRawCallbackMethod_GetJob<
        fp8d::v1::JobService::WithRawCallbackMethod_ListJobs<
            fp8d::v1::JobService::WithRawCallbackMethod_WatchJob<
                fp8d::v1::JobService::WithRawCallbackMethod_CancelJob<
                    fp8d::v1::JobService::WithRawCallbackMethod_GetJobLogs<
                        fp8d::v1::JobService::WithRawCallbackMethod_DeleteJob<
                            fp8d::v1::JobService::WithRawCallbackMethod_ListQueues<
                                fp8d::v1::JobService::WithRawCallbackMethod_GetUsage<
                                    fp8d::v1::JobService::WithRawCallbackMethod_GetServerInfo<
                                        fp8d::v1::JobService::CallbackService>>>>>>>>>>;

class JobServiceImpl final : public RawJobService {
 public:
  JobServiceImpl(boost::asio::io_context& io, core::JobManager* manager,
                 std::shared_ptr<const AuthPolicy> auth, JobServiceOptions options = {});
  ~JobServiceImpl() override;

  // Until the manager has finished recovery, every call is answered UNAVAILABLE.
  void SetReady(bool ready) { ready_.store(ready); }
  // Stops the log reader and watch writer pools. Call after the gRPC server has shut down.
  void Stop();

  // Each takes the serialized request (fp8d.v1.<Method>Request) and answers the serialized
  // response (Job, ListJobsResponse, google.protobuf.Empty).
  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request, grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request, grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request, grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request, grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request, grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListQueues(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request, grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetUsage(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request, grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request, grpc::ByteBuffer* response) override;
  // Serialized fp8d.v1.WatchJobResponse messages out.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchJob(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  // Serialized fp8d.v1.LogChunk messages out.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GetJobLogs(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request) override;

 private:
  // Auth + readiness + validation; a principal means the call may be posted to the manager.
  fp8::StatusOr<Principal> Admit(const grpc::CallbackServerContext& context, const char* method,
                                 const fp8::Status& validation) const;

  boost::asio::io_context& io_;
  core::JobManager* manager_;
  std::shared_ptr<const AuthPolicy> auth_;
  JobServiceOptions options_;
  std::atomic<bool> ready_{false};
  std::shared_ptr<boost::asio::thread_pool> readers_;
  std::shared_ptr<boost::asio::thread_pool> writers_;  // WatchJob StartWrite fan-out
};

}  // namespace fp8d::api
