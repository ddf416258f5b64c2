// SPDX-License-Identifier: Apache-2.0
// fp8ctl's command line: every command's CLI11 subcommand and options, bound to one Flags.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "client/contexts.h"

namespace fp8d::ctl {

// The subcommand people meant, found before CLI11 sees argv, so a typo gets "did you mean"
// instead of CLI11's "A subcommand is required". Skips the global options and, for those that
// take one, their values (`--server ADDR`, `-o json`; `--server=ADDR` is one word).
std::string FirstCommandWord(const CLI::App& app, int argc, char** argv);

// Every flag and argument of every command, bound to CLI11's options; a command that is not
// run leaves its fields at their defaults.
struct Flags {
  std::string server;
  std::string output = "table";
  fp8d::client::ConnectionFlags connection;
  std::string job;  // the JOB argument of the commands that take one
  // submit
  std::string file, request_id;
  std::vector<std::string> labels;
  bool wait = false, parsable = false;
  // list (selector also for cancel -l)
  std::string state, kind, page_token, selector, owner;
  int page_size = 0;
  // cancel: several names, or -l; --yes confirms more than one
  std::vector<std::string> jobs;
  bool yes = false;
  // wait
  std::string for_condition, timeout_text = "0";
  // logs: rank -1 = every rank of the job, each line prefixed; tail -1 = the whole log
  int rank = -1, attempt = 0, tail = -1;
  bool follow = false;
  // version: only fp8ctl's, without asking the server
  bool client_only = false;
  // usage
  std::string usage_since, usage_by = "owner";
  // config use-context, help, completion
  std::string context_name, help_topic, shell;
};

// The command words, in the order help lists them.
const std::vector<std::string>& CommandNames();

// Only the command being run gets its CLI11 subcommand and options: building all thirteen is an
// eighth of a short `submit`'s instructions. A bare `fp8ctl`, help and completion describe every
// command, so they get them all. A command not built stands in as `unused`, which is never
// parsed, so its `parsed()` is false.
class CommandBuilder {
 public:
  CommandBuilder(CLI::App& app, const std::string& word)
      : app_(app), word_(word), all_(word.empty() || word == "help" || word == "completion") {}
  CLI::App* Add(const char* name, const char* description) {
    return all_ || word_ == name ? app_.add_subcommand(name, description) : &unused_;
  }
  bool Built(const CLI::App* sub) const { return sub != &unused_; }
  CLI::App* Unused() { return &unused_; }

 private:
  CLI::App& app_;
  const std::string word_;
  const bool all_;
  CLI::App unused_{"unused"};
};

// The subcommands; one that was not built is the builder's `unused`.
struct Commands {
  CLI::App *submit, *get, *list, *watch, *wait, *logs, *cancel, *del, *describe, *queues, *usage;
  CLI::App *use_context, *get_contexts, *version, *help, *completion;
};

void AddGlobalOptions(CLI::App& app, Flags& f);
// Every command, in the order of CommandNames().
Commands AddCommands(CommandBuilder& b, Flags& f);

}  // namespace fp8d::ctl
