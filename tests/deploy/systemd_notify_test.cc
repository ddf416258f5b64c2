// SPDX-License-Identifier: Apache-2.0
// fp8d's systemd notify protocol for real: the test is the service manager. It binds a unix
// datagram socket, hands it to fp8d as $NOTIFY_SOCKET with a $WATCHDOG_USEC, and reads what
// fp8d sends: READY=1 only once recovery has loaded the stored jobs (its STATUS= counts them),
// WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1 on SIGTERM, and no more pings once the
// manager's io thread is blocked on purpose (FP8D_FAULT_BLOCK_IO_AFTER_MS).
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/daemon_process.h"

namespace fp8d::itest {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Datagram {
  Clock::time_point at;
  std::string text;
};

// The service manager's end of $NOTIFY_SOCKET: a bound datagram socket and a reader thread.
class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    unlink(path_.c_str());
    bound_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (bound_) reader_ = std::thread([this] { Read(); });
  }
  ~NotifySocket() {
    stop_ = true;
    if (reader_.joinable()) reader_.join();
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }
  std::vector<Datagram> Received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    received_.clear();
  }

 private:
  void Read() {
    char buf[4096];
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      received_.push_back({Clock::now(), std::string(buf, static_cast<size_t>(n))});
    }
  }

  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
  std::atomic<bool> stop_{false};
  std::thread reader_;
  std::mutex mu_;
  std::vector<Datagram> received_;
};

bool Has(const Datagram& d, const std::string& line) {
  return ("\n" + d.text + "\n").find("\n" + line + "\n") != std::string::npos;
}

std::vector<Clock::time_point> Pings(const std::vector<Datagram>& all, Clock::time_point from) {
  std::vector<Clock::time_point> out;
  for (const auto& d : all) {
    if (d.at >= from && Has(d, "WATCHDOG=1")) out.push_back(d.at);
  }
  return out;
}

std::string Dump(const std::vector<Datagram>& all) {
  std::string out;
  const Clock::time_point t0 = all.empty() ? Clock::now() : all.front().at;
  for (const auto& d : all) {
    out += std::to_string(std::chrono::duration_cast<milliseconds>(d.at - t0).count()) + " ms: " + d.text + "\n";
  }
  return out;
}

constexpr int kJobs = 5;
constexpr int64_t kWatchdogUsec = 2'000'000;  // pings every 1 s

class SystemdNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_.path() + "/data";
    // N stored jobs for recovery: one slot, so one job runs (a worker fp8d re-adopts) and the
    // others stay QUEUED; long enough that none finishes during the test.
    DaemonOptions options;
    options.cpu_slots = 1;
    options.env = {{"FP8_TEST_STEP_MS", "100"}};
    Daemon seed(data_, options);
    fp8::Status st = seed.Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::vector<std::string> names;
    for (int i = 0; i < kJobs; ++i) {
      auto j = seed.client().CreateJob(TestTrainJob(tmp_.path() + "/out/j" + std::to_string(i), 5000));
      ASSERT_TRUE(j.ok()) << j.status().ToString();
      names.push_back(j->name());
    }
    ASSERT_TRUE(PollUntil([&] {
      auto j = seed.client().GetJob(names[0]);
      return j.ok() && j->state() == fp8d::v1::RUNNING;
    })) << seed.Log();
    seed.Signal(SIGTERM);  // workers keep running; the next fp8d recovers all five jobs
    ASSERT_EQ(seed.Wait(), 0) << seed.Log();
  }

  void TearDown() override {
    // A plain fp8d on the same store cancels every job, so no worker outlives the test.
    DaemonOptions options;
    options.cpu_slots = 1;
    Daemon cleanup(data_, options);
    if (cleanup.Start().ok()) cleanup.CancelAll();
  }

  DaemonOptions NotifyOptions(const NotifySocket& sock) {
    DaemonOptions options;
    options.cpu_slots = 1;
    options.env = {{"NOTIFY_SOCKET", sock.path()},
                   {"WATCHDOG_USEC", std::to_string(kWatchdogUsec)},
                   {"FP8_TEST_STEP_MS", "100"}};
    return options;
  }

  TempDir tmp_;
  std::string data_;
};

TEST_F(SystemdNotifyTest, ReadyAfterRecoveryThenWatchdogAtHalfThePeriodThenStopping) {
  NotifySocket sock(tmp_.path() + "/notify.sock");
  ASSERT_TRUE(sock.bound());
  Daemon daemon(data_, NotifyOptions(sock));
  fp8::Status st = daemon.Start();
  ASSERT_TRUE(st.ok()) << st.ToString();

  Clock::time_point ready_at{};
  ASSERT_TRUE(PollUntil([&] {
    for (const auto& d : sock.Received()) {
      if (Has(d, "READY=1")) {
        ready_at = d.at;
        return true;
      }
    }
    return false;
  }, std::chrono::seconds(30))) << Dump(sock.Received());

  // READY=1 comes once, with the counts of the recovered jobs: recovery had loaded all of them.
  std::vector<Datagram> all = sock.Received();
  const auto readies = std::count_if(all.begin(), all.end(), [](const Datagram& d) { return Has(d, "READY=1"); });
  EXPECT_EQ(readies, 1) << Dump(all);
  for (const auto& d : all) {
    if (Has(d, "READY=1")) {
      EXPECT_TRUE(Has(d, "STATUS=jobs: 1 running, " + std::to_string(kJobs - 1) + " queued")) << d.text;
    } else if (d.at < ready_at && d.text.find("STATUS=") != std::string::npos) {
      EXPECT_TRUE(Has(d, "STATUS=recovering")) << "before READY=1: " << d.text;
    }
  }
  EXPECT_NE(daemon.Log().find("recovery finished"), std::string::npos) << daemon.Log();

  // WATCHDOG=1 every WATCHDOG_USEC/2 = 1 s: over 6 s, about 6 pings and never a gap that
  // would let the watchdog fire.
  std::this_thread::sleep_for(milliseconds(6200));
  all = sock.Received();
  const auto pings = Pings(all, ready_at);
  EXPECT_GE(pings.size(), 5u) << Dump(all);
  EXPECT_LE(pings.size(), 8u) << Dump(all);
  std::vector<int64_t> gaps;
  for (size_t i = 1; i < pings.size(); ++i) {
    gaps.push_back(std::chrono::duration_cast<milliseconds>(pings[i] - pings[i - 1]).count());
  }
  ASSERT_FALSE(gaps.empty());
  std::sort(gaps.begin(), gaps.end());
  EXPECT_GE(gaps[gaps.size() / 2], 800) << Dump(all);
  EXPECT_LE(gaps[gaps.size() / 2], 1300) << Dump(all);
  EXPECT_LT(gaps.back(), kWatchdogUsec / 1000) << Dump(all);

  sock.Clear();
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(), 0) << daemon.Log();
  all = sock.Received();
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), [](const Datagram& d) { return Has(d, "STOPPING=1"); }))
      << Dump(all);
}

TEST_F(SystemdNotifyTest, ABlockedManagerThreadStopsTheWatchdogPings) {
  NotifySocket sock(tmp_.path() + "/notify.sock");
  ASSERT_TRUE(sock.bound());
  DaemonOptions options = NotifyOptions(sock);
  options.env["FP8D_FAULT_BLOCK_IO_AFTER_MS"] = "2500";
  Daemon daemon(data_, options);
  fp8::Status st = daemon.Start();
  ASSERT_TRUE(st.ok()) << st.ToString();

  ASSERT_TRUE(PollUntil([&] { return daemon.Log().find("fault hook: blocking") != std::string::npos; },
                        std::chrono::seconds(30))) << daemon.Log();
  const Clock::time_point blocked_at = Clock::now();
  std::vector<Datagram> all = sock.Received();
  ASSERT_GE(Pings(all, Clock::time_point{}).size(), 2u) << "pings flowed before the block\n" << Dump(all);

  // 2.5 watchdog periods: systemd would have restarted fp8d by now.
  std::this_thread::sleep_for(milliseconds(5000));
  all = sock.Received();
  // A ping sent just before the block may arrive as the log line is read; none after that.
  const auto late = Pings(all, blocked_at + milliseconds(200));
  EXPECT_TRUE(late.empty()) << late.size() << " pings while the io thread was blocked\n" << Dump(all);
  // The gRPC threads still answer; gRPC health and /healthz turn NOT_SERVING only after
  // --health-io-bound-ms (tests/integration/ops_test.cc), systemd's watchdog sees it first.
  daemon.Signal(SIGKILL);
  EXPECT_EQ(daemon.Wait(), 128 + SIGKILL);
}

TEST(SystemdNotifyOff, WithoutNotifySocketNothingIsSentAndFp8dRunsAsBefore) {
  // No $NOTIFY_SOCKET: fp8d starts, serves and stops cleanly (sd_notify is a no-op).
  TempDir tmp;
  DaemonOptions options;
  options.env = {{"WATCHDOG_USEC", std::to_string(kWatchdogUsec)}};
  Daemon daemon(tmp.path() + "/data", options);
  fp8::Status st = daemon.Start();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(daemon.Log().find("systemd watchdog"), std::string::npos) << daemon.Log();
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(), 0) << daemon.Log();
}

}  // namespace
}  // namespace fp8d::itest
