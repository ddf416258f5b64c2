// fp8ctl: the command-line client of fp8d (README "fp8ctl").
//
// Exit codes: 0 ok; 1 the job failed or was cancelled (watch, submit --wait), or `wait` did not
// see its condition (the job ended otherwise, or --timeout passed); 2 usage error (bad flags,
// an unknown command, a bad job file, or the server's INVALID_ARGUMENT); 3 server error
// (unreachable, NOT_FOUND, FAILED_PRECONDITION, ...).
#include <malloc.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include <CLI/CLI.hpp>
#include <absl/synchronization/mutex.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "client/cli_habits.h"
#include "client/contexts.h"
#include "client/job_client.h"
#include "client/job_file.h"
#include "client/output.h"
#include "common/version.h"

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

// The subcommand people meant, found before CLI11 sees argv, so a typo gets "did you mean"
// instead of CLI11's "A subcommand is required". Skips the global options and, for those that
// take one, their values (`--server ADDR`, `-o json`; `--server=ADDR` is one word).
std::string FirstCommandWord(const CLI::App& app, int argc, char** argv) {
  std::set<std::string> takes_value;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_min() == 0) continue;  // a flag
    for (const auto& l : opt->get_lnames()) takes_value.insert("--" + l);
    for (const auto& s : opt->get_snames()) takes_value.insert("-" + s);
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (takes_value.count(a) > 0) {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;
    return a;
  }
  return "";
}

}  // namespace

static int Fp8ctlMain(int argc, char** argv) {
  CLI::App app{"fp8ctl: submit, inspect, watch and cancel fp8d jobs"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the command: `fp8ctl submit -f x -o json`
  std::string server_flag;
  std::string output = "table";
  app.add_option("--server", server_flag, "fp8d address (else $FP8D_ADDR, config file, 127.0.0.1:50051)");
  app.add_option("-o,--output", output, "table | json | yaml | name")
      ->check(CLI::IsMember({"table", "json", "yaml", "name"}));
  // Remote access: contexts (client/contexts.h), TLS and tokens.
  fp8d::client::ConnectionFlags connection_flags;
  app.add_option("--context", connection_flags.context, "named context of ~/.config/fp8d/config.yaml");
  app.add_option("--tls-ca", connection_flags.tls_ca, "PEM CA file: connect with TLS ($FP8D_TOKEN sends a token)");

  // The command words, in the order help lists them.
  const std::vector<std::string> command_names = {"submit", "get",    "list",   "watch",   "wait",
                                                  "logs",   "cancel", "delete", "describe", "config",
                                                  "version", "help",  "completion"};
  const std::string word = FirstCommandWord(app, argc, argv);
  // Only the command being run gets its CLI11 subcommand and options: building all thirteen
  // is an eighth of a short `submit`'s instructions. A bare `fp8ctl`, help and completion
  // describe every command, so they get them all. A command not built stands in as `unused`,
  // which is never parsed.
  const bool all_commands = word.empty() || word == "help" || word == "completion";
  CLI::App unused{"unused"};
  auto command = [&](const char* name, const char* description) {
    return all_commands || word == name ? app.add_subcommand(name, description) : &unused;
  };
  auto built = [&](CLI::App* sub) { return sub != &unused; };

  std::string file, request_id;
  std::vector<std::string> label_flags;
  bool wait_flag = false, parsable = false;
  auto* submit = command("submit", "create a job from a YAML or JSON file");
  if (built(submit)) {
    submit->add_option("-f,--file", file, "job file (YAML or JSON; - for stdin)")->required();
    submit->add_option("--request-id", request_id, "idempotency key (same id → same job)");
    submit->add_option("--label", label_flags, "KEY=VALUE label, repeatable (overrides the file's)");
    submit->add_flag("--wait", wait_flag, "watch the job until it ends (exit 1 if it fails)");
    submit->add_flag("--parsable", parsable, "print only the job id (as sbatch --parsable)");
  }

  std::string job;
  auto* get = command("get", "show a job");
  if (built(get)) get->add_option("JOB", job, "jobs/<id> or <id>")->required();

  std::string state, kind, page_token, selector;
  int page_size = 0;
  auto* list = command("list", "list jobs, newest first (all pages unless --page-size)");
  if (built(list)) {
    list->add_option("--state", state, "QUEUED, RUNNING, SUCCEEDED, ... (any case)");
    list->add_option("--kind", kind, "TRAIN or CALIBRATE");
    list->add_option("-l,--selector", selector, "label selector: k=v,k2!=v,k3,!k4");
    list->add_option("--page-size", page_size, "one page of this size (prints the next page token)")
        ->check(CLI::Range(1, 1000));
    list->add_option("--page-token", page_token, "continue a paged listing");
  }

  auto* watch = command("watch", "follow a job's progress until it ends");
  if (built(watch)) watch->add_option("JOB", job, "jobs/<id> or <id>")->required();

  std::string for_condition, timeout_text = "0";
  auto* wait_cmd = command("wait", "wait until a job reaches a state (as kubectl wait)");
  if (built(wait_cmd)) {
    wait_cmd->add_option("JOB", job, "jobs/<id> or <id>")->required();
    wait_cmd->add_option("--for", for_condition, "state=SUCCEEDED (any state, any case)")->required();
    wait_cmd->add_option("--timeout", timeout_text, "give up after this long: 30s, 10m, 1h (0 = never)");
  }

  int rank = 0, attempt = 0;
  bool follow = false;
  auto* logs = command("logs", "print a rank's log");
  if (built(logs)) {
    logs->add_option("JOB", job, "jobs/<id> or <id>")->required();
    logs->add_option("--rank", rank, "rank (default 0)");
    logs->add_option("--attempt", attempt, "attempt (default: the current one)");
    logs->add_flag("-f,--follow", follow, "keep printing until the job ends");
  }

  auto* cancel = command("cancel", "cancel a job");
  if (built(cancel)) cancel->add_option("JOB", job, "jobs/<id> or <id>")->required();

  auto* del = command("delete", "delete a finished job: its record and attempt files, never its output dir");
  if (built(del)) del->add_option("JOB", job, "jobs/<id> or <id>")->required();

  auto* describe = command("describe", "show a job with its attempts and events");
  if (built(describe)) describe->add_option("JOB", job, "jobs/<id> or <id>")->required();

  std::string context_name;
  auto* config_cmd = command("config", "fp8ctl contexts");
  CLI::App* use_context = &unused;
  CLI::App* get_contexts = &unused;
  if (built(config_cmd)) {
    config_cmd->require_subcommand(1);
    use_context = config_cmd->add_subcommand("use-context", "make a context the current one");
    use_context->add_option("NAME", context_name, "context name")->required();
    get_contexts = config_cmd->add_subcommand("get-contexts", "list the contexts");
  }

  auto* version_cmd = command("version", "print fp8ctl's version, git commit and build type");

  std::string help_topic;
  auto* help_cmd = command("help", "help for fp8ctl or one command");
  if (built(help_cmd)) help_cmd->add_option("COMMAND", help_topic, "the command to explain");

  std::string shell;
  auto* completion = command("completion", "print a shell completion script (bash or zsh)");
  if (built(completion)) {
    completion->add_option("SHELL", shell, "bash | zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));
  }

  if (!word.empty()) {
    if (std::find(command_names.begin(), command_names.end(), word) == command_names.end()) {
      const std::string guess = fp8d::client::SuggestCommand(word, command_names);
      std::cerr << "fp8ctl: unknown command '" << word << "'";
      if (!guess.empty()) std::cerr << ", did you mean '" << guess << "'?";
      std::cerr << "\nRun 'fp8ctl help' for the list of commands.\n";
      return kExitUsage;
    }
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

  if (version_cmd->parsed()) {
    std::cout << "fp8ctl " << fp8::kVersion << " (commit " << fp8::kGitCommit << ", " << fp8::kBuildType
              << " build)\n";
    return kExitOk;
  }
  if (help_cmd->parsed()) {
    if (help_topic.empty()) {
      std::cout << overview;
      return kExitOk;
    }
    for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      if (sub->get_name() == help_topic) {
        std::cout << sub->help();
        return kExitOk;
      }
    }
    const std::string guess = fp8d::client::SuggestCommand(help_topic, command_names);
    std::cerr << "fp8ctl: unknown command '" << help_topic << "'";
    if (!guess.empty()) std::cerr << ", did you mean '" << guess << "'?";
    std::cerr << "\n";
    return kExitUsage;
  }
  if (completion->parsed()) {
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

  const OutputFormat format = output == "json"   ? OutputFormat::kJson
                              : output == "yaml" ? OutputFormat::kYaml
                              : output == "name" ? OutputFormat::kName
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
  // Checked before any file is read or call made. Kept alive until the channel exists: the
  // credentials hold gRPC's library reference, and dropping the last one shuts gRPC down (its
  // threads joined) only for the channel to start it, and them, again.
  const auto creds = fp8d::client::MakeChannelCredentials(*connection);
  if (!creds.ok()) return ReportError(creds.status());
  const std::string address = connection->address;
  const std::string name = job.empty() ? "" : fp8d::client::NormalizeJobName(job);

  if (submit->parsed()) {
    auto labels = fp8d::client::ParseLabelFlags(label_flags);
    if (!labels.ok()) return ReportError(labels.status());
    auto parsed = fp8d::client::LoadJobFile(file);
    if (!parsed.ok()) {
      std::cerr << "fp8ctl: " << parsed.status().message() << "\n";
      return kExitUsage;
    }
    // Output-only fields are ignored with a note (README "Job files"), so a job saved with
    // `fp8ctl get -o yaml` can be submitted again.
    if (auto ignored = fp8d::client::ClearOutputOnlyFields(*parsed); !ignored.empty()) {
      std::string list;
      for (const auto& f : ignored) list += (list.empty() ? "" : ", ") + f;
      std::cerr << "fp8ctl: note: ignoring output-only fields in " << file << ": " << list << "\n";
    }
    for (const auto& [k, v] : *labels) (*parsed->mutable_labels())[k] = v;
    JobClient& client = NewClient(*connection);
    auto created = client.CreateJob(*parsed, request_id);
    if (!created.ok()) return ReportError(created.status());
    const bool document = format == OutputFormat::kJson || format == OutputFormat::kYaml;
    if (parsable) {
      std::cout << created->name().substr(created->name().find('/') + 1) << "\n";
    } else if (format == OutputFormat::kTable) {
      std::cout << created->name() << " " << fp8d::v1::JobState_Name(created->state()) << "\n";
    } else if (!(wait_flag && document)) {
      // With --wait, json and yaml print one document: the job as it ended.
      fp8d::client::PrintJob(*created, format, std::cout);
    }
    std::cout << std::flush;
    if (!wait_flag) return kExitOk;
    const WatchDisplay display = format == OutputFormat::kTable && !parsable ? WatchDisplay::kTable : WatchDisplay::kSilent;
    WatchOutcome outcome = Watch(client, address, created->name(), display);
    if (document && outcome.last.version() > 0) fp8d::client::PrintJob(outcome.last, format, std::cout);
    return outcome.exit_code;
  }

  JobClient& client = NewClient(*connection);
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
      auto s = fp8d::client::ParseStateFlag(state);
      if (!s.ok()) return ReportError(s.status());
      request.set_state(*s);
    }
    if (!kind.empty()) {
      std::string upper = kind;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      fp8d::v1::JobKind k;
      if (!fp8d::v1::JobKind_Parse(upper, &k) || k == fp8d::v1::JOB_KIND_UNSPECIFIED) {
        std::cerr << "fp8ctl: --kind " << kind << ": unknown kind; valid kinds: TRAIN, CALIBRATE\n";
        return kExitUsage;
      }
      request.set_kind(k);
    }
    request.set_label_selector(selector);
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
  if (watch->parsed()) {
    const WatchDisplay display = format == OutputFormat::kJson   ? WatchDisplay::kJsonLines
                                 : format == OutputFormat::kYaml ? WatchDisplay::kYaml
                                                                 : WatchDisplay::kTable;
    return Watch(client, address, name, display).exit_code;
  }
  if (wait_cmd->parsed()) {
    const std::string prefix = "state=";
    if (for_condition.rfind(prefix, 0) != 0) {
      std::cerr << "fp8ctl: --for " << for_condition << ": expected state=STATE (" << fp8d::client::ValidStates() << ")\n";
      return kExitUsage;
    }
    auto want = fp8d::client::ParseStateFlag(for_condition.substr(prefix.size()));
    if (!want.ok()) {
      std::cerr << "fp8ctl: --for " << for_condition << ": unknown state; valid states: "
                << fp8d::client::ValidStates() << "\n";
      return kExitUsage;
    }
    auto timeout = fp8d::client::ParseDuration(timeout_text);
    if (!timeout.ok()) {
      std::cerr << "fp8ctl: --timeout " << timeout_text << ": " << timeout.status().message() << "\n";
      return kExitUsage;
    }
    const auto budget = std::chrono::seconds(timeout->seconds()) + std::chrono::nanoseconds(timeout->nanos());
    const auto deadline = budget.count() == 0 ? std::chrono::steady_clock::time_point::max()
                                              : std::chrono::steady_clock::now() +
                                                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(budget);
    WatchOutcome outcome = Watch(client, address, name, WatchDisplay::kSilent,
                                 [&](const Job& j) { return j.state() == *want; }, deadline);
    if (outcome.last.state() == *want) {
      std::cout << outcome.last.name() << " " << fp8d::v1::JobState_Name(*want) << "\n";
      return kExitOk;
    }
    if (outcome.exit_code >= kExitUsage) return outcome.exit_code;  // already reported
    if (IsTerminal(outcome.last.state())) {
      std::cerr << "fp8ctl: " << name << " ended " << fp8d::v1::JobState_Name(outcome.last.state()) << ", not "
                << fp8d::v1::JobState_Name(*want) << "\n";
    } else {
      std::cerr << "fp8ctl: timed out after " << timeout_text << " waiting for " << name << " to be "
                << fp8d::v1::JobState_Name(*want) << " (it is "
                << fp8d::v1::JobState_Name(outcome.last.state()) << ")\n";
    }
    return kExitJobFailed;
  }
  if (logs->parsed()) {
    fp8d::v1::GetJobLogsRequest request;
    request.set_name(name);
    request.set_rank(rank);
    request.set_attempt(attempt);
    request.set_follow(follow);
    // -o json: NDJSON, one {"rank", "line"} object per log line.
    const bool json_lines = format == OutputFormat::kJson;
    std::string pending;
    auto emit_line = [&](const std::string& line) {
      // A log may hold any bytes: invalid UTF-8 becomes U+FFFD so each line stays valid JSON.
      std::cout << nlohmann::json({{"rank", rank}, {"line", line}})
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    };
    fp8::Status st = client.GetJobLogs(request, [&](const std::string& data) {
      if (!json_lines) {
        std::cout.write(data.data(), static_cast<std::streamsize>(data.size()));
        std::cout.flush();
        return;
      }
      pending += data;
      size_t start = 0, nl;
      while ((nl = pending.find('\n', start)) != std::string::npos) {
        emit_line(pending.substr(start, nl - start));
        start = nl + 1;
      }
      pending.erase(0, start);
      std::cout.flush();
    });
    if (json_lines && !pending.empty()) emit_line(pending);
    return st.ok() ? kExitOk : ReportError(st);
  }
  if (del->parsed()) {
    fp8::Status st = client.DeleteJob(name);
    if (!st.ok()) return ReportError(st);
    std::cout << name << (format == OutputFormat::kName ? "" : " deleted") << "\n";
    return kExitOk;
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
