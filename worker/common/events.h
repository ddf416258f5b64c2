// The worker's side of design §4: NDJSON events on stdout, one object per line, each with
// "type" and "time" (Unix seconds). Thread-safe: the heartbeat thread and the training loop
// write through the same EventWriter, a line at a time, flushed at once (stdout is a file the
// agent tails, so a line must never be torn).
//
// Event types and their fields (the daemon's contract):
//   started     {rank, world_size, pid, step}            once the worker is initialised
//   heartbeat   {}                                       from its own thread, every period
//   progress    {step, total_steps, loss, lr, grad_norm, tokens_per_sec, mfu?, eta_seconds?}
//   checkpoint  {step, path, checksum}                   only after it is complete on disk
//   metric      {name, value, step}
//   done        {result: {...}}                          final metrics, then exit 0
//   error       {class, message}  class ∈ INVALID_SPEC, DATA_ERROR, NUMERIC, INTERNAL_ERROR
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace fp8::worker {

class EventWriter {
 public:
  // Writes to `out` (stdout by default). Only rank-local: every rank writes its own stream.
  explicit EventWriter(std::FILE* out = stdout) : out_(out) {}
  ~EventWriter() { StopHeartbeat(); }

  // Adds "type" and "time" and writes one line.
  void Emit(const std::string& type, nlohmann::json fields = nlohmann::json::object());

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

// Set by SIGTERM/SIGINT: stop at the next step boundary (design §4).
std::atomic<bool>& StopRequested();
void InstallStopSignalHandlers();

}  // namespace fp8::worker
