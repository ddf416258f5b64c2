// SPDX-License-Identifier: Apache-2.0
#include "client/fp8ctl_command_line.h"

#include <set>

namespace fp8d::ctl {
namespace {

// get, watch, cancel, delete, describe: a command whose one argument is the job.
CLI::App* AddJobCommand(CommandBuilder& b, Flags& f, const char* name, const char* description) {
  CLI::App* sub = b.Add(name, description);
  if (b.Built(sub)) sub->add_option("JOB", f.job, "jobs/<id> or <id>")->required();
  return sub;
}

CLI::App* AddSubmitCommand(CommandBuilder& b, Flags& f) {
  CLI::App* submit = b.Add("submit", "create a job from a YAML or JSON file");
  if (!b.Built(submit)) return submit;
  submit->add_option("-f,--file", f.file, "job file (YAML or JSON; - for stdin)")->required();
  submit->add_option("--request-id", f.request_id, "idempotency key (same id → same job)");
  submit->add_option("--label", f.labels, "KEY=VALUE label, repeatable (overrides the file's)");
  submit->add_flag("--wait", f.wait, "watch the job until it ends (exit 1 if it fails)");
  submit->add_flag("--parsable", f.parsable, "print only the job id (as sbatch --parsable)");
  return submit;
}

CLI::App* AddListCommand(CommandBuilder& b, Flags& f) {
  CLI::App* list = b.Add("list", "list jobs, newest first (all pages unless --page-size)");
  if (!b.Built(list)) return list;
  list->add_option("--state", f.state, "QUEUED, RUNNING, SUCCEEDED, ... (any case)");
  list->add_option("--kind", f.kind, "TRAIN or CALIBRATE");
  list->add_option("-l,--selector", f.selector, "label selector: k=v,k2!=v,k3,!k4");
  list->add_option("--owner", f.owner, "only jobs of this owner; `me`: your own");
  list->add_option("--page-size", f.page_size, "one page of this size (prints the next page token)")
      ->check(CLI::Range(1, 1000));
  list->add_option("--page-token", f.page_token, "continue a paged listing");
  return list;
}

CLI::App* AddWaitCommand(CommandBuilder& b, Flags& f) {
  CLI::App* wait = b.Add("wait", "wait until a job reaches a state (as kubectl wait)");
  if (!b.Built(wait)) return wait;
  wait->add_option("JOB", f.job, "jobs/<id> or <id>")->required();
  wait->add_option("--for", f.for_condition, "state=SUCCEEDED (any state, any case)")->required();
  wait->add_option("--timeout", f.timeout_text, "give up after this long: 30s, 10m, 1h (0 = never)");
  return wait;
}

CLI::App* AddLogsCommand(CommandBuilder& b, Flags& f) {
  CLI::App* logs = b.Add("logs", "print a rank's log");
  if (!b.Built(logs)) return logs;
  logs->add_option("JOB", f.job, "jobs/<id> or <id>")->required();
  logs->add_option("--rank", f.rank, "only this rank (default: every rank, lines prefixed [rank N])")
      ->check(CLI::NonNegativeNumber);
  logs->add_option("--attempt", f.attempt, "attempt (default: the current one)");
  logs->add_option("--tail", f.tail, "only the last N lines of each rank")->check(CLI::NonNegativeNumber);
  logs->add_flag("-f,--follow", f.follow, "keep printing until the job ends");
  return logs;
}

CLI::App* AddCancelCommand(CommandBuilder& b, Flags& f) {
  CLI::App* cancel = b.Add("cancel", "cancel jobs by name or label selector (--yes for more than one)");
  if (!b.Built(cancel)) return cancel;
  cancel->add_option("JOB", f.jobs, "jobs/<id> or <id>, one or more");
  cancel->add_option("-l,--selector", f.selector, "every active job whose labels match: k=v,k2!=v,k3,!k4");
  cancel->add_flag("-y,--yes", f.yes, "cancel more than one job (without it, print them and exit 1)");
  return cancel;
}

void AddConfigCommand(CommandBuilder& b, Flags& f, Commands& c) {
  CLI::App* config = b.Add("config", "fp8ctl contexts");
  c.use_context = b.Unused();
  c.get_contexts = b.Unused();
  if (!b.Built(config)) return;
  config->require_subcommand(1);
  c.use_context = config->add_subcommand("use-context", "make a context the current one");
  c.use_context->add_option("NAME", f.context_name, "context name")->required();
  c.get_contexts = config->add_subcommand("get-contexts", "list the contexts");
}

}  // namespace

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

const std::vector<std::string>& CommandNames() {
  static const std::vector<std::string> names = {"submit", "get",    "list",   "watch",   "wait",
                                                 "logs",   "cancel", "delete", "describe", "queues", "usage", "config",
                                                 "version", "help",  "completion"};
  return names;
}

void AddGlobalOptions(CLI::App& app, Flags& f) {
  app.add_option("--server", f.server, "fp8d address (else $FP8D_ADDR, config file, 127.0.0.1:50051)");
  app.add_option("-o,--output", f.output, "table | json | yaml | name")
      ->check(CLI::IsMember({"table", "json", "yaml", "name"}));
  // Remote access: contexts (client/contexts.h), TLS and tokens.
  app.add_option("--context", f.connection.context, "named context of ~/.config/fp8d/config.yaml");
  app.add_option("--tls-ca", f.connection.tls_ca, "PEM CA file: connect with TLS ($FP8D_TOKEN sends a token)");
}

Commands AddCommands(CommandBuilder& b, Flags& f) {
  Commands c{};
  c.submit = AddSubmitCommand(b, f);
  c.get = AddJobCommand(b, f, "get", "show a job");
  c.list = AddListCommand(b, f);
  c.watch = AddJobCommand(b, f, "watch", "follow a job's progress until it ends");
  c.wait = AddWaitCommand(b, f);
  c.logs = AddLogsCommand(b, f);
  c.cancel = AddCancelCommand(b, f);
  c.del = AddJobCommand(b, f, "delete", "delete a finished job: its record and attempt files, never its output dir");
  c.describe = AddJobCommand(b, f, "describe", "show a job with its attempts and events");
  c.queues = b.Add("queues", "list the scheduler's queues: quota, in use, borrowed, pending");
  c.usage = b.Add("usage", "GPU-seconds and CPU-slot-seconds of the stored attempts, per owner or queue");
  if (b.Built(c.usage)) {
    c.usage->add_option("--since", f.usage_since, "only the last DURATION (7d, 12h, 30m); default: all")
        ->option_text("DURATION");
    c.usage->add_option("--by", f.usage_by, "owner | queue")->check(CLI::IsMember({"owner", "queue"}));
  }
  AddConfigCommand(b, f, c);
  c.version = b.Add("version", "print fp8ctl's and the server's version, git commit and build type");
  if (b.Built(c.version)) c.version->add_flag("--client", f.client_only, "only fp8ctl's, without asking the server");
  c.help = b.Add("help", "help for fp8ctl or one command");
  if (b.Built(c.help)) c.help->add_option("COMMAND", f.help_topic, "the command to explain");
  c.completion = b.Add("completion", "print a shell completion script (bash or zsh)");
  if (b.Built(c.completion)) {
    c.completion->add_option("SHELL", f.shell, "bash | zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));
  }
  return c;
}

}  // namespace fp8d::ctl
