// SPDX-License-Identifier: Apache-2.0
// The calibration job (docs/design.md §6): converts a checkpoint's linear weights to FP8 E4M3
// with 128x128 block (or channel / tensor) scales, or back to BF16, one tensor at a time. The FP8
// checkpoint is in DeepSeek-V3's layout (`weight_scale_inv`) or llm-compressor's compressed-tensors
// one (`weight_scale`, `input_scale`), by CalibrateSpec.output_format; dequantize reads both.
//
// Output protocol — the output directory appears complete or not at all:
//   <output_dir>.partial/              staging; shards land here, each written atomically
//   <output_dir>.partial/.fp8-calibrate/state.json     spec + input fingerprint
//   <output_dir>.partial/.fp8-calibrate/<shard>.json   "shard done" marker with its reports
// A restart with the same spec and input keeps finished shards and redoes the rest. At the end
// the index, config.json, report.json/report.txt are written, the markers removed, and the
// staging directory renamed to <output_dir>.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/calibrate/spec.h"

namespace fp8::calibrate {

inline constexpr const char* kReportJson = "report.json";
inline constexpr const char* kReportText = "report.txt";

struct ProgressUpdate {
  int64_t step = 0, total_steps = 0;  // tensors done / total (skipped shards count as done)
  std::string tensor, shard;
  bool skipped = false;               // a finished shard from an earlier attempt
  uint64_t bytes_done = 0, bytes_total = 0;
  double elapsed_seconds = 0;
};

struct RunControls {
  // Called after every tensor (and once per skipped shard).
  std::function<void(const ProgressUpdate&)> on_progress;
  // Returns true when the job should stop at the next tensor boundary (SIGTERM).
  std::function<bool()> stop_requested;
  // Stop (Aborted, as if interrupted) after finishing this many shards in this run; < 0: no
  // limit. For testing restarts deterministically.
  int max_shards = -1;
};

// Returns the summary for the `done` event. Error codes: FailedPrecondition for a spec that
// cannot be carried out (input missing, output_dir occupied) → exit 64; InvalidArgument /
// DataLoss for bad input → exit 65; Aborted when stopped → 75; Unavailable for I/O → 75.
StatusOr<nlohmann::json> RunCalibration(const CalibrateOptions& opts, const RunControls& controls);

}  // namespace fp8::calibrate
