// SPDX-License-Identifier: Apache-2.0
// CreateBatcher: CreateJob's group commit. Creates queue up while one batch is being written;
// the next batch takes everything that queued meanwhile, so N concurrent creates cost ~1-2
// fsyncs, not N. A create is answered only once its batch is durable, and a created job is
// handed to the manager (cached, scheduled) only then. A repeated request_id is the store's to
// deduplicate: same body → the existing job, another body → the store's error.
//
// THREADING: every method runs on the io thread; the write runs on the store thread through
// `StoreRun`, which brings the completion back to io.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "daemon/store/job_store.h"

namespace fp8d::core {

class CreateBatcher {
 public:
  using Done = std::function<void(fp8::StatusOr<fp8d::v1::Job>)>;
  // Runs `on_store` on the store thread, then `on_io` on the io thread (not if the owner is
  // gone by then).
  using StoreRun =
      std::function<void(std::function<void(store::JobStore&)> on_store, std::function<void()> on_io)>;
  struct Hooks {
    StoreRun run_on_store;
    // A job whose create committed; called before its creator is answered.
    std::function<void(const fp8d::v1::Job&)> created;
    // The newest version of an existing job, for a repeated request_id (nullopt: not cached).
    std::function<std::optional<fp8d::v1::Job>(const std::string& name)> current;
    // After a batch that created at least one job (the manager schedules).
    std::function<void()> batch_created;
  };
  // batch_max: creates per store transaction; wait_max_us: the longest a batch waits to fill.
  CreateBatcher(boost::asio::io_context& io, int64_t batch_max, int64_t wait_max_us, Hooks hooks);

  void Add(store::CreateRequest request, Done done);
  // Answers every create not yet handed to the store with `status` (shutdown); a batch being
  // written still gets its store's answer.
  void FailQueued(const fp8::Status& status);

 private:
  struct Pending {
    store::CreateRequest request;
    Done done;
  };
  using Results = fp8::StatusOr<std::vector<store::CreateResult>>;
  void Flush();
  void WriteBatch();
  // Answers each caller; true if the batch created a job.
  bool Answer(std::vector<Pending>& batch, Results& results);

  const int64_t batch_max_;
  const int64_t wait_max_us_;
  Hooks hooks_;
  std::deque<Pending> pending_;
  bool in_flight_ = false;
  // Pacing: the size of the last batch (how many callers are creating at once) and how long
  // its write took; a short wait for the next batch to fill up.
  size_t last_batch_ = 1;
  std::chrono::microseconds last_write_{0};
  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // see Flush
};

}  // namespace fp8d::core
