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
void PrintJobs(const std::vector<fp8d::v1::Job>& jobs, OutputFormat format, std::ostream& out);
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
