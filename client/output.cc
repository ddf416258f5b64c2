// SPDX-License-Identifier: Apache-2.0
#include "client/output.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <sstream>

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace fp8d::client {
namespace {

using fp8d::v1::Job;
using nlohmann::json;

void EmitYaml(YAML::Emitter& out, const json& j) {
  if (j.is_object()) {
    out << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      out << YAML::Key << k << YAML::Value;
      EmitYaml(out, v);
    }
    out << YAML::EndMap;
  } else if (j.is_array()) {
    out << YAML::BeginSeq;
    for (const auto& v : j) EmitYaml(out, v);
    out << YAML::EndSeq;
  } else if (j.is_string()) {
    out << j.get<std::string>();
  } else if (j.is_null()) {
    out << YAML::Null;
  } else {
    out << j.dump();
  }
}

std::string Time(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  std::time_t secs = static_cast<std::time_t>(t.seconds());
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string Age(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0) return "-";
  const double now = static_cast<double>(std::time(nullptr));
  return HumanDuration(std::max(0.0, now - static_cast<double>(t.seconds())));
}

std::string StepText(const Job& job) {
  if (!job.has_progress() || (job.progress().step() == 0 && job.progress().total_steps() == 0)) return "-";
  return std::to_string(job.progress().step()) + "/" + std::to_string(job.progress().total_steps());
}

std::string Fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

std::string Rate(double tokens_per_second) {
  if (tokens_per_second >= 1e6) return Fixed(tokens_per_second / 1e6, 2) + "M";
  if (tokens_per_second >= 1e3) return Fixed(tokens_per_second / 1e3, 1) + "k";
  return Fixed(tokens_per_second, 0);
}

void Row(std::ostream& out, const std::vector<std::string>& cells, const std::vector<size_t>& widths) {
  for (size_t i = 0; i < cells.size(); ++i) {
    out << cells[i];
    if (i + 1 < cells.size()) out << std::string(widths[i] + 2 - std::min(widths[i], cells[i].size()), ' ');
  }
  out << "\n";
}

void Table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) return;
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) widths[i] = std::max(widths[i], r[i].size());
  for (const auto& r : rows) Row(out, r, widths);
}

// A Struct value as text: integers without a fraction, reals with 4 significant digits.
std::string ValueText(const google::protobuf::Value& v) {
  switch (v.kind_case()) {
    case google::protobuf::Value::kNumberValue: {
      const double d = v.number_value();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) return std::to_string(static_cast<long long>(d));
      std::ostringstream s;
      s << std::setprecision(4) << d;
      return s.str();
    }
    case google::protobuf::Value::kStringValue:
      return v.string_value();
    case google::protobuf::Value::kBoolValue:
      return v.bool_value() ? "true" : "false";
    case google::protobuf::Value::kNullValue:
      return "-";
    default:
      return "";
  }
}

// A mixture-of-experts job's expert load, as the worker last reported it (absent for dense
// models, so nothing is shown for them).
void MoeRows(const fp8d::v1::Progress& p, std::vector<std::vector<std::string>>& rows) {
  if (p.has_moe_load_min() && p.has_moe_load_max()) {
    std::string load = Fixed(p.moe_load_min(), 2) + " .. " + Fixed(p.moe_load_max(), 2) + " × mean";
    if (p.has_moe_load_cv()) load += ", CV " + Fixed(p.moe_load_cv(), 3);
    rows.push_back({"Expert load:", load});
  }
  if (p.has_moe_dropped_fraction()) {
    rows.push_back({"Dropped tokens:", Fixed(100 * p.moe_dropped_fraction(), 2) + "%"});
  }
  if (p.has_moe_aux_loss()) rows.push_back({"Aux loss:", Fixed(p.moe_aux_loss(), 4)});
}

// A calibration's result rows (the worker's `done` summary) instead of loss and tokens/s.
void CalibrationRows(const Job& job, std::vector<std::vector<std::string>>& rows) {
  const auto& fields = job.result().fields();
  auto add = [&](const char* key, const char* label) {
    auto it = fields.find(key);
    if (it != fields.end()) rows.push_back({label, ValueText(it->second)});
  };
  add("tensors_converted", "Tensors converted:");
  add("tensors_copied", "Tensors copied:");
  add("max_rel_error", "Max relative error:");
  add("min_snr_db", "Min SNR (dB):");
  add("output_dir", "Output dir:");
}

}  // namespace

std::string ErrorText(const Job& job) {
  if (!job.has_error()) return "";
  // A cancellation is not a failure class: say what happened.
  std::string s = job.error().failure_class() == fp8d::v1::FAILURE_CLASS_UNSPECIFIED
                      ? (job.state() == fp8d::v1::CANCELLED || job.error().code() == 1 ? "cancelled" : "error")
                      : fp8d::v1::FailureClass_Name(job.error().failure_class());
  if (!job.error().message().empty()) s += ": " + job.error().message();
  return s;
}

std::string MessageToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::string MessageToJsonLine(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::string MessageToYaml(const google::protobuf::Message& message) {
  YAML::Emitter out;
  EmitYaml(out, json::parse(MessageToJson(message)));
  return std::string(out.c_str()) + "\n";
}

std::string HumanDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lds", s);
  }
  return buf;
}

void PrintJob(const Job& job, OutputFormat format, std::ostream& out) {
  if (format == OutputFormat::kName) {
    out << job.name() << "\n";
    return;
  }
  if (format == OutputFormat::kJson) {
    out << MessageToJson(job);
    return;
  }
  if (format == OutputFormat::kYaml) {
    out << MessageToYaml(job);
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"Name:", job.name()},
      {"Display name:", job.display_name()},
      {"Kind:", fp8d::v1::JobKind_Name(job.kind())},
      {"State:", fp8d::v1::JobState_Name(job.state())},
      {"Attempt:", std::to_string(job.attempt())},
      {"Progress:", StepText(job)},
      {"Created:", Time(job.create_time())},
      {"Started:", Time(job.start_time())},
      {"Ended:", Time(job.end_time())},
      {"Version:", std::to_string(job.version())},
  };
  if (!job.queue().empty()) rows.push_back({"Queue:", job.queue()});
  if (job.has_preemptible() && !job.preemptible()) rows.push_back({"Preemptible:", "no"});
  if (job.depends_on_size() > 0) {
    std::string deps;
    for (const auto& d : job.depends_on()) deps += (deps.empty() ? "" : ", ") + d;
    rows.push_back({"Depends on:", deps});
  }
  if (!job.pending_reason().empty()) rows.push_back({"Pending reason:", job.pending_reason()});
  if (job.kind() == fp8d::v1::CALIBRATE) {
    CalibrationRows(job, rows);
  } else if (job.has_progress() && job.progress().step() > 0) {
    rows.push_back({"Loss:", Fixed(job.progress().loss(), 4)});
    rows.push_back({"Tokens/s:", Rate(job.progress().tokens_per_second())});
    MoeRows(job.progress(), rows);
  }
  if (job.has_checkpoint()) {
    rows.push_back({"Checkpoint:", job.checkpoint().path() + " (step " + std::to_string(job.checkpoint().step()) + ")"});
  }
  if (job.has_error()) rows.push_back({"Error:", ErrorText(job)});
  Table(out, rows);
}

// Why a job is where it is, on one line: its pending_reason (waiting for slots, a dependency,
// Slurm), else for a FAILED job its error; "-" for none.
std::string ReasonText(const Job& job) {
  std::string s = !job.pending_reason().empty()     ? job.pending_reason()
                  : job.state() == fp8d::v1::FAILED ? ErrorText(job)
                                                    : "";
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return s.empty() ? "-" : s;
}

// How a table gives up width: `column` is cut down to `floor` characters (its cells end in
// "..."), or with floor 0 left out.
struct Shrink {
  size_t column;
  size_t floor;
};

// A table at most `columns` wide: while it is wider, the steps are taken in order. A table
// whose other columns are wider still is printed as it is then.
void FitTable(std::ostream& out, std::vector<std::vector<std::string>>& rows, int columns,
              const std::vector<Shrink>& steps) {
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) widths[i] = std::max(widths[i], r[i].size());
  const std::vector<size_t> natural = widths;
  std::vector<bool> dropped(widths.size(), false);
  size_t total = 2 * (widths.size() - 1);
  for (size_t w : widths) total += w;
  const size_t room = static_cast<size_t>(std::max(columns - 1, 1));  // the last cell never touches the edge
  for (const Shrink& step : steps) {
    if (total <= room) break;
    if (dropped[step.column]) continue;
    if (step.floor == 0) {
      dropped[step.column] = true;
      total -= widths[step.column] + 2;
      continue;
    }
    const size_t floor = std::max<size_t>(step.floor, 4);
    const size_t cut = std::min(total - room, widths[step.column] > floor ? widths[step.column] - floor : 0);
    widths[step.column] -= cut;
    total -= cut;
  }
  // Leaving a column out may have freed more than was needed: the cut columns get it back,
  // in the order they were cut.
  for (const Shrink& step : steps) {
    if (total >= room || dropped[step.column] || step.floor == 0) continue;
    const size_t regain = std::min(room - total, natural[step.column] - widths[step.column]);
    widths[step.column] += regain;
    total += regain;
  }
  std::vector<size_t> kept_widths;
  for (size_t i = 0; i < widths.size(); ++i) {
    if (!dropped[i]) kept_widths.push_back(widths[i]);
  }
  for (const auto& r : rows) {
    std::vector<std::string> cells;
    for (size_t i = 0; i < r.size(); ++i) {
      if (dropped[i]) continue;
      cells.push_back(r[i].size() > widths[i] ? r[i].substr(0, widths[i] - 3) + "..." : r[i]);
    }
    Row(out, cells, kept_widths);
  }
}

namespace {

// A list response as one JSON or YAML document, with its list key present even when empty, so
// scripts can index it.
void PrintListDocument(const google::protobuf::Message& message, const char* list_key, OutputFormat format,
                       std::ostream& out) {
  json j = json::parse(MessageToJson(message));
  if (!j.contains(list_key)) j[list_key] = json::array();
  if (format == OutputFormat::kJson) {
    out << j.dump(1) << "\n";
  } else {
    YAML::Emitter y;
    EmitYaml(y, j);
    out << y.c_str() << "\n";
  }
}

}  // namespace

void PrintJobs(const std::vector<Job>& jobs, OutputFormat format, std::ostream& out, int columns) {
  if (format == OutputFormat::kName) {
    for (const auto& j : jobs) out << j.name() << "\n";
    return;
  }
  if (format != OutputFormat::kTable) {
    fp8d::v1::ListJobsResponse all;
    for (const auto& j : jobs) *all.add_jobs() = j;
    PrintListDocument(all, "jobs", format, out);
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "DISPLAY NAME", "OWNER", "KIND", "STATE", "ATTEMPT", "STEP", "AGE", "REASON"}};
  for (const auto& j : jobs) {
    rows.push_back({j.name(), j.display_name().empty() ? "-" : j.display_name(),
                    j.owner().empty() ? "-" : j.owner(), fp8d::v1::JobKind_Name(j.kind()),
                    fp8d::v1::JobState_Name(j.state()), std::to_string(j.attempt()), StepText(j),
                    Age(j.create_time()), ReasonText(j)});
  }
  // For 80 columns: the reason and names are cut first, then KIND and ATTEMPT go, then the
  // reason is cut to its header.
  FitTable(out, rows, columns, {{8, 16}, {1, 12}, {2, 8}, {3, 0}, {5, 0}, {8, 6}});
}

void PrintQueues(const fp8d::v1::ListQueuesResponse& queues, OutputFormat format, std::ostream& out) {
  if (format == OutputFormat::kName) {
    for (const auto& q : queues.queues()) out << q.name() << "\n";
    return;
  }
  if (format != OutputFormat::kTable) {
    PrintListDocument(queues, "queues", format, out);
    return;
  }
  // GPU and CPU-slot figures side by side as "gpus/cpu": a cluster usually has one kind only.
  auto pair = [](int64_t gpus, int64_t cpus) { return std::to_string(gpus) + "/" + std::to_string(cpus); };
  std::vector<std::vector<std::string>> rows = {
      {"QUEUE", "QUOTA (GPU/CPU)", "IN USE", "BORROWED", "WEIGHT", "PENDING", "RUNNING", "PRINCIPALS"}};
  for (const auto& q : queues.queues()) {
    std::ostringstream w;
    w << q.weight();
    std::string principals;
    for (const auto& p : q.principals()) principals += (principals.empty() ? "" : ",") + p;
    rows.push_back({q.name(), pair(q.quota_gpus(), q.quota_cpu_slots()), pair(q.used_gpus(), q.used_cpu_slots()),
                    pair(q.borrowed_gpus(), q.borrowed_cpu_slots()), w.str(), std::to_string(q.pending_jobs()),
                    std::to_string(q.running_jobs()), principals.empty() ? "*" : principals});
  }
  Table(out, rows);
  out << "cluster: " << queues.cluster_gpus() << " GPU slots, " << queues.cluster_cpu_slots() << " CPU slots\n";
}

void PrintUsage(const fp8d::v1::GetUsageResponse& usage, const std::string& by, OutputFormat format,
                std::ostream& out) {
  if (format == OutputFormat::kName) {
    for (const auto& r : usage.rows()) out << r.key() << "\n";
    return;
  }
  if (format != OutputFormat::kTable) {
    PrintListDocument(usage, "rows", format, out);
    return;
  }
  std::string key = by.empty() ? "OWNER" : by;
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::toupper(c); });
  std::vector<std::vector<std::string>> rows = {{key, "GPU-SECONDS", "GPU-HOURS", "CPU-SLOT-SECONDS", "CPU-SLOT-HOURS", "ATTEMPTS"}};
  double gpu = 0, cpu = 0;
  for (const auto& r : usage.rows()) {
    rows.push_back({r.key().empty() ? "-" : r.key(), Fixed(r.gpu_seconds(), 0), Fixed(r.gpu_seconds() / 3600, 2),
                    Fixed(r.cpu_slot_seconds(), 0), Fixed(r.cpu_slot_seconds() / 3600, 2), std::to_string(r.attempts())});
    gpu += r.gpu_seconds();
    cpu += r.cpu_slot_seconds();
  }
  Table(out, rows);
  out << "total: " << Fixed(gpu, 0) << " GPU-seconds, " << Fixed(cpu, 0) << " CPU-slot-seconds; from "
      << (usage.has_since() ? Time(usage.since()) : std::string("the first stored attempt")) << " to "
      << Time(usage.until()) << "\n";
}

void PrintDescribe(const Job& job, OutputFormat format, std::ostream& out) {
  PrintJob(job, format, out);
  if (format != OutputFormat::kTable) return;
  // The first event has no state to come from: a blank FROM, not JOB_STATE_UNSPECIFIED.
  auto state_text = [](fp8d::v1::JobState s) {
    return s == fp8d::v1::JOB_STATE_UNSPECIFIED ? std::string() : fp8d::v1::JobState_Name(s);
  };
  out << "\nAttempts:\n";
  std::vector<std::vector<std::string>> rows = {
      {"  #", "STARTED", "ENDED", "RANKS (node/gpu/pid/exit)", "FAILURE", "RESUMED FROM"}};
  for (const auto& a : job.attempts()) {
    std::string ranks;
    for (const auto& r : a.ranks()) {
      if (!ranks.empty()) ranks += " ";
      ranks += std::to_string(r.rank()) + ":" + r.node() + "/" +
               (r.gpu() < 0 ? std::string("cpu") : std::to_string(r.gpu())) + "/" +
               std::to_string(r.pid()) + "/" + (r.exit_status() < 0 ? "-" : std::to_string(r.exit_status()));
    }
    std::string failure = a.failure_class() == fp8d::v1::FAILURE_CLASS_UNSPECIFIED
                              ? "-"
                              : fp8d::v1::FailureClass_Name(a.failure_class());
    if (!a.failure_message().empty()) failure += ": " + a.failure_message();
    rows.push_back({"  " + std::to_string(a.number()), Time(a.start_time()), Time(a.end_time()),
                    ranks.empty() ? "-" : ranks, failure,
                    a.resumed_from().empty() ? "-" : a.resumed_from()});
  }
  Table(out, rows);
  out << "\nEvents:\n";
  rows = {{"  VERSION", "TIME", "FROM", "TO", "MESSAGE"}};
  for (const auto& e : job.events()) {
    rows.push_back({"  " + std::to_string(e.version()), Time(e.time()),
                    state_text(e.from_state()), state_text(e.to_state()),
                    e.message()});
  }
  Table(out, rows);
}

std::string ProgressLine(const Job& job, int bar_width) {
  std::ostringstream s;
  s << job.name() << " " << fp8d::v1::JobState_Name(job.state());
  if (job.attempt() > 1) s << " (attempt " << job.attempt() << ")";
  const auto& p = job.progress();
  if (p.total_steps() > 0 || p.step() > 0) {
    if (bar_width > 0 && p.total_steps() > 0) {
      const double frac = std::clamp(static_cast<double>(p.step()) / p.total_steps(), 0.0, 1.0);
      const int filled = static_cast<int>(frac * bar_width);
      s << " [" << std::string(filled, '#') << std::string(bar_width - filled, '.') << "]";
    }
    s << " step " << p.step() << "/" << p.total_steps();
    s << " loss " << Fixed(p.loss(), 4);
    if (p.tokens_per_second() > 0) s << " " << Rate(p.tokens_per_second()) << " tok/s";
    if (p.eta_seconds() > 0 && job.state() == fp8d::v1::RUNNING) s << " ETA " << HumanDuration(p.eta_seconds());
  }
  if (job.has_error()) s << " " << ErrorText(job);
  return s.str();
}

}  // namespace fp8d::client

namespace fp8d::client {

std::string FitProgressLine(const Job& job, int columns) {
  // Leave the last column free: writing into it makes some terminals wrap.
  const int room = std::max(columns - 1, 10);
  const std::string plain = ProgressLine(job, 0);
  const int spare = room - static_cast<int>(plain.size()) - 3;  // " [" + "]"
  if (spare >= 10 && job.progress().total_steps() > 0) return ProgressLine(job, std::min(spare, 30));
  if (static_cast<int>(plain.size()) <= room) return plain;
  return plain.substr(0, static_cast<size_t>(room - 3)) + "...";
}

}  // namespace fp8d::client
