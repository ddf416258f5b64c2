#include "worker/common/events.h"

#include <csignal>
#include <chrono>

namespace fp8::worker {

namespace {
double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void EventWriter::Emit(const std::string& type, nlohmann::json fields) {
  if (!fields.is_object()) fields = nlohmann::json::object();
  fields["type"] = type;
  fields["time"] = UnixSeconds();
  // NaN is not JSON: dump() would write null; replace_invalid keeps odd bytes from breaking it.
  std::string line = fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(write_mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

void EventWriter::StartHeartbeat(int period_ms) {
  StopHeartbeat();
  {
    std::lock_guard<std::mutex> lock(hb_mu_);
    hb_stop_ = false;
  }
  hb_thread_ = std::thread([this, period_ms] {
    std::unique_lock<std::mutex> lock(hb_mu_);
    while (!hb_cv_.wait_for(lock, std::chrono::milliseconds(period_ms), [this] { return hb_stop_; })) {
      lock.unlock();
      Emit("heartbeat");
      lock.lock();
    }
  });
}

void EventWriter::StopHeartbeat() {
  {
    std::lock_guard<std::mutex> lock(hb_mu_);
    hb_stop_ = true;
  }
  hb_cv_.notify_all();
  if (hb_thread_.joinable()) hb_thread_.join();
}

std::atomic<bool>& StopRequested() {
  static std::atomic<bool> flag{false};
  return flag;
}

namespace {
void OnStopSignal(int) { StopRequested().store(true); }
}  // namespace

void InstallStopSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

}  // namespace fp8::worker
