// SPDX-License-Identifier: Apache-2.0
#include "worker/common/events.h"

#include <google/protobuf/util/json_util.h>

#include <csignal>
#include <chrono>
#include <cmath>

namespace fp8::worker {

namespace {

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// NaN is not JSON: dump() writes null, and replace keeps odd bytes from breaking the line.
std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

WorkerEvent StartedEvent(int rank, int world_size, int64_t pid, int64_t step) {
  WorkerEvent ev;
  WorkerEvent::Started* s = ev.mutable_started();
  s->set_rank(rank);
  s->set_world_size(world_size);
  s->set_pid(pid);
  s->set_step(step);
  return ev;
}

WorkerEvent CheckpointEvent(int64_t step, const std::string& path, const std::string& checksum) {
  WorkerEvent ev;
  WorkerEvent::Checkpoint* c = ev.mutable_checkpoint();
  c->set_step(step);
  c->set_path(path);
  c->set_checksum(checksum);
  return ev;
}

WorkerEvent PreemptedEvent(int64_t step, const std::string& checkpoint) {
  WorkerEvent ev;
  WorkerEvent::Preempted* p = ev.mutable_preempted();
  p->set_step(step);
  p->set_checkpoint(checkpoint);
  return ev;
}

WorkerEvent MetricEvent(const std::string& name, double value, int64_t step) {
  WorkerEvent ev;
  WorkerEvent::Metric* m = ev.mutable_metric();
  m->set_name(name);
  m->set_value(value);
  m->set_step(step);
  return ev;
}

WorkerEvent DoneEvent(const nlohmann::json& result) {
  WorkerEvent ev;
  google::protobuf::Struct* out = ev.mutable_done()->mutable_result();
  if (result.is_object()) {
    // A JSON object always parses into a Struct.
    (void)google::protobuf::util::JsonStringToMessage(Dump(result), out);
  }
  return ev;
}

WorkerEvent ErrorEvent(WorkerEvent::ErrorClass error_class, const std::string& message) {
  WorkerEvent ev;
  ev.mutable_error()->set_class_(error_class);
  ev.mutable_error()->set_message(message);
  return ev;
}

std::string EventLine(const WorkerEvent& event) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string line;
  const auto st = google::protobuf::util::MessageToJsonString(event, &line, options);
  if (st.ok()) return line;
  WorkerEvent err = ErrorEvent(WorkerEvent::INTERNAL_ERROR,
                               "cannot print a worker event: " + std::string(st.message()));
  err.set_time(event.time());
  line.clear();
  (void)google::protobuf::util::MessageToJsonString(err, &line, options);
  return line;
}

void EventWriter::Emit(WorkerEvent event) {
  event.set_time(UnixSeconds());
  std::string line = EventLine(event);
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
      WorkerEvent hb;
      hb.mutable_heartbeat();
      Emit(std::move(hb));
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
