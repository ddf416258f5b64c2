// SPDX-License-Identifier: Apache-2.0
// How fp8ctl prints jobs: `table` for people, `json` (proto JSON, snake_case) and `yaml` for
// scripts, and the one-line progress view of `watch`.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <google/protobuf/message.h>

#include "fp8d/v1/job_service.pb.h"

namespace fp8d::client {

// kName: bare `jobs/<id>` lines, as kubectl's -o name.
enum class OutputFormat { kTable, kJson, kYaml, kName };

// Proto JSON with snake_case names and 2-space indentation.
std::string MessageToJson(const google::protobuf::Message& message);
// Proto JSON on one line (NDJSON streams: watch -o json, logs -o json).
std::string MessageToJsonLine(const google::protobuf::Message& message);
std::string MessageToYaml(const google::protobuf::Message& message);

void PrintJob(const fp8d::v1::Job& job, OutputFormat format, std::ostream& out);
// The table (NAME, DISPLAY NAME, OWNER, KIND, STATE, ATTEMPT, STEP, AGE, REASON) fits in
// `columns` where it can: REASON, DISPLAY NAME and OWNER are cut with "...", then KIND and
// ATTEMPT are left out.
void PrintJobs(const std::vector<fp8d::v1::Job>& jobs, OutputFormat format, std::ostream& out,
               int columns = 80);
// `fp8ctl queues`: one row per queue (quota, in use, borrowed, pending, running), or the
// ListQueuesResponse as JSON/YAML; `name` prints the queue names.
void PrintQueues(const fp8d::v1::ListQueuesResponse& queues, OutputFormat format, std::ostream& out);
// `fp8ctl usage`: one row per owner or queue with GPU and CPU-slot hours and seconds, or the
// GetUsageResponse as JSON/YAML; `name` prints the keys. `by` names the key column.
void PrintUsage(const fp8d::v1::GetUsageResponse& usage, const std::string& by, OutputFormat format,
                std::ostream& out);
// The job plus its attempts and events (GetJob with JOB_VIEW_FULL).
void PrintDescribe(const fp8d::v1::Job& job, OutputFormat format, std::ostream& out);

// "3m05s", "1h02m", "45s".
std::string HumanDuration(double seconds);
// One line for `watch`: state, step/total, loss, tokens/s, ETA; with `bar_width` > 0 a bar.
std::string ProgressLine(const fp8d::v1::Job& job, int bar_width);
// The progress line for a terminal `columns` wide: the bar shrinks (or goes) first, then the
// line is cut, so it never wraps.
std::string FitProgressLine(const fp8d::v1::Job& job, int columns);
// Why a job ended badly: "cancelled: ...", "WORKER_CRASH: ...", or "" without an error.
std::string ErrorText(const fp8d::v1::Job& job);

}  // namespace fp8d::client
