// fp8ctl: the command-line client of fp8d (README "fp8ctl").
//
// Exit codes: 0 ok; 1 the job failed or was cancelled (watch, submit --wait); 2 usage error
// (bad flags, a bad job file, or the server's INVALID_ARGUMENT); 3 server error (unreachable,
// NOT_FOUND, FAILED_PRECONDITION, ...).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include "client/contexts.h"
#include "client/job_client.h"
#include "client/job_file.h"
#include "client/output.h"

namespace {

using fp8d::client::JobClient;
using fp8d::client::OutputFormat;
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

// Follows the job to its end, reconnecting (resuming from the last version seen) when the
// stream breaks. Exit 0 if SUCCEEDED, 1 if FAILED or CANCELLED.
int Watch(JobClient& client, const std::string& name, OutputFormat format) {
  const bool tty = format == OutputFormat::kTable && isatty(STDOUT_FILENO);
  int64_t version = 0;
  Job last;
  bool have_last = false;
  std::string last_plain_line;
  int failures = 0;
  while (true) {
    fp8::Status st = client.WatchJob(name, version, [&](const Job& job) {
      failures = 0;
      version = job.version();
      last = job;
      have_last = true;
      if (format == OutputFormat::kJson) {
        std::cout << fp8d::client::MessageToJson(job) << std::flush;
      } else if (format == OutputFormat::kYaml) {
        std::cout << "---\n" << fp8d::client::MessageToYaml(job) << std::flush;
      } else if (tty) {
        std::cout << "\r\033[K" << fp8d::client::ProgressLine(job, 30) << std::flush;
      } else {
        // Plain lines for logs and pipes: a new version that only moved the checkpoint or a
        // metric reads the same, so print a line only when it says something new.
        std::string line = fp8d::client::ProgressLine(job, 0);
        if (line != last_plain_line) std::cout << line << "\n" << std::flush;
        last_plain_line = std::move(line);
      }
      return true;
    });
    if (have_last && IsTerminal(last.state())) break;
    if (st.code() == fp8::StatusCode::kNotFound || st.code() == fp8::StatusCode::kInvalidArgument) {
      if (tty) std::cout << "\n";
      return ReportError(st);
    }
    // The stream broke (daemon restart, network): resume after a short pause.
    if (++failures > 120) {
      if (tty) std::cout << "\n";
      return ReportError(st.ok() ? fp8::UnavailableError("stream ended early") : st);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(failures == 1 ? 100 : 500));
  }
  if (tty) std::cout << "\n";
  return last.state() == fp8d::v1::SUCCEEDED ? kExitOk : kExitJobFailed;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp8ctl: submit, inspect, watch and cancel fp8d jobs"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the command: `fp8ctl submit -f x -o json`
  std::string server_flag;
  std::string output = "table";
  app.add_option("--server", server_flag, "fp8d address (else $FP8D_ADDR, config file, 127.0.0.1:50051)");
  app.add_option("-o,--output", output, "table | json | yaml")->check(CLI::IsMember({"table", "json", "yaml"}));

  std::string file, request_id;
  bool wait = false;
  auto* submit = app.add_subcommand("submit", "create a job from a YAML or JSON file");
  submit->add_option("-f,--file", file, "job file (YAML or JSON; - for stdin)")->required();
  submit->add_option("--request-id", request_id, "idempotency key (same id → same job)");
  submit->add_flag("--wait", wait, "watch the job until it ends (exit 1 if it fails)");

  std::string job;
  auto* get = app.add_subcommand("get", "show a job");
  get->add_option("JOB", job, "jobs/<id> or <id>")->required();

  std::string state, kind, page_token;
  int page_size = 0;
  auto* list = app.add_subcommand("list", "list jobs, newest first (all pages unless --page-size)");
  list->add_option("--state", state, "QUEUED, RUNNING, SUCCEEDED, ...");
  list->add_option("--kind", kind, "TRAIN or CALIBRATE");
  list->add_option("--page-size", page_size, "one page of this size (prints the next page token)")
      ->check(CLI::Range(1, 1000));
  list->add_option("--page-token", page_token, "continue a paged listing");

  auto* watch = app.add_subcommand("watch", "follow a job's progress until it ends");
  watch->add_option("JOB", job, "jobs/<id> or <id>")->required();

  int rank = 0, attempt = 0;
  bool follow = false;
  auto* logs = app.add_subcommand("logs", "print a rank's log");
  logs->add_option("JOB", job, "jobs/<id> or <id>")->required();
  logs->add_option("--rank", rank, "rank (default 0)");
  logs->add_option("--attempt", attempt, "attempt (default: the current one)");
  logs->add_flag("-f,--follow", follow, "keep printing until the job ends");

  auto* cancel = app.add_subcommand("cancel", "cancel a job");
  cancel->add_option("JOB", job, "jobs/<id> or <id>")->required();

  auto* describe = app.add_subcommand("describe", "show a job with its attempts and events");
  describe->add_option("JOB", job, "jobs/<id> or <id>")->required();

  // Remote access: contexts (client/contexts.h), TLS and tokens.
  fp8d::client::ConnectionFlags connection_flags;
  std::string context_name;
  app.add_option("--context", connection_flags.context, "named context of ~/.config/fp8d/config.yaml");
  app.add_option("--tls-ca", connection_flags.tls_ca, "PEM CA file: connect with TLS ($FP8D_TOKEN sends a token)");
  auto* config_cmd = app.add_subcommand("config", "fp8ctl contexts");
  config_cmd->require_subcommand(1);
  auto* use_context = config_cmd->add_subcommand("use-context", "make a context the current one");
  use_context->add_option("NAME", context_name, "context name")->required();
  auto* get_contexts = config_cmd->add_subcommand("get-contexts", "list the contexts");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  const OutputFormat format = output == "json"   ? OutputFormat::kJson
                              : output == "yaml" ? OutputFormat::kYaml
                                                 : OutputFormat::kTable;
  if (use_context->parsed() || get_contexts->parsed()) {
    const std::string path = fp8d::client::DefaultContextConfigPath();
    if (use_context->parsed()) {
      fp8::Status st = fp8d::client::UseContext(path, context_name);
      if (!st.ok()) return ReportError(st);
      std::cout << "current context: " << context_name << "\n";
      return kExitOk;
    }
    auto config = fp8d::client::LoadContextConfig(path);
    if (!config.ok()) return ReportError(config.status());
    std::cout << "CURRENT  NAME  SERVER\n";
    for (const auto& c : config->contexts) {
      std::cout << (c.name == config->current_context ? "*" : " ") << "        " << c.name << "  "
                << c.connection.address << "\n";
    }
    return kExitOk;
  }
  connection_flags.server = server_flag;
  auto connection = fp8d::client::ResolveConnection(connection_flags);
  if (!connection.ok()) return ReportError(connection.status());
  if (connection->address.empty()) connection->address = ServerAddress(server_flag);
  if (auto creds = fp8d::client::MakeChannelCredentials(*connection); !creds.ok()) {
    return ReportError(creds.status());
  }
  JobClient client(*connection);
  const std::string name = job.empty() ? "" : fp8d::client::NormalizeJobName(job);

  if (submit->parsed()) {
    auto parsed = fp8d::client::LoadJobFile(file);
    if (!parsed.ok()) {
      std::cerr << "fp8ctl: " << parsed.status().message() << "\n";
      return kExitUsage;
    }
    auto created = client.CreateJob(*parsed, request_id);
    if (!created.ok()) return ReportError(created.status());
    if (format == OutputFormat::kTable) {
      std::cout << created->name() << " " << fp8d::v1::JobState_Name(created->state()) << "\n";
    } else {
      fp8d::client::PrintJob(*created, format, std::cout);
    }
    std::cout << std::flush;
    if (wait) return Watch(client, created->name(), format == OutputFormat::kTable ? format : OutputFormat::kTable);
    return kExitOk;
  }
  if (get->parsed() || describe->parsed()) {
    auto got = client.GetJob(name, describe->parsed() ? fp8d::v1::JOB_VIEW_FULL : fp8d::v1::JOB_VIEW_BASIC);
    if (!got.ok()) return ReportError(got.status());
    if (describe->parsed()) {
      fp8d::client::PrintDescribe(*got, format, std::cout);
    } else {
      fp8d::client::PrintJob(*got, format, std::cout);
    }
    return kExitOk;
  }
  if (list->parsed()) {
    fp8d::v1::ListJobsRequest request;
    if (!state.empty()) {
      fp8d::v1::JobState s;
      if (!fp8d::v1::JobState_Parse(state, &s)) {
        std::cerr << "fp8ctl: --state " << state << ": unknown state\n";
        return kExitUsage;
      }
      request.set_state(s);
    }
    if (!kind.empty()) {
      fp8d::v1::JobKind k;
      if (!fp8d::v1::JobKind_Parse(kind, &k)) {
        std::cerr << "fp8ctl: --kind " << kind << ": unknown kind (TRAIN or CALIBRATE)\n";
        return kExitUsage;
      }
      request.set_kind(k);
    }
    request.set_page_token(page_token);
    request.set_page_size(page_size > 0 ? page_size : 500);
    std::vector<Job> jobs;
    std::string next;
    while (true) {
      auto page = client.ListJobs(request);
      if (!page.ok()) return ReportError(page.status());
      for (auto& j : *page->mutable_jobs()) jobs.push_back(std::move(j));
      next = page->next_page_token();
      if (page_size > 0 || next.empty()) break;
      request.set_page_token(next);
    }
    fp8d::client::PrintJobs(jobs, format, std::cout);
    if (page_size > 0 && !next.empty()) std::cerr << "next page: --page-token " << next << "\n";
    return kExitOk;
  }
  if (watch->parsed()) return Watch(client, name, format);
  if (logs->parsed()) {
    fp8d::v1::GetJobLogsRequest request;
    request.set_name(name);
    request.set_rank(rank);
    request.set_attempt(attempt);
    request.set_follow(follow);
    fp8::Status st = client.GetJobLogs(request, [](const std::string& data) {
      std::cout.write(data.data(), static_cast<std::streamsize>(data.size()));
      std::cout.flush();
    });
    return st.ok() ? kExitOk : ReportError(st);
  }
  if (cancel->parsed()) {
    auto cancelled = client.CancelJob(name);
    if (!cancelled.ok()) return ReportError(cancelled.status());
    if (format == OutputFormat::kTable) {
      std::cout << cancelled->name() << " " << fp8d::v1::JobState_Name(cancelled->state()) << "\n";
    } else {
      fp8d::client::PrintJob(*cancelled, format, std::cout);
    }
    return kExitOk;
  }
  return kExitUsage;
}
