// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/calibrate_main.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "worker/calibrate/calibrate.h"
#include "worker/calibrate/spec.h"
#include "worker/common/events.h"

namespace fp8::calibrate {

namespace {

using worker::EventWriter;
using worker::WorkerEvent;

struct ExitClass {
  int code;
  WorkerEvent::ErrorClass failure_class;
};

// Status code → worker exit code and `error` event class (docs/design.md §4).
ExitClass Classify(StatusCode code) {
  switch (code) {
    case StatusCode::kFailedPrecondition: return {worker::kExitInvalidSpec, WorkerEvent::INVALID_SPEC};
    case StatusCode::kInvalidArgument:
    case StatusCode::kDataLoss:
    case StatusCode::kNotFound:
    case StatusCode::kOutOfRange: return {worker::kExitBadData, WorkerEvent::DATA_ERROR};
    case StatusCode::kAborted:
    case StatusCode::kUnavailable:
    case StatusCode::kResourceExhausted: return {worker::kExitTemporary, WorkerEvent::INTERNAL_ERROR};
    default: return {worker::kExitInternal, WorkerEvent::INTERNAL_ERROR};
  }
}

int Fail(EventWriter& events, int code, WorkerEvent::ErrorClass failure_class, const std::string& message) {
  std::fprintf(stderr, "fp8-worker calibrate: %s\n", message.c_str());
  events.Emit(worker::ErrorEvent(failure_class, message));
  return code;
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace

int CalibrateMain(int argc, char** argv) {
  std::string spec_path, events_path;
  int max_shards = -1;
  std::string arg_error;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        arg_error = a + " needs a value";
        return "";
      }
      return argv[++i];
    };
    if (a == "--spec") {
      spec_path = value();
    } else if (a == "--events") {
      events_path = value();
    } else if (a == "--max-shards") {
      const std::string v = value();
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0) arg_error = "--max-shards needs a non-negative integer";
      max_shards = static_cast<int>(n);
    } else {
      arg_error = "unknown argument \"" + a + "\"";
    }
    if (!arg_error.empty()) break;
  }

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> events_file(nullptr, &std::fclose);
  if (!events_path.empty()) {
    events_file.reset(std::fopen(events_path.c_str(), "a"));
    if (!events_file) {
      std::fprintf(stderr, "fp8-worker calibrate: cannot open --events %s\n", events_path.c_str());
      return worker::kExitInvalidSpec;
    }
  }
  EventWriter events(events_file ? events_file.get() : stdout);
  if (arg_error.empty() && spec_path.empty()) arg_error = "--spec is required";
  if (!arg_error.empty())
    return Fail(events, worker::kExitInvalidSpec, WorkerEvent::INVALID_SPEC,
                arg_error + " (usage: fp8-worker calibrate --spec spec.json)");

  auto opts = LoadCalibrateSpec(spec_path);
  if (!opts.ok()) return Fail(events, worker::kExitInvalidSpec, WorkerEvent::INVALID_SPEC, opts.status().message());

  events.Emit(worker::StartedEvent(EnvInt("FP8D_RANK", 0), EnvInt("FP8D_WORLD_SIZE", 1), ::getpid(), 0));
  worker::InstallStopSignalHandlers();
  events.StartHeartbeat(2000);

  RunControls controls;
  controls.max_shards = max_shards;
  controls.stop_requested = [] { return worker::StopRequested().load(); };
  controls.on_progress = [&](const ProgressUpdate& p) {
    WorkerEvent ev;
    WorkerEvent::Progress* f = ev.mutable_progress();
    f->set_step(p.step);
    f->set_total_steps(p.total_steps);
    f->set_tensor(p.tensor);
    f->set_shard(p.shard);
    f->set_skipped(p.skipped);
    f->set_bytes_done(static_cast<int64_t>(p.bytes_done));
    f->set_bytes_total(static_cast<int64_t>(p.bytes_total));
    if (p.elapsed_seconds > 0 && p.bytes_done > 0)
      f->set_eta_seconds(p.elapsed_seconds * static_cast<double>(p.bytes_total - p.bytes_done) / p.bytes_done);
    events.Emit(std::move(ev));
  };
  auto result = RunCalibration(*opts, controls);
  events.StopHeartbeat();
  if (!result.ok()) {
    const ExitClass ec = Classify(result.status().code());
    return Fail(events, ec.code, ec.failure_class, result.status().message());
  }
  std::fprintf(stderr, "fp8-worker calibrate: done: %s\n", result->dump().c_str());
  events.Emit(worker::DoneEvent(*result));
  return worker::kExitOk;
}

}  // namespace fp8::calibrate
