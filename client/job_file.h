// SPDX-License-Identifier: Apache-2.0
// Job files for fp8ctl submit: YAML or JSON with the fields of fp8d.v1.Job (snake_case).
// The YAML tree fills the Job through its descriptor (no proto JSON detour), so an unknown field
// is reported with its path ("unknown field job.train.trainig"), a string field written as a
// bare number stays a string, and durations may be written "500ms", "30s", "5m", "2h" or
// "1h30m" (converted to google.protobuf.Duration).
//
// Relative paths in the spec (train.data.train/val, train.output_dir, calibrate.input,
// calibrate.output_dir, calibrate.activations.data) are resolved against the directory of the
// job file (the current directory for text given directly) and sent absolute, because the
// daemon runs in another directory.
#pragma once

#include <string>
#include <vector>

#include <google/protobuf/duration.pb.h>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::client {

// "500ms", "1.5s", "30m", "2h", "1h30m", "100us", "0"; a bare number means seconds.
fp8::StatusOr<google::protobuf::Duration> ParseDuration(const std::string& text);

// Parses YAML/JSON text into a Job. Errors are INVALID_ARGUMENT naming the field.
fp8::StatusOr<fp8d::v1::Job> ParseJobText(const std::string& text, const std::string& base_dir);
// Reads and parses a file ("-" = stdin, resolved against the current directory).
fp8::StatusOr<fp8d::v1::Job> LoadJobFile(const std::string& path);

// Clears the output-only fields (name, state, attempt, progress, checkpoint, result, error,
// times, version, attempts, events, owner, run_as_uid) and returns the names of those that
// were set, so `fp8ctl submit` of a file saved with `fp8ctl get -o yaml` works and says what
// it ignored.
std::vector<std::string> ClearOutputOnlyFields(fp8d::v1::Job& job);

// Makes the spec's relative paths absolute against `base_dir`.
void ResolveJobPaths(fp8d::v1::Job& job, const std::string& base_dir);

}  // namespace fp8d::client
