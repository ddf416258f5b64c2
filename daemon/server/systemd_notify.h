// SPDX-License-Identifier: Apache-2.0
// fp8d's side of systemd's service protocol (Type=notify, WatchdogSec=): READY=1 once
// recovery has finished, WATCHDOG=1 from the manager's io thread, STOPPING=1 on SIGTERM, and
// STATUS= lines with the job counts. Everything is a no-op when $NOTIFY_SOCKET is unset, so
// fp8d runs the same outside systemd.
//
// The watchdog ping is a timer on the manager's io_context, not a thread of its own: a ping
// proves that the thread which runs every job transition still turns, so a wedged manager
// stops pinging and systemd restarts fp8d (workers survive: KillMode=process).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace fp8d::server {

class SystemdNotifier {
 public:
  // `status_line` is called on `io` and returns the text after STATUS=.
  SystemdNotifier(boost::asio::io_context& io, std::function<std::string()> status_line);
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  // Reads $WATCHDOG_USEC (sd_watchdog_enabled) and, when set, pings at half of it from `io`.
  // Any thread.
  void Start();
  // READY=1 together with the first STATUS= line; also arms the test-only fault hook
  // (ArmFaultHookForTests), with or without systemd. Call on `io`.
  void Ready();
  // STOPPING=1. Any thread (the signal-handling one).
  void Stopping();
  // Cancels the timers and releases a fault-blocked io thread. Any thread.
  void Stop();

  bool enabled() const { return enabled_; }
  std::chrono::microseconds watchdog_period() const { return period_; }

 private:
  void ScheduleTick();
  void Tick();
  void SendStatusIfChanged(bool with_ready);
  void ArmFaultHookForTests();

  boost::asio::io_context& io_;
  std::function<std::string()> status_line_;
  bool enabled_ = false;                    // $NOTIFY_SOCKET is set
  std::chrono::microseconds period_{0};     // ping period: half of WATCHDOG_USEC; 0 = no watchdog
  bool ready_ = false;                      // on io
  std::string last_status_;                 // on io
  boost::asio::steady_timer tick_timer_;
  boost::asio::steady_timer fault_timer_;
  std::atomic<bool> released_{false};       // Stop() ends the fault hook's block
};

}  // namespace fp8d::server
