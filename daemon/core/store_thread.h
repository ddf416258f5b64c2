// SPDX-License-Identifier: Apache-2.0
// StoreThread: the io thread's way to the store. Every SQLite call runs on one BlockingWorker
// thread, in the order posted (so a later write never lands before an earlier one), and its
// result comes back to io. A completion that arrives after the StoreThread is gone does nothing.
//
// THREADING: Run and Barrier are called on io; `work` runs on the store thread, `then` on io.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "daemon/core/blocking_worker.h"
#include "daemon/store/job_store.h"

namespace fp8d::core {

class StoreThread {
 public:
  StoreThread(boost::asio::io_context& io, store::JobStore& store)
      : io_(io), store_(store), worker_(std::make_unique<BlockingWorker>("fp8d-store")) {}
  // Runs every task already posted (their completions become no-ops), then joins.
  ~StoreThread() {
    alive_.reset();
    worker_.reset();
  }

  // Runs `work` on the store thread and `then` with its result on io.
  template <typename R>
  void Run(std::function<R(store::JobStore&)> work, std::function<void(R)> then) {
    std::weak_ptr<int> alive = alive_;
    worker_->Post([this, alive, work = std::move(work), then = std::move(then)]() mutable {
      auto result = std::make_shared<R>(work(store_));
      boost::asio::post(io_, [alive, then = std::move(then), result]() mutable {
        if (!alive.expired()) then(std::move(*result));
      });
    });
  }
  // Runs `then` on io once every task posted before it has run.
  void Barrier(std::function<void()> then) {
    Run<int>([](store::JobStore&) { return 0; }, [then = std::move(then)](int) { then(); });
  }
  // Runs `fn` on the store thread itself (recovery streams chunks from there).
  void Post(std::function<void(store::JobStore&)> fn) {
    worker_->Post([this, fn = std::move(fn)] { fn(store_); });
  }

 private:
  boost::asio::io_context& io_;
  store::JobStore& store_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  std::unique_ptr<BlockingWorker> worker_;
};

}  // namespace fp8d::core
