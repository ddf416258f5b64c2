// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/io_watchdog.h"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

namespace fp8d::server {

IoWatchdog::IoWatchdog(boost::asio::io_context& io, std::chrono::milliseconds bound,
                       std::function<void(bool)> on_change)
    : io_(io),
      bound_(bound),
      // A ping a second, as often as a quarter of a short bound so one late ping is not a miss.
      period_(std::clamp(bound / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000))),
      on_change_(std::move(on_change)) {}

int64_t IoWatchdog::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

void IoWatchdog::Start() {
  last_ping_ms_ = NowMs();
  thread_ = std::thread([this] { Run(); });
}

void IoWatchdog::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool IoWatchdog::Live() const { return NowMs() - last_ping_ms_.load() < bound_.count(); }

void IoWatchdog::Run() {
  bool live = true;
  std::unique_lock lock(mu_);
  while (!stop_) {
    // Pings queue up behind a blocked handler; each one that runs later only says "now".
    boost::asio::post(io_, [this] { last_ping_ms_ = NowMs(); });
    wake_.wait_for(lock, period_, [this] { return stop_; });
    if (stop_) break;
    const bool now_live = Live();
    if (now_live == live) continue;
    live = now_live;
    if (live) {
      spdlog::info("io watchdog: the manager's thread answers again; healthy");
    } else {
      spdlog::error("io watchdog: the manager's thread has not answered for {} ms; unhealthy",
                    NowMs() - last_ping_ms_.load());
    }
    if (on_change_) on_change_(live);
  }
}

}  // namespace fp8d::server
