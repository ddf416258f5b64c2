// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/systemd_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

namespace fp8d::server {
namespace {

// Without a watchdog, STATUS= is still refreshed this often.
constexpr std::chrono::seconds kStatusPeriod{5};

void Notify(const std::string& message) {
  // unset_environment=0: the workers fp8d starts inherit NOTIFY_SOCKET; they never write to it
  // (only fp8d's pid is accepted under NotifyAccess=main).
  const int rc = sd_notify(0, message.c_str());
  if (rc < 0) spdlog::warn("sd_notify({}): {}", message, std::strerror(-rc));
}

}  // namespace

SystemdNotifier::SystemdNotifier(boost::asio::io_context& io,
                                 std::function<std::string()> status_line)
    : io_(io), status_line_(std::move(status_line)), tick_timer_(io), fault_timer_(io) {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && *socket != '\0';
}

void SystemdNotifier::Start() {
  if (!enabled_) return;
  uint64_t usec = 0;
  const int rc = sd_watchdog_enabled(0, &usec);
  if (rc > 0 && usec > 0) {
    period_ = std::chrono::microseconds(usec / 2);
    spdlog::info("systemd watchdog: {} us, pinging every {} us", usec, period_.count());
  } else if (rc < 0) {
    spdlog::warn("WATCHDOG_USEC: {} (no watchdog pings)", std::strerror(-rc));
  }
  Notify("STATUS=recovering");
  boost::asio::post(io_, [this] {
    if (period_.count() > 0) Notify("WATCHDOG=1");  // recovery may take a while: ping from the start
    ScheduleTick();
  });
}

void SystemdNotifier::Ready() {
  ArmFaultHookForTests();  // with or without systemd: the io watchdog sees the block too
  if (!enabled_) return;
  ready_ = true;
  SendStatusIfChanged(/*with_ready=*/true);
}

void SystemdNotifier::Stopping() {
  if (enabled_) Notify("STOPPING=1\nSTATUS=stopping");
}

void SystemdNotifier::Stop() {
  released_ = true;
  boost::asio::post(io_, [this] {
    tick_timer_.cancel();
    fault_timer_.cancel();
  });
}

void SystemdNotifier::ScheduleTick() {
  if (released_) return;
  tick_timer_.expires_after(period_.count() > 0
                                ? std::chrono::duration_cast<std::chrono::steady_clock::duration>(period_)
                                : std::chrono::steady_clock::duration(kStatusPeriod));
  tick_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    Tick();
    ScheduleTick();
  });
}

void SystemdNotifier::Tick() {
  if (period_.count() > 0) Notify("WATCHDOG=1");
  if (ready_) SendStatusIfChanged(/*with_ready=*/false);
}

void SystemdNotifier::SendStatusIfChanged(bool with_ready) {
  std::string status = status_line_();
  if (!with_ready && status == last_status_) return;
  last_status_ = status;
  Notify(std::string(with_ready ? "READY=1\n" : "") + "STATUS=" + status);
}

// FP8D_FAULT_BLOCK_IO_AFTER_MS=N: N ms after READY=1 the io thread blocks, as a wedged manager
// would, so a test can see the watchdog pings stop and the health probes fail; with
// FP8D_FAULT_BLOCK_IO_FOR_MS=M the block ends after M ms (else at Stop()). Never set in
// production.
void SystemdNotifier::ArmFaultHookForTests() {
  const char* after = std::getenv("FP8D_FAULT_BLOCK_IO_AFTER_MS");
  if (after == nullptr || *after == '\0') return;
  char* end = nullptr;
  const long ms = std::strtol(after, &end, 10);
  if (*end != '\0' || ms < 0) {
    spdlog::error("FP8D_FAULT_BLOCK_IO_AFTER_MS={}: expected a number of milliseconds", after);
    return;
  }
  long for_ms = -1;  // until Stop()
  if (const char* length = std::getenv("FP8D_FAULT_BLOCK_IO_FOR_MS"); length != nullptr && *length != '\0') {
    for_ms = std::strtol(length, &end, 10);
    if (*end != '\0' || for_ms < 0) {
      spdlog::error("FP8D_FAULT_BLOCK_IO_FOR_MS={}: expected a number of milliseconds", length);
      return;
    }
  }
  spdlog::warn("fault hook: the manager's io thread will block in {} ms", ms);
  fault_timer_.expires_after(std::chrono::milliseconds(ms));
  fault_timer_.async_wait([this, for_ms](const boost::system::error_code& ec) {
    if (ec) return;
    spdlog::warn("fault hook: blocking the manager's io thread");
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(for_ms);
    while (!released_ && (for_ms < 0 || std::chrono::steady_clock::now() < until)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!released_) spdlog::warn("fault hook: the manager's io thread runs again");
  });
}

}  // namespace fp8d::server
