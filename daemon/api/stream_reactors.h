// SPDX-License-Identifier: Apache-2.0
// Server-streaming reactors for WatchJob and GetJobLogs. Each keeps at most one write in flight
// (gRPC's rule) and queues the rest; Finish is only ever called with no write in flight, and
// nothing touches a reactor after its OnDone. State the manager's callbacks reach lives in a
// shared session object, so a callback that arrives after the client left finds a session that
// knows the stream is gone.
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include "daemon/core/job_manager.h"
#include "fp8d/v1/job_service.pb.h"

namespace fp8d::api {

// Parses a raw (ByteBuffer) request of a method registered raw; INVALID_ARGUMENT if malformed.
fp8::Status ParseRawRequest(const grpc::ByteBuffer& raw, google::protobuf::Message* request);

// `writers` runs the StartWrite calls so the io thread only queues updates. The stream carries
// serialized fp8d.v1.WatchJobResponse messages (the method is registered raw).
grpc::ServerWriteReactor<grpc::ByteBuffer>* NewWatchReactor(
    boost::asio::io_context& io, core::JobManager* manager,
    std::shared_ptr<boost::asio::thread_pool> writers, fp8d::v1::WatchJobRequest request,
    size_t queue_limit);

struct LogStreamOptions {
  size_t chunk_bytes = 64 * 1024;
  int poll_ms = 200;
};

// The stream carries serialized fp8d.v1.LogChunk messages (the method is registered raw).
grpc::ServerWriteReactor<grpc::ByteBuffer>* NewLogReactor(
    boost::asio::io_context& io, core::JobManager* manager,
    std::shared_ptr<boost::asio::thread_pool> readers, fp8d::v1::GetJobLogsRequest request,
    LogStreamOptions options);

// A stream that ends at once with `status` (refused before it started).
template <typename T>
class FinishedWriteReactor final : public grpc::ServerWriteReactor<T> {
 public:
  explicit FinishedWriteReactor(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

bool IsTerminalState(fp8d::v1::JobState state);

}  // namespace fp8d::api
