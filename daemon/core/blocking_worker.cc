// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/blocking_worker.h"

#include <pthread.h>

#include <utility>

namespace fp8d::core {

BlockingWorker::BlockingWorker(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { Loop(); });
  // Named so that `top -H` and gdb show which thread is the store and which the launcher.
  pthread_setname_np(thread_.native_handle(), name_.substr(0, 15).c_str());
}

BlockingWorker::~BlockingWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BlockingWorker::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void BlockingWorker::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace fp8d::core
