// SPDX-License-Identifier: Apache-2.0
// fp8ctl: the command-line client of fp8d (README "fp8ctl").
//
// Exit codes: 0 ok; 1 the job failed or was cancelled (watch, submit --wait), or `wait` did not
// see its condition (the job ended otherwise, or --timeout passed); 2 usage error (bad flags,
// an unknown command, a bad job file, or the server's INVALID_ARGUMENT); 3 server error
// (unreachable, NOT_FOUND, FAILED_PRECONDITION, ...).
#include <malloc.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <absl/synchronization/mutex.h>
#include <google/protobuf/util/time_util.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "client/cli_habits.h"
#include "client/contexts.h"
#include "client/fp8ctl_command_line.h"
#include "client/job_client.h"
#include "client/job_file.h"
#include "client/output.h"
#include "common/version.h"

namespace {

using fp8d::client::JobClient;
using fp8d::client::OutputFormat;
using fp8d::ctl::AddCommands;
using fp8d::ctl::AddGlobalOptions;
using fp8d::ctl::CommandBuilder;
using fp8d::ctl::CommandNames;
using fp8d::ctl::Commands;
using fp8d::ctl::FirstCommandWord;
using fp8d::ctl::Flags;
using fp8d::v1::Job;

constexpr int kExitOk = 0;
constexpr int kExitJobFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitServer = 3;

int ReportError(const fp8::Status& status) {
  std::cerr << "fp8ctl: " << status.ToString() << "\n";
  return status.code() == fp8::StatusCode::kInvalidArgument ? kExitUsage : kExitServer;
}

// --server > FP8D_ADDR > server: in the config file > 127.0.0.1:50051.
std::string ServerAddress(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("FP8D_ADDR"); env != nullptr && env[0] != '\0') return env;
  std::string dir;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && xdg[0] != '\0') {
    dir = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr) {
    dir = std::string(home) + "/.config";
  }
  if (!dir.empty()) {
    const std::string path = dir + "/fp8d/config.yaml";
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      try {
        YAML::Node root = YAML::LoadFile(path);
        if (root["server"]) return root["server"].as<std::string>();
      } catch (const YAML::Exception& e) {
        std::cerr << "fp8ctl: ignoring " << path << ": " << e.what() << "\n";
      }
    }
  }
  return "127.0.0.1:50051";
}

bool IsTerminal(fp8d::v1::JobState s) {
  return s == fp8d::v1::SUCCEEDED || s == fp8d::v1::FAILED || s == fp8d::v1::CANCELLED;
}

int TerminalColumns() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* env = std::getenv("COLUMNS")) {
    const int c = std::atoi(env);
    if (c > 0) return c;
  }
  return 80;
}

// How `watch` shows each update. kSilent only follows (submit --wait -o json prints the end).
enum class WatchDisplay { kTable, kJsonLines, kYaml, kSilent };

struct WatchOutcome {
  int exit_code = kExitOk;
  Job last;
};

// Follows the job to its end (or until `stop` says so), reconnecting (resuming from the last
// version seen) when the stream breaks. Exit 0 if SUCCEEDED, 1 if FAILED or CANCELLED.
// An unreachable server fails within a few seconds: before the first update arrives, the
// stream gets a short budget of retries; after it, a daemon restart is ridden out.
WatchOutcome Watch(JobClient& client, const std::string& address, const std::string& name,
                   WatchDisplay display, const std::function<bool(const Job&)>& stop = nullptr,
                   std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max()) {
  const bool tty = display == WatchDisplay::kTable && isatty(STDOUT_FILENO);
  int64_t version = 0;
  WatchOutcome outcome;
  bool have_last = false;
  bool stopped = false;
  bool reconnecting = false;
  std::string last_plain_line;
  int failures = 0;
  auto show = [&](const Job& job, const char* suffix) {
    if (tty) {
      const int columns = TerminalColumns();
      std::string line = fp8d::client::FitProgressLine(job, columns - static_cast<int>(std::string(suffix).size()));
      std::cout << "\r\033[K" << line << suffix << std::flush;
    }
  };
  while (true) {
    fp8::Status st = client.WatchJob(name, version, [&](const Job& job) {
      failures = 0;
      reconnecting = false;
      version = job.version();
      outcome.last = job;
      have_last = true;
      switch (display) {
        case WatchDisplay::kJsonLines:
          std::cout << fp8d::client::MessageToJsonLine(job) << "\n" << std::flush;
          break;
        case WatchDisplay::kYaml:
          std::cout << "---\n" << fp8d::client::MessageToYaml(job) << std::flush;
          break;
        case WatchDisplay::kTable:
          if (tty) {
            show(job, "");
          } else {
            // Plain lines for logs and pipes: a new version that only moved the checkpoint or
            // a metric reads the same, so print a line only when it says something new.
            std::string line = fp8d::client::ProgressLine(job, 0);
            if (line != last_plain_line) std::cout << line << "\n" << std::flush;
            last_plain_line = std::move(line);
          }
          break;
        case WatchDisplay::kSilent:
          break;
      }
      if (stop && stop(job)) {
        stopped = true;
        return false;
      }
      return true;
    }, deadline);
    if (stopped || (have_last && IsTerminal(outcome.last.state()))) break;
    if (st.code() == fp8::StatusCode::kDeadlineExceeded && std::chrono::steady_clock::now() >= deadline) {
      if (tty) std::cout << "\n";
      outcome.exit_code = kExitJobFailed;
      return outcome;
    }
    if (st.code() == fp8::StatusCode::kNotFound || st.code() == fp8::StatusCode::kInvalidArgument ||
        st.code() == fp8::StatusCode::kPermissionDenied || st.code() == fp8::StatusCode::kUnauthenticated) {
      if (tty) std::cout << "\n";
      outcome.exit_code = ReportError(st);
      return outcome;
    }
    ++failures;
    // Never reached the server: ~3 s of retries, then say so. Once following a job, ride out
    // a daemon restart for up to a minute.
    const int budget = have_last ? 120 : 6;
    if (failures > budget) {
      if (tty) std::cout << "\n";
      const std::string why = st.ok() ? "stream ended early" : st.message();
      outcome.exit_code = ReportError(fp8::UnavailableError(
          (have_last ? "lost fp8d at " : "cannot reach fp8d at ") + address + ": " + why));
      return outcome;
    }
    if (have_last && !reconnecting) {
      reconnecting = true;
      if (tty) {
        show(outcome.last, " (reconnecting…)");
      } else if (display == WatchDisplay::kTable) {
        std::cerr << "fp8ctl: stream to " << address << " broke; reconnecting…\n";
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(failures == 1 ? 100 : 500));
  }
  if (tty) std::cout << "\n";
  if (!stopped) outcome.exit_code = outcome.last.state() == fp8d::v1::SUCCEEDED ? kExitOk : kExitJobFailed;
  return outcome;
}

// The one client of this process. Never destroyed: main ends with _Exit, so gRPC's channel
// and library teardown (joining its threads) is skipped rather than paid on every command.
JobClient& NewClient(const fp8d::client::ConnectionOptions& connection) { return *new JobClient(connection); }

void ReportUnknownCommand(const std::string& word, const char* after) {
  const std::string guess = fp8d::client::SuggestCommand(word, CommandNames());
  std::cerr << "fp8ctl: unknown command '" << word << "'";
  if (!guess.empty()) std::cerr << ", did you mean '" << guess << "'?";
  std::cerr << after;
}

int PrintVersion() {
  std::cout << "fp8ctl " << fp8::kVersion << " (commit " << fp8::kGitCommit << ", " << fp8::kBuildType
            << " build)\n";
  return kExitOk;
}

// `overview` is the top-level help, taken before parsing (see Fp8ctlMain).
int PrintHelp(CLI::App& app, const std::string& overview, const std::string& topic) {
  if (topic.empty()) {
    std::cout << overview;
    return kExitOk;
  }
  for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == topic) {
      std::cout << sub->help();
      return kExitOk;
    }
  }
  ReportUnknownCommand(topic, "\n");
  return kExitUsage;
}

int PrintCompletion(CLI::App& app, const std::string& shell) {
  std::vector<fp8d::client::CommandWords> words;
  for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    fp8d::client::CommandWords w{sub->get_name(), {}};
    for (const auto* opt : sub->get_options()) {
      for (const auto& l : opt->get_lnames()) w.flags.push_back("--" + l);
      for (const auto& s : opt->get_snames()) w.flags.push_back("-" + s);
    }
    words.push_back(std::move(w));
  }
  const std::vector<std::string> global = {"--server", "-o", "--output", "--context", "--tls-ca", "--help"};
  std::cout << (shell == "bash" ? fp8d::client::BashCompletion(words, global)
                                : fp8d::client::ZshCompletion(words, global));
  return kExitOk;
}

int UseContext(const std::string& name) {
  fp8::Status st = fp8d::client::UseContext(fp8d::client::DefaultContextConfigPath(), name);
  if (!st.ok()) return ReportError(st);
  std::cout << "current context: " << name << "\n";
  return kExitOk;
}

int PrintContexts() {
  auto config = fp8d::client::LoadContextConfig(fp8d::client::DefaultContextConfigPath());
  if (!config.ok()) return ReportError(config.status());
  std::cout << "CURRENT  NAME  SERVER\n";
  for (const auto& c : config->contexts) {
    std::cout << (c.name == config->current_context ? "*" : " ") << "        " << c.name << "  "
              << c.connection.address << "\n";
  }
  return kExitOk;
}

OutputFormat ParseOutputFormat(const std::string& output) {
  return output == "json"   ? OutputFormat::kJson
         : output == "yaml" ? OutputFormat::kYaml
         : output == "name" ? OutputFormat::kName
                            : OutputFormat::kTable;
}

// Output-only fields are ignored with a note (README "Job files"), so a job saved with
// `fp8ctl get -o yaml` can be submitted again.
void IgnoreOutputOnlyFields(Job& job, const std::string& file) {
  const auto ignored = fp8d::client::ClearOutputOnlyFields(job);
  if (ignored.empty()) return;
  std::string list;
  for (const auto& f : ignored) list += (list.empty() ? "" : ", ") + f;
  std::cerr << "fp8ctl: note: ignoring output-only fields in " << file << ": " << list << "\n";
}

int Submit(const fp8d::client::ConnectionOptions& connection, const Flags& flags, OutputFormat format) {
  auto labels = fp8d::client::ParseLabelFlags(flags.labels);
  if (!labels.ok()) return ReportError(labels.status());
  auto parsed = fp8d::client::LoadJobFile(flags.file);
  if (!parsed.ok()) {
    std::cerr << "fp8ctl: " << parsed.status().message() << "\n";
    return kExitUsage;
  }
  IgnoreOutputOnlyFields(*parsed, flags.file);
  for (const auto& [k, v] : *labels) (*parsed->mutable_labels())[k] = v;
  JobClient& client = NewClient(connection);
  auto created = client.CreateJob(*parsed, flags.request_id);
  if (!created.ok()) return ReportError(created.status());
  const bool document = format == OutputFormat::kJson || format == OutputFormat::kYaml;
  if (flags.parsable) {
    std::cout << created->name().substr(created->name().find('/') + 1) << "\n";
  } else if (format == OutputFormat::kTable) {
    std::cout << created->name() << " " << fp8d::v1::JobState_Name(created->state()) << "\n";
  } else if (!(flags.wait && document)) {
    // With --wait, json and yaml print one document: the job as it ended.
    fp8d::client::PrintJob(*created, format, std::cout);
  }
  std::cout << std::flush;
  if (!flags.wait) return kExitOk;
  const WatchDisplay display =
      format == OutputFormat::kTable && !flags.parsable ? WatchDisplay::kTable : WatchDisplay::kSilent;
  WatchOutcome outcome = Watch(client, connection.address, created->name(), display);
  if (document && outcome.last.version() > 0) fp8d::client::PrintJob(outcome.last, format, std::cout);
  return outcome.exit_code;
}

int GetOrDescribe(JobClient& client, const std::string& name, bool describe, OutputFormat format) {
  auto got = client.GetJob(name, describe ? fp8d::v1::JOB_VIEW_FULL : fp8d::v1::JOB_VIEW_BASIC);
  if (!got.ok()) return ReportError(got.status());
  if (describe) {
    fp8d::client::PrintDescribe(*got, format, std::cout);
  } else {
    fp8d::client::PrintJob(*got, format, std::cout);
  }
  return kExitOk;
}

// --state and --kind into `request`; on a bad one, says so and returns the exit code.
std::optional<int> SetListFilters(const Flags& flags, fp8d::v1::ListJobsRequest& request) {
  if (!flags.state.empty()) {
    auto s = fp8d::client::ParseStateFlag(flags.state);
    if (!s.ok()) return ReportError(s.status());
    request.set_state(*s);
  }
  if (!flags.kind.empty()) {
    std::string upper = flags.kind;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    fp8d::v1::JobKind k;
    if (!fp8d::v1::JobKind_Parse(upper, &k) || k == fp8d::v1::JOB_KIND_UNSPECIFIED) {
      std::cerr << "fp8ctl: --kind " << flags.kind << ": unknown kind; valid kinds: TRAIN, CALIBRATE\n";
      return kExitUsage;
    }
    request.set_kind(k);
  }
  return std::nullopt;
}

// Every page unless --page-size asks for one; then the next page's token goes to stderr.
int List(JobClient& client, const Flags& flags, OutputFormat format) {
  fp8d::v1::ListJobsRequest request;
  if (auto rc = SetListFilters(flags, request)) return *rc;
  request.set_label_selector(flags.selector);
  request.set_owner(flags.owner);
  request.set_page_token(flags.page_token);
  request.set_page_size(flags.page_size > 0 ? flags.page_size : 500);
  std::vector<Job> jobs;
  std::string next;
  while (true) {
    auto page = client.ListJobs(request);
    if (!page.ok()) return ReportError(page.status());
    for (auto& j : *page->mutable_jobs()) jobs.push_back(std::move(j));
    next = page->next_page_token();
    if (flags.page_size > 0 || next.empty()) break;
    request.set_page_token(next);
  }
  fp8d::client::PrintJobs(jobs, format, std::cout, TerminalColumns());
  if (flags.page_size > 0 && !next.empty()) std::cerr << "next page: --page-token " << next << "\n";
  return kExitOk;
}

int WatchCommand(JobClient& client, const std::string& address, const std::string& name, OutputFormat format) {
  const WatchDisplay display = format == OutputFormat::kJson   ? WatchDisplay::kJsonLines
                               : format == OutputFormat::kYaml ? WatchDisplay::kYaml
                                                               : WatchDisplay::kTable;
  return Watch(client, address, name, display).exit_code;
}

// `--for state=STATE`; on a bad condition, says so and returns nullopt.
std::optional<fp8d::v1::JobState> ParseWaitCondition(const std::string& condition) {
  const std::string prefix = "state=";
  if (condition.rfind(prefix, 0) != 0) {
    std::cerr << "fp8ctl: --for " << condition << ": expected state=STATE (" << fp8d::client::ValidStates() << ")\n";
    return std::nullopt;
  }
  auto want = fp8d::client::ParseStateFlag(condition.substr(prefix.size()));
  if (!want.ok()) {
    std::cerr << "fp8ctl: --for " << condition << ": unknown state; valid states: " << fp8d::client::ValidStates()
              << "\n";
    return std::nullopt;
  }
  return *want;
}

// `--timeout` as a deadline (0: none); on a bad duration, says so and returns nullopt.
std::optional<std::chrono::steady_clock::time_point> ParseWaitDeadline(const std::string& timeout_text) {
  auto timeout = fp8d::client::ParseDuration(timeout_text);
  if (!timeout.ok()) {
    std::cerr << "fp8ctl: --timeout " << timeout_text << ": " << timeout.status().message() << "\n";
    return std::nullopt;
  }
  const auto budget = std::chrono::seconds(timeout->seconds()) + std::chrono::nanoseconds(timeout->nanos());
  if (budget.count() == 0) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(budget);
}

int WaitFor(JobClient& client, const std::string& address, const std::string& name, const Flags& flags) {
  const auto want = ParseWaitCondition(flags.for_condition);
  if (!want) return kExitUsage;
  const auto deadline = ParseWaitDeadline(flags.timeout_text);
  if (!deadline) return kExitUsage;
  WatchOutcome outcome = Watch(client, address, name, WatchDisplay::kSilent,
                               [&](const Job& j) { return j.state() == *want; }, *deadline);
  if (outcome.last.state() == *want) {
    std::cout << outcome.last.name() << " " << fp8d::v1::JobState_Name(*want) << "\n";
    return kExitOk;
  }
  if (outcome.exit_code >= kExitUsage) return outcome.exit_code;  // already reported
  if (IsTerminal(outcome.last.state())) {
    std::cerr << "fp8ctl: " << name << " ended " << fp8d::v1::JobState_Name(outcome.last.state()) << ", not "
              << fp8d::v1::JobState_Name(*want) << "\n";
  } else {
    std::cerr << "fp8ctl: timed out after " << flags.timeout_text << " waiting for " << name << " to be "
              << fp8d::v1::JobState_Name(*want) << " (it is " << fp8d::v1::JobState_Name(outcome.last.state())
              << ")\n";
  }
  return kExitJobFailed;
}

// The ranks `logs` reads: --rank alone, else every rank of the job (Resources as stored).
fp8::StatusOr<std::vector<int>> LogRanks(JobClient& client, const std::string& name, const Flags& flags) {
  if (flags.rank >= 0) return std::vector<int>{flags.rank};
  auto job = client.GetJob(name);
  if (!job.ok()) return job.status();
  const auto& r = job->resources();
  const int count = r.ranks() > 0 ? r.ranks() : std::max(1, r.nodes()) * std::max(1, r.ranks_per_node());
  std::vector<int> ranks(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) ranks[static_cast<size_t>(i)] = i;
  return ranks;
}

// One rank's log as lines: complete lines go to `emit` (holding `out_mu`, so the ranks of a
// followed job do not interleave inside a line); Finish hands on an unterminated last line.
class RankLines {
 public:
  RankLines(std::function<void(const std::string&)> emit, std::mutex& out_mu)
      : emit_(std::move(emit)), out_mu_(out_mu) {}
  void Add(const std::string& data) {
    pending_ += data;
    size_t start = 0, nl;
    std::lock_guard lock(out_mu_);
    while ((nl = pending_.find('\n', start)) != std::string::npos) {
      emit_(pending_.substr(start, nl - start));
      start = nl + 1;
    }
    pending_.erase(0, start);
    std::cout.flush();
  }
  void Finish() {
    std::lock_guard lock(out_mu_);
    if (!pending_.empty()) emit_(pending_);
    pending_.clear();
    std::cout.flush();
  }

 private:
  std::function<void(const std::string&)> emit_;
  std::mutex& out_mu_;
  std::string pending_;
};

// Where the last `tail` lines of `log` start (a last line without its newline counts as one).
size_t TailStart(const std::string& log, int tail) {
  if (tail == 0) return log.size();
  size_t pos = log.size();
  if (pos > 0 && log[pos - 1] == '\n') --pos;
  int seen = 0;
  while (pos > 0) {
    const size_t nl = log.rfind('\n', pos - 1);
    if (nl == std::string::npos) return 0;
    if (++seen == tail) return nl + 1;
    pos = nl;
  }
  return 0;
}

// One rank of `logs`. With --tail the log so far is read whole and only its last N lines are
// printed; with --follow too, the stream then skips the bytes already read and goes on.
fp8::Status RankLog(JobClient& client, fp8d::v1::GetJobLogsRequest request, int tail,
                    const std::function<void(const std::string&)>& emit, std::mutex& out_mu) {
  RankLines lines(emit, out_mu);
  size_t skip = 0;
  if (tail >= 0) {
    std::string all;
    fp8d::v1::GetJobLogsRequest now = request;
    now.set_follow(false);
    fp8::Status st = client.GetJobLogs(now, [&](const std::string& data) { all += data; });
    // A rank with no log yet has no tail; followed, it is waited for like any other.
    if (!st.ok() && !(request.follow() && st.code() == fp8::StatusCode::kNotFound)) return st;
    skip = all.size();
    lines.Add(all.substr(TailStart(all, tail)));
    if (!request.follow()) {
      lines.Finish();
      return fp8::OkStatus();
    }
  }
  fp8::Status st = client.GetJobLogs(request, [&](const std::string& data) {
    if (skip >= data.size()) {
      skip -= data.size();
      return;
    }
    lines.Add(data.substr(skip));
    skip = 0;
  });
  lines.Finish();
  return st;
}

// -o json: NDJSON, one {"rank", "line"} object per log line. Otherwise one rank's log as it
// is; a job's several ranks (no --rank) each line prefixed `[rank N] `, rank by rank, or all
// at once with --follow. A rank that has written no log yet is skipped while others have one.
int PrintLogs(JobClient& client, const std::string& name, const Flags& flags, OutputFormat format) {
  auto ranks = LogRanks(client, name, flags);
  if (!ranks.ok()) return ReportError(ranks.status());
  const bool json_lines = format == OutputFormat::kJson;
  const bool prefixed = flags.rank < 0 && ranks->size() > 1;
  fp8d::v1::GetJobLogsRequest request;
  request.set_name(name);
  request.set_attempt(flags.attempt);
  request.set_follow(flags.follow);
  if (!json_lines && !prefixed && flags.tail < 0) {
    // One rank, whole: its bytes as they come, not cut into lines.
    request.set_rank(ranks->front());
    fp8::Status st = client.GetJobLogs(request, [&](const std::string& data) {
      std::cout.write(data.data(), static_cast<std::streamsize>(data.size()));
      std::cout.flush();
    });
    return st.ok() ? kExitOk : ReportError(st);
  }
  std::mutex out_mu;
  auto emitter = [&](int rank) -> std::function<void(const std::string&)> {
    if (json_lines) {
      // A log may hold any bytes: invalid UTF-8 becomes U+FFFD so each line stays valid JSON.
      return [rank](const std::string& line) {
        std::cout << nlohmann::json({{"rank", rank}, {"line", line}})
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                  << "\n";
      };
    }
    const std::string prefix = prefixed ? "[rank " + std::to_string(rank) + "] " : "";
    return [prefix](const std::string& line) { std::cout << prefix << line << "\n"; };
  };
  std::vector<fp8::Status> results(ranks->size());
  auto read_rank = [&](size_t i) {
    fp8d::v1::GetJobLogsRequest r = request;
    r.set_rank((*ranks)[i]);
    results[i] = RankLog(client, r, flags.tail, emitter((*ranks)[i]), out_mu);
  };
  if (flags.follow && ranks->size() > 1) {
    std::vector<std::thread> readers;
    for (size_t i = 0; i < ranks->size(); ++i) readers.emplace_back(read_rank, i);
    for (auto& t : readers) t.join();
  } else {
    for (size_t i = 0; i < ranks->size(); ++i) read_rank(i);
  }
  const fp8::Status* first_error = nullptr;
  size_t missing = 0;
  for (const auto& st : results) {
    if (st.ok()) continue;
    if (st.code() == fp8::StatusCode::kNotFound && ranks->size() > 1) {
      ++missing;
      if (first_error == nullptr) first_error = &st;
      continue;
    }
    return ReportError(st);
  }
  if (missing == ranks->size()) return ReportError(*first_error);
  return kExitOk;
}

int Delete(JobClient& client, const std::string& name, OutputFormat format) {
  fp8::Status st = client.DeleteJob(name);
  if (!st.ok()) return ReportError(st);
  std::cout << name << (format == OutputFormat::kName ? "" : " deleted") << "\n";
  return kExitOk;
}

// The jobs `cancel` is asked for: its arguments, or with -l every active job whose labels
// match (finished ones cannot be cancelled). INVALID_ARGUMENT for neither or both.
fp8::StatusOr<std::vector<std::string>> CancelTargets(JobClient& client, const Flags& flags) {
  if (flags.jobs.empty() == flags.selector.empty()) {
    return fp8::InvalidArgumentError("cancel: give job names or -l SELECTOR (one of the two)");
  }
  std::vector<std::string> names;
  for (const auto& j : flags.jobs) names.push_back(fp8d::client::NormalizeJobName(j));
  if (flags.selector.empty()) return names;
  fp8d::v1::ListJobsRequest request;
  request.set_label_selector(flags.selector);
  request.set_page_size(1000);
  while (true) {
    auto page = client.ListJobs(request);
    if (!page.ok()) return page.status();
    for (const auto& j : page->jobs()) {
      if (!IsTerminal(j.state())) names.push_back(j.name());
    }
    if (page->next_page_token().empty()) break;
    request.set_page_token(page->next_page_token());
  }
  return names;
}

// One job as before; several (names or -l) only with --yes, else they are listed and nothing
// is cancelled (exit 1). Each is tried; a refusal is reported and the rest go on (exit 3).
int Cancel(JobClient& client, const Flags& flags, OutputFormat format) {
  auto targets = CancelTargets(client, flags);
  if (!targets.ok()) return ReportError(targets.status());
  const bool bulk = targets->size() > 1 || !flags.selector.empty();
  if (targets->size() > 1 && !flags.yes) {
    std::cout << "would cancel " << targets->size() << " jobs:\n";
    for (const auto& n : *targets) std::cout << "  " << n << "\n";
    std::cerr << "fp8ctl: nothing cancelled; pass --yes to cancel " << targets->size() << " jobs\n";
    return kExitJobFailed;
  }
  std::vector<Job> cancelled;
  int exit_code = kExitOk;
  for (const auto& name : *targets) {
    auto result = client.CancelJob(name);
    if (!result.ok()) {
      exit_code = ReportError(fp8::Status(result.status().code(), name + ": " + std::string(result.status().message())));
      continue;
    }
    if (format == OutputFormat::kTable) {
      std::cout << result->name() << " " << fp8d::v1::JobState_Name(result->state()) << "\n";
    } else if (!bulk) {
      fp8d::client::PrintJob(*result, format, std::cout);
    }
    cancelled.push_back(std::move(*result));
  }
  if (bulk && format != OutputFormat::kTable) fp8d::client::PrintJobs(cancelled, format, std::cout);
  if (bulk && format == OutputFormat::kTable) {
    std::cout << "cancelled " << cancelled.size() << " of " << targets->size() << " jobs\n";
  }
  return exit_code;
}

// fp8ctl's line, then the server's (GetServerInfo): a server that cannot be asked is an error.
int Version(JobClient& client) {
  PrintVersion();
  auto info = client.GetServerInfo();
  if (!info.ok()) {
    return ReportError(fp8::Status(info.status().code(), "server: " + std::string(info.status().message())));
  }
  std::cout << "server: " << info->version() << ", launcher " << info->launcher() << "\n";
  return kExitOk;
}

// The commands that talk to fp8d. The connection is resolved and its credentials checked
// before any file is read or call made.
int Queues(JobClient& client, OutputFormat format) {
  auto queues = client.ListQueues();
  if (!queues.ok()) return ReportError(queues.status());
  fp8d::client::PrintQueues(*queues, format, std::cout);
  return kExitOk;
}

// `--since 7d`: days as well as the durations of job files (job_file.h).
int Usage(JobClient& client, const Flags& flags, OutputFormat format) {
  fp8d::v1::GetUsageRequest request;
  request.set_by(flags.usage_by);
  if (!flags.usage_since.empty()) {
    int64_t ms = 0;
    const std::string& text = flags.usage_since;
    if (text.size() > 1 && text.back() == 'd' &&
        text.find_first_not_of("0123456789") == text.size() - 1) {
      ms = std::stoll(text.substr(0, text.size() - 1)) * 86'400'000;
    } else {
      auto d = fp8d::client::ParseDuration(text);
      if (!d.ok()) return ReportError(fp8::InvalidArgumentError("--since: " + std::string(d.status().message())));
      ms = google::protobuf::util::TimeUtil::DurationToMilliseconds(*d);
    }
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    *request.mutable_since() = google::protobuf::util::TimeUtil::MillisecondsToTimestamp(now - ms);
  }
  auto usage = client.GetUsage(request);
  if (!usage.ok()) return ReportError(usage.status());
  fp8d::client::PrintUsage(*usage, flags.usage_by, format, std::cout);
  return kExitOk;
}

int RunServerCommand(const Commands& c, Flags& flags, OutputFormat format) {
  flags.connection.server = flags.server;
  auto connection = fp8d::client::ResolveConnection(flags.connection);
  if (!connection.ok()) return ReportError(connection.status());
  if (connection->address.empty()) connection->address = ServerAddress(flags.server);
  // Kept alive until the channel exists: the credentials hold gRPC's library reference, and
  // dropping the last one shuts gRPC down (its threads joined) only for the channel to start
  // it, and them, again.
  const auto creds = fp8d::client::MakeChannelCredentials(*connection);
  if (!creds.ok()) return ReportError(creds.status());
  if (c.submit->parsed()) return Submit(*connection, flags, format);

  const std::string& address = connection->address;
  const std::string name = flags.job.empty() ? "" : fp8d::client::NormalizeJobName(flags.job);
  JobClient& client = NewClient(*connection);
  if (c.get->parsed() || c.describe->parsed()) return GetOrDescribe(client, name, c.describe->parsed(), format);
  if (c.list->parsed()) return List(client, flags, format);
  if (c.watch->parsed()) return WatchCommand(client, address, name, format);
  if (c.wait->parsed()) return WaitFor(client, address, name, flags);
  if (c.logs->parsed()) return PrintLogs(client, name, flags, format);
  if (c.del->parsed()) return Delete(client, name, format);
  if (c.cancel->parsed()) return Cancel(client, flags, format);
  if (c.version->parsed()) return Version(client);
  if (c.queues->parsed()) return Queues(client, format);
  if (c.usage->parsed()) return Usage(client, flags, format);
  return kExitUsage;
}

}  // namespace

static int Fp8ctlMain(int argc, char** argv) {
  CLI::App app{"fp8ctl: submit, inspect, watch and cancel fp8d jobs"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the command: `fp8ctl submit -f x -o json`
  Flags flags;
  AddGlobalOptions(app, flags);
  const std::string word = FirstCommandWord(app, argc, argv);
  CommandBuilder builder(app, word);
  const Commands commands = AddCommands(builder, flags);
  const auto& names = CommandNames();
  if (!word.empty() && std::find(names.begin(), names.end(), word) == names.end()) {
    ReportUnknownCommand(word, "\nRun 'fp8ctl help' for the list of commands.\n");
    return kExitUsage;
  }

  // After parsing, CLI11's help() describes the selected subcommand (`help` itself), so the
  // overview is taken now, and only for `help`: formatting every command's help is a
  // measurable share of a short `submit`.
  const std::string overview = word == "help" ? app.help() : "";
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  if (commands.version->parsed() && flags.client_only) return PrintVersion();
  if (commands.help->parsed()) return PrintHelp(app, overview, flags.help_topic);
  if (commands.completion->parsed()) return PrintCompletion(app, flags.shell);
  if (commands.use_context->parsed()) return UseContext(flags.context_name);
  if (commands.get_contexts->parsed()) return PrintContexts();
  return RunServerCommand(commands, flags, ParseOutputFormat(flags.output));
}

int main(int argc, char** argv) {
  // gRPC's threads each make a malloc arena of their own on their first allocation (a 64 MiB
  // mapping trimmed and protected: three syscalls and page faults per thread); a command this
  // short has no allocation contention for arenas to relieve.
  mallopt(M_ARENA_MAX, 1);
  // Debian's abseil keeps its mutex deadlock detector on: every lock gRPC takes records edges
  // in a global graph. That is a debugging aid, not something each command should pay for.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const int rc = Fp8ctlMain(argc, argv);
  // Skip the teardown: gRPC's shutdown joins its threads and frees what the OS frees anyway,
  // a measurable share of a short command's time when scripts run thousands of them. Flush
  // first, since _Exit does not.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(rc);
}
