// SPDX-License-Identifier: Apache-2.0
// The worker's side of docs/design.md §4: events on stdout, one JSON object per line, each a
// fp8d.v1.WorkerEvent (proto/fp8d/v1/worker_event.proto, the contract with the daemon) printed
// by protobuf's JSON printer. Thread-safe: the heartbeat thread and the training loop write
// through the same EventWriter, a line at a time, flushed at once (stdout is a file the launcher
// tails, so a line must never be torn).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "fp8d/v1/worker_event.pb.h"

namespace fp8::worker {

using fp8d::v1::WorkerEvent;

// Builders for the events whose fields are all given at once (progress is filled in place:
// its fields depend on the job kind).
WorkerEvent StartedEvent(int rank, int world_size, int64_t pid, int64_t step);
WorkerEvent CheckpointEvent(int64_t step, const std::string& path, const std::string& checksum);
// Stopped by SIGTERM at `step`, whose checkpoint is `checkpoint` ("" on ranks that write none).
WorkerEvent PreemptedEvent(int64_t step, const std::string& checkpoint);
WorkerEvent MetricEvent(const std::string& name, double value, int64_t step);
// `result` must be a JSON object (it becomes Job.result); NaN values in it become null.
WorkerEvent DoneEvent(const nlohmann::json& result);
WorkerEvent ErrorEvent(WorkerEvent::ErrorClass error_class, const std::string& message);

// One line of the events stream (without the '\n'). An event the printer refuses (it cannot
// fail for these messages) comes out as an INTERNAL_ERROR event that says so.
std::string EventLine(const WorkerEvent& event);

class EventWriter {
 public:
  // Writes to `out` (stdout by default). Only rank-local: every rank writes its own stream.
  explicit EventWriter(std::FILE* out = stdout) : out_(out) {}
  ~EventWriter() { StopHeartbeat(); }

  // Stamps `time` and writes one line.
  void Emit(WorkerEvent event);
  // Starts a thread that emits `heartbeat` every `period_ms` until StopHeartbeat().
  void StartHeartbeat(int period_ms);
  void StopHeartbeat();

 private:
  std::FILE* out_;
  std::mutex write_mu_;
  std::mutex hb_mu_;
  std::condition_variable hb_cv_;
  bool hb_stop_ = false;
  std::thread hb_thread_;
};

// sysexits codes of the worker contract.
constexpr int kExitOk = 0;
constexpr int kExitInvalidSpec = 64;  // EX_USAGE: permanent
constexpr int kExitBadData = 65;      // EX_DATAERR: permanent
constexpr int kExitInternal = 70;     // EX_SOFTWARE: retryable
constexpr int kExitTemporary = 75;    // EX_TEMPFAIL: retryable (NaN/Inf loss too)
// Stopped by SIGTERM at a step boundary after its checkpoint and `preempted` event. The daemon
// reads it as PREEMPTED only when it asked for the preemption (else WORKER_CRASH).
constexpr int kExitPreempted = 76;

// Set by SIGTERM/SIGINT: stop at the next step boundary (docs/design.md §4).
std::atomic<bool>& StopRequested();
void InstallStopSignalHandlers();

}  // namespace fp8::worker
