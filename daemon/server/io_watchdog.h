// SPDX-License-Identifier: Apache-2.0
// IoWatchdog: whether the manager's io thread still turns, for the liveness probes. A thread
// of its own posts a no-op to the io_context every period and the no-op records when it ran;
// the io thread is live while that record is younger than `bound`. Every job transition runs
// on that thread, so a wedged handler (a blocking call, a deadlock) there is a daemon that
// accepts calls but can do nothing: /healthz answers 503 and gRPC health NOT_SERVING, and a
// Kubernetes liveness probe restarts it (workers survive; the next fp8d re-adopts them).
// systemd's watchdog (systemd_notify.h) sees the same thread from its own timer.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include <boost/asio/io_context.hpp>

namespace fp8d::server {

class IoWatchdog {
 public:
  // `on_change(live)` runs on the watchdog's thread each time liveness flips.
  IoWatchdog(boost::asio::io_context& io, std::chrono::milliseconds bound,
             std::function<void(bool live)> on_change);
  IoWatchdog(const IoWatchdog&) = delete;
  IoWatchdog& operator=(const IoWatchdog&) = delete;
  ~IoWatchdog() { Stop(); }

  void Start();
  // Joins the thread; on_change is not called after it returns. Any thread but io.
  void Stop();
  // Any thread.
  bool Live() const;

 private:
  void Run();
  static int64_t NowMs();

  boost::asio::io_context& io_;
  const std::chrono::milliseconds bound_;
  const std::chrono::milliseconds period_;  // how often a ping is posted and liveness checked
  std::function<void(bool)> on_change_;
  std::atomic<int64_t> last_ping_ms_{0};    // steady clock: when io last ran a ping
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fp8d::server
