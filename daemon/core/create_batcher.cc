// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/create_batcher.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

namespace fp8d::core {

CreateBatcher::CreateBatcher(boost::asio::io_context& io, int64_t batch_max, int64_t wait_max_us,
                             Hooks hooks)
    : batch_max_(std::max<int64_t>(batch_max, 1)),
      wait_max_us_(wait_max_us),
      hooks_(std::move(hooks)),
      timer_(io) {}

void CreateBatcher::Add(store::CreateRequest request, Done done) {
  pending_.push_back(Pending{std::move(request), std::move(done)});
  Flush();
}

void CreateBatcher::FailQueued(const fp8::Status& status) {
  timer_.cancel();
  timer_armed_ = false;
  while (!pending_.empty()) {
    Done done = std::move(pending_.front().done);
    pending_.pop_front();
    done(status);
  }
}

// With N clients creating in a closed loop, the batch after a write would hold only the first
// caller to come back (the others are still reading their answers), the one after that the
// other N-1: two fsyncs per N jobs. So when fewer callers are waiting than the last batch had,
// the next batch waits for them -- at most half as long as the last write took, so the wait
// never costs more than the fsync it saves, and a lone client (batches of 1) never waits.
void CreateBatcher::Flush() {
  if (in_flight_ || pending_.empty()) return;
  if (pending_.size() < last_batch_) {
    if (timer_armed_) return;  // it fires soon, or a fuller batch comes first
    const auto wait = std::min(last_write_ / 2, std::chrono::microseconds(wait_max_us_));
    if (wait.count() > 0) {
      timer_armed_ = true;
      timer_.expires_after(wait);
      // A wait that had already expired still runs as a success after cancel(): the weak
      // reference keeps it from touching a batcher that is gone.
      std::weak_ptr<int> alive = alive_;
      timer_.async_wait([this, alive](const boost::system::error_code& ec) {
        // Cancelled: the batch went out early (its writer cleared the flag) or shutdown.
        if (alive.expired() || ec == boost::asio::error::operation_aborted) return;
        timer_armed_ = false;
        WriteBatch();
      });
      return;
    }
  }
  WriteBatch();
}

void CreateBatcher::WriteBatch() {
  if (in_flight_ || pending_.empty()) return;
  if (timer_armed_) {
    timer_armed_ = false;
    timer_.cancel();  // its handler runs as aborted and does nothing
  }
  in_flight_ = true;
  // The requests go to the store thread; the callers' callbacks stay on io (they are never
  // run or destroyed elsewhere); only the results and the write's duration cross back.
  struct Written {
    Results results = std::vector<store::CreateResult>{};
    std::chrono::microseconds took{0};
  };
  auto written = std::make_shared<Written>();
  auto batch = std::make_shared<std::vector<Pending>>();
  std::vector<store::CreateRequest> requests;
  while (!pending_.empty() && static_cast<int64_t>(batch->size()) < batch_max_) {
    requests.push_back(std::move(pending_.front().request));  // only `done` stays
    batch->push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
  last_batch_ = batch->size();
  hooks_.run_on_store(
      [written, requests = std::move(requests)](store::JobStore& s) mutable {
        const auto start = std::chrono::steady_clock::now();
        written->results = s.CreateJobs(std::move(requests));
        written->took = std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::steady_clock::now() - start);
      },
      [this, written, batch] {
        in_flight_ = false;
        last_write_ = written->took;
        const bool created = Answer(*batch, written->results);
        Flush();
        if (created && hooks_.batch_created) hooks_.batch_created();
      });
}

bool CreateBatcher::Answer(std::vector<Pending>& batch, Results& results) {
  bool created = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    Done& done = batch[i].done;
    if (!results.ok()) {
      done(results.status());
      continue;
    }
    if (i >= results->size()) {
      done(fp8::InternalError("store returned fewer create results than requests"));
      continue;
    }
    store::CreateResult& r = (*results)[i];
    if (!r.status.ok()) {
      done(r.status);
    } else if (r.created) {
      spdlog::info("{}: created ({} rank(s), priority {})", r.job.name(),
                   r.job.resources().ranks(), r.job.priority());
      hooks_.created(r.job);
      created = true;
      done(std::move(r.job));
    } else {
      // Same request_id and body: the existing job, as current as we know it.
      std::optional<fp8d::v1::Job> current = hooks_.current(r.job.name());
      done(current ? std::move(*current) : std::move(r.job));
    }
  }
  return created;
}

}  // namespace fp8d::core
