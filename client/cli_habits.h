// SPDX-License-Identifier: Apache-2.0
// Small pieces of fp8ctl's command line that people bring from kubectl and sbatch: "did you
// mean" for a mistyped command, case-insensitive states, label flags, shell completion.
// Pure functions, so api_unit_test covers them without a daemon.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::client {

// The closest of `commands` to `word` (edit distance at most 2, or a unique prefix); empty
// when none is close.
std::string SuggestCommand(const std::string& word, const std::vector<std::string>& commands);

// "running", "Running" or "RUNNING" → RUNNING. INVALID_ARGUMENT listing the valid states.
fp8::StatusOr<fp8d::v1::JobState> ParseStateFlag(const std::string& text);
// "QUEUED, STARTING, RUNNING, ..." (every state but UNSPECIFIED).
std::string ValidStates();

// `--label k=v` flags → a map; INVALID_ARGUMENT naming the flag for a missing '=' or key.
fp8::StatusOr<std::map<std::string, std::string>> ParseLabelFlags(const std::vector<std::string>& flags);

// One subcommand's words for completion: its name and its flags (long and short forms).
struct CommandWords {
  std::string name;
  std::vector<std::string> flags;
};
// A bash completion script (`source <(fp8ctl completion bash)`).
std::string BashCompletion(const std::vector<CommandWords>& commands, const std::vector<std::string>& global_flags);
// zsh: the bash script through bashcompinit, which every zsh ships.
std::string ZshCompletion(const std::vector<CommandWords>& commands, const std::vector<std::string>& global_flags);

}  // namespace fp8d::client
