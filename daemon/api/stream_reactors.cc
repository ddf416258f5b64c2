// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/stream_reactors.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/slice.h>

#include "daemon/api/status_mapping.h"

namespace fp8d::api {

bool IsTerminalState(fp8d::v1::JobState state) {
  return state == fp8d::v1::SUCCEEDED || state == fp8d::v1::FAILED ||
         state == fp8d::v1::CANCELLED;
}

fp8::Status ParseRawRequest(const grpc::ByteBuffer& raw, google::protobuf::Message* request) {
  std::vector<grpc::Slice> slices;
  if (!raw.Dump(&slices).ok()) slices.clear();
  bool parsed = false;
  if (slices.size() == 1) {
    // The usual case (a request in one slice): parsed where it lies, not copied first.
    parsed = request->ParseFromArray(slices[0].begin(), static_cast<int>(slices[0].size()));
  } else {
    std::string bytes;
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    parsed = request->ParseFromString(bytes);
  }
  if (!parsed) {
    return fp8::InvalidArgumentError("request: not a valid " + request->GetTypeName());
  }
  return fp8::OkStatus();
}

namespace {

using fp8d::v1::Job;
using fp8d::v1::LogChunk;
using fp8d::v1::WatchJobResponse;

// Shared write discipline for both streams: one write in flight, Finish only when idle,
// and nothing after OnDone. Every decision is taken under `mu`; the gRPC call that follows is
// made outside it (a reactor method may run callbacks inline).
template <typename Msg>
class StreamGate {
 public:
  explicit StreamGate(grpc::ServerWriteReactor<Msg>* reactor) : reactor_(reactor) {}

  // Starts writing `msg` if no write is in flight; returns false if busy or finishing. The
  // message is shared and immutable: one WatchJob update goes to every watcher of the job.
  bool TryWrite(std::shared_ptr<const Msg> msg) {
    grpc::ServerWriteReactor<Msg>* r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (writing_ || finishing_ || reactor_ == nullptr) return false;
      writing_ = true;
      in_flight_ = std::move(msg);
      r = reactor_;
    }
    r->StartWrite(in_flight_.get());
    return true;
  }
  // Finishes now if idle, else when the write in flight completes.
  void FinishWhenIdle(grpc::Status status) {
    grpc::ServerWriteReactor<Msg>* r = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finishing_ || reactor_ == nullptr) return;
      if (!pending_finish_) pending_finish_ = std::move(status);
      if (writing_) return;
      finishing_ = true;
      r = reactor_;
    }
    r->Finish(*pending_finish_);
  }
  // Called from OnWriteDone. Returns true when the caller may write the next message; false when
  // the stream is finishing (a pending Finish was issued here) or broke.
  bool WriteDone(bool ok) {
    grpc::ServerWriteReactor<Msg>* r = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok && !pending_finish_) pending_finish_ = grpc::Status(grpc::StatusCode::CANCELLED, "stream broken");
      if (!pending_finish_) return true;
      if (finishing_) return false;
      finishing_ = true;
      r = reactor_;
    }
    r->Finish(*pending_finish_);
    return false;
  }
  bool Closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return finishing_ || pending_finish_.has_value() || reactor_ == nullptr;
  }
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    reactor_ = nullptr;
  }
  std::mutex& mu() { return mu_; }

 private:
  std::mutex mu_;
  grpc::ServerWriteReactor<Msg>* reactor_;
  std::shared_ptr<const Msg> in_flight_;  // alive until OnWriteDone; replaced only when idle
  bool writing_ = false;
  bool finishing_ = false;
  std::optional<grpc::Status> pending_finish_;
};

// ---------------------------------------------------------------------------------- WatchJob

// One version of a job as every watcher receives it: the serialized WatchJobResponse, built
// once, plus the state the slow-client coalescing needs.
struct WatchUpdate {
  grpc::ByteBuffer bytes;
  fp8d::v1::JobState state = fp8d::v1::JOB_STATE_UNSPECIFIED;
  int64_t version = 0;
  std::string name;
};

class WatchSession : public std::enable_shared_from_this<WatchSession> {
  struct PendingStart {
    std::shared_ptr<WatchSession> session;
    std::shared_ptr<const WatchUpdate> msg;
  };
  static constexpr size_t kStartsPerTask = 128;

 public:
  WatchSession(boost::asio::io_context& io, core::JobManager* manager,
               std::shared_ptr<boost::asio::thread_pool> writers,
               fp8d::v1::WatchJobRequest request, size_t queue_limit,
               grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor)
      : io_(io), manager_(manager), writers_(std::move(writers)), request_(std::move(request)),
        queue_limit_(queue_limit), gate_(reactor) {}

  void Begin() {
    auto self = shared_from_this();
    boost::asio::post(io_, [self] {
      if (self->gate_.Closed()) return;
      self->subscription_ = self->manager_->Watch(
          self->request_.name(), self->request_.since_version(),
          [self](const Job& job) { self->OnUpdate(job); },
          [self](fp8::Status status) { self->OnEnd(std::move(status)); });
    });
  }

  // Runs on io. The manager calls every watcher of a job in a row with the same update, so
  // the response is serialized once (cached by name and version) and its bytes are shared by
  // all of them, and the StartWrite calls (which may do socket work inline) run on the writer
  // pool, not on io.
  void OnUpdate(const Job& job) {
    std::shared_ptr<const WatchUpdate> msg = SharedUpdate(job);
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      if (!queue_.empty() || writing_) {
        // Slow client: coalesce consecutive progress-only updates at the tail once the queue is
        // long, never a state change, so the client still sees every state in order.
        if (queue_.size() >= queue_limit_ && queue_.back()->state == job.state()) {
          queue_.back() = std::move(msg);
        } else {
          queue_.push_back(std::move(msg));
        }
        return;
      }
      writing_ = true;
    }
    QueueFirstWrite(std::move(msg));
  }

  // Runs on io. A Deliver to 1,000 watchers would otherwise post 1,000 tasks to the writer
  // pool (and wake its threads 1,000 times); instead the first writes collect here and go out
  // in a few tasks of kStartsPerTask once the io handler that delivered them returns.
  void QueueFirstWrite(std::shared_ptr<const WatchUpdate> msg) {
    static thread_local std::vector<PendingStart> pending;  // io thread only
    if (pending.empty()) {
      boost::asio::post(io_, [writers = writers_] {
        std::vector<PendingStart> all;
        all.swap(pending);
        for (size_t begin = 0; begin < all.size(); begin += kStartsPerTask) {
          const size_t end = std::min(all.size(), begin + kStartsPerTask);
          std::vector<PendingStart> part(std::make_move_iterator(all.begin() + begin),
                                         std::make_move_iterator(all.begin() + end));
          boost::asio::post(*writers, [part = std::move(part)]() mutable {
            for (PendingStart& start : part) start.session->StartFirstWrite(std::move(start.msg));
          });
        }
      });
    }
    pending.push_back(PendingStart{shared_from_this(), std::move(msg)});
  }

  // On the writer pool.
  void StartFirstWrite(std::shared_ptr<const WatchUpdate> msg) {
    if (!gate_.TryWrite(Bytes(std::move(msg)))) {
      std::lock_guard<std::mutex> lock(queue_mu_);
      writing_ = false;
    }
  }

  static std::shared_ptr<const WatchUpdate> SharedUpdate(const Job& job) {
    static thread_local std::shared_ptr<const WatchUpdate> last;  // io thread only
    if (last != nullptr && last->version == job.version() && last->name == job.name()) {
      return last;
    }
    auto fresh = std::make_shared<WatchUpdate>();
    fresh->state = job.state();
    fresh->version = job.version();
    fresh->name = job.name();
    WatchJobResponse response;
    *response.mutable_job() = job;
    bool own = false;
    // Cannot fail for a message this small (it only fails above 2 GiB).
    (void)grpc::SerializationTraits<WatchJobResponse>::Serialize(response, &fresh->bytes, &own);
    last = std::move(fresh);
    return last;
  }

  // The bytes, kept alive by the update they belong to.
  static std::shared_ptr<const grpc::ByteBuffer> Bytes(std::shared_ptr<const WatchUpdate> update) {
    const grpc::ByteBuffer* bytes = &update->bytes;
    return std::shared_ptr<const grpc::ByteBuffer>(std::move(update), bytes);
  }

  // Runs on io.
  void OnEnd(fp8::Status status) {
    ended_ = true;
    std::lock_guard<std::mutex> lock(queue_mu_);
    end_ = ToGrpcStatus(status);
    if (!writing_ && queue_.empty()) gate_.FinishWhenIdle(*end_);
  }

  // gRPC thread.
  void OnWriteDone(bool ok) {
    if (!gate_.WriteDone(ok)) {
      Unwatch();
      return;
    }
    std::shared_ptr<const WatchUpdate> msg;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      if (queue_.empty()) {
        writing_ = false;
        if (end_) gate_.FinishWhenIdle(*end_);
        return;
      }
      msg = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!gate_.TryWrite(Bytes(std::move(msg)))) {
      std::lock_guard<std::mutex> lock(queue_mu_);
      writing_ = false;
    }
  }

  void OnCancel() {
    gate_.FinishWhenIdle(grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled"));
    Unwatch();
  }

  void OnDone() {
    gate_.Detach();
    Unwatch();
  }

 private:
  void Unwatch() {
    auto self = shared_from_this();
    boost::asio::post(io_, [self] {
      if (self->subscription_ >= 0 && !self->ended_ && !self->unwatched_) {
        self->unwatched_ = true;
        self->manager_->Unwatch(self->subscription_);
      }
    });
  }

  boost::asio::io_context& io_;
  core::JobManager* manager_;
  std::shared_ptr<boost::asio::thread_pool> writers_;
  const fp8d::v1::WatchJobRequest request_;
  const size_t queue_limit_;
  StreamGate<grpc::ByteBuffer> gate_;
  // io-thread only.
  int64_t subscription_ = -1;
  bool ended_ = false;
  bool unwatched_ = false;
  // Updates waiting for the write in flight.
  std::mutex queue_mu_;
  std::deque<std::shared_ptr<const WatchUpdate>> queue_;
  bool writing_ = false;
  std::optional<grpc::Status> end_;
};


// --------------------------------------------------------------------------------- GetJobLogs

// Reads the rank's log in chunks on the reader pool, through the stream the launcher opens
// (the API knows no file names). With follow, at EOF it asks the manager (on io) whether the
// job is terminal and which attempt is current, waits poll_ms on an io timer and reads on; it
// ends after a read that reached EOF *following* a check that saw the job terminal, so every
// byte written before the workers exited is sent.
class LogSession : public std::enable_shared_from_this<LogSession> {
 public:
  LogSession(boost::asio::io_context& io, core::JobManager* manager,
             std::shared_ptr<boost::asio::thread_pool> readers, fp8d::v1::GetJobLogsRequest request,
             LogStreamOptions options, grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor)
      : io_(io), manager_(manager), readers_(std::move(readers)), request_(std::move(request)),
        options_(options), gate_(reactor), timer_(io) {}

  void Begin() { Check(); }

  void OnWriteDone(bool ok) {
    if (!gate_.WriteDone(ok)) return;
    ScheduleRead();
  }
  void OnCancel() {
    gate_.FinishWhenIdle(grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled"));
  }
  void OnDone() { gate_.Detach(); }

 private:
  using RankLogSource = core::JobManager::RankLogSource;

  // On io: which attempt's log, and is the job over?
  void Check() {
    auto self = shared_from_this();
    boost::asio::post(io_, [self] {
      if (self->gate_.Closed()) return;
      self->manager_->RankLog(
          self->request_.name(), self->request_.rank(), self->request_.attempt(),
          [self](fp8::StatusOr<RankLogSource> source, bool terminal) {
            self->OnChecked(std::move(source), terminal);
          });
    });
  }

  void OnChecked(fp8::StatusOr<RankLogSource> source, bool terminal) {
    if (!source.ok()) {
      OnNoLog(source.status());
      return;
    }
    std::lock_guard<std::mutex> lock(read_mu_);
    terminal_seen_ = terminal;
    if (source->attempt != attempt_) {
      // A new attempt started (the old log was read to its end before this check): the next
      // read step opens the new one.
      open_ = std::move(source->open);
      open_attempt_ = source->attempt;
    }
    ScheduleRead();
  }

  // On io: there is no log to read (no attempt yet, or the rank has written none).
  void OnNoLog(const fp8::Status& status) {
    if (status.code() != fp8::StatusCode::kNotFound || !request_.follow() || had_log_) {
      if (had_log_ && status.code() == fp8::StatusCode::kNotFound) {
        gate_.FinishWhenIdle(grpc::Status::OK);  // had a log; nothing newer
      } else {
        gate_.FinishWhenIdle(ToGrpcStatus(status));
      }
      return;
    }
    // follow, no log yet: the job may not have started. Ask whether it exists at all.
    auto self = shared_from_this();
    fp8d::v1::GetJobRequest get;
    get.set_name(request_.name());
    manager_->GetJob(get, [self](fp8::StatusOr<Job> job) {
      if (!job.ok()) {
        self->gate_.FinishWhenIdle(ToGrpcStatus(job.status()));
      } else if (IsTerminalState(job->state())) {
        self->gate_.FinishWhenIdle(grpc::Status::OK);
      } else {
        self->WaitThenCheck();
      }
    });
  }

  void WaitThenCheck() {
    auto self = shared_from_this();
    timer_.expires_after(std::chrono::milliseconds(options_.poll_ms));
    timer_.async_wait([self](const boost::system::error_code&) { self->Check(); });
  }

  void ScheduleRead() {
    auto self = shared_from_this();
    boost::asio::post(*readers_, [self] { self->ReadStep(); });
  }

  // On the reader pool. Only one step runs at a time: the next is scheduled by OnWriteDone or
  // by a check, never both.
  void ReadStep() {
    if (gate_.Closed()) return;
    std::string buf;
    bool terminal;
    {
      std::lock_guard<std::mutex> lock(read_mu_);
      terminal = terminal_seen_;
      if (open_) {
        auto opened = open_();
        open_ = nullptr;
        if (!opened.ok()) {
          auto self = shared_from_this();
          boost::asio::post(io_, [self, st = opened.status()] { self->OnNoLog(st); });
          return;
        }
        stream_ = std::move(*opened);
        attempt_ = open_attempt_;
        had_log_ = true;
      }
      if (stream_ != nullptr) {
        auto chunk = stream_->Read(options_.chunk_bytes);
        if (!chunk.ok()) {
          gate_.FinishWhenIdle(ToGrpcStatus(chunk.status()));
          return;
        }
        buf = std::move(*chunk);
      }
    }
    if (!buf.empty()) {
      LogChunk message;
      message.set_data(std::move(buf));
      grpc::Slice slice(message.SerializeAsString());
      gate_.TryWrite(std::make_shared<grpc::ByteBuffer>(&slice, 1));  // OnWriteDone schedules the next read
      return;
    }
    if (!request_.follow() || terminal) {
      gate_.FinishWhenIdle(grpc::Status::OK);
      return;
    }
    auto self = shared_from_this();
    boost::asio::post(io_, [self] { self->WaitThenCheck(); });
  }

  boost::asio::io_context& io_;
  core::JobManager* manager_;
  std::shared_ptr<boost::asio::thread_pool> readers_;
  const fp8d::v1::GetJobLogsRequest request_;
  const LogStreamOptions options_;
  StreamGate<grpc::ByteBuffer> gate_;
  boost::asio::steady_timer timer_;  // io only
  std::mutex read_mu_;
  std::unique_ptr<launcher::RankStream> stream_;  // the log of attempt_, read on from where it stopped
  int attempt_ = 0;
  bool had_log_ = false;
  // Set by a check that saw a newer attempt; the next read step opens it (blocking I/O).
  std::function<fp8::StatusOr<std::unique_ptr<launcher::RankStream>>()> open_;
  int open_attempt_ = 0;
  bool terminal_seen_ = false;
};

// The gRPC side of a stream: forwards the callbacks to its session, which owns the stream's
// state and may outlive the reactor (work posted to io or a pool holds it by shared_ptr).
template <typename Response, typename Session>
class SessionReactor final : public grpc::ServerWriteReactor<Response> {
 public:
  template <typename... Args>
  explicit SessionReactor(Args&&... args)
      : session_(std::make_shared<Session>(std::forward<Args>(args)..., this)) {
    session_->Begin();
  }
  void OnWriteDone(bool ok) override { session_->OnWriteDone(ok); }
  void OnCancel() override { session_->OnCancel(); }
  void OnDone() override {
    session_->OnDone();
    delete this;
  }

 private:
  std::shared_ptr<Session> session_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* NewWatchReactor(
    boost::asio::io_context& io, core::JobManager* manager,
    std::shared_ptr<boost::asio::thread_pool> writers, fp8d::v1::WatchJobRequest request,
    size_t queue_limit) {
  return new SessionReactor<grpc::ByteBuffer, WatchSession>(
      io, manager, std::move(writers), std::move(request), queue_limit);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* NewLogReactor(
    boost::asio::io_context& io, core::JobManager* manager,
    std::shared_ptr<boost::asio::thread_pool> readers, fp8d::v1::GetJobLogsRequest request,
    LogStreamOptions options) {
  return new SessionReactor<grpc::ByteBuffer, LogSession>(io, manager, std::move(readers),
                                                          std::move(request), options);
}

}  // namespace fp8d::api
