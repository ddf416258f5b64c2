// SPDX-License-Identifier: Apache-2.0
// A thread that runs blocking work (SQLite, process spawning) one task at a time, in the
// order the tasks were posted. The manager keeps the io_context free of disk I/O by sending
// such work here and posting the result back to io (job_manager.h: "no handler on io blocks
// on disk"). FIFO matters: the store sees the writes in the order the state machine made
// them, so a later write never lands before an earlier one.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace fp8d::core {

class BlockingWorker {
 public:
  explicit BlockingWorker(std::string name);
  // Runs every task already posted, then joins the thread.
  ~BlockingWorker();

  BlockingWorker(const BlockingWorker&) = delete;
  BlockingWorker& operator=(const BlockingWorker&) = delete;

  void Post(std::function<void()> task);

 private:
  void Loop();

  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fp8d::core
