// SPDX-License-Identifier: Apache-2.0
#include "client/cli_habits.h"

#include <algorithm>
#include <cctype>

namespace fp8d::client {
namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

}  // namespace

std::string SuggestCommand(const std::string& word, const std::vector<std::string>& commands) {
  std::string best;
  size_t best_distance = 3;  // more than 2 edits away is not a typo
  for (const auto& c : commands) {
    const size_t d = EditDistance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  if (!best.empty() || word.empty()) return best;
  std::vector<std::string> prefixed;
  for (const auto& c : commands) {
    if (c.rfind(word, 0) == 0) prefixed.push_back(c);
  }
  return prefixed.size() == 1 ? prefixed[0] : "";
}

std::string ValidStates() {
  const auto* desc = fp8d::v1::JobState_descriptor();
  std::string out;
  for (int i = 0; i < desc->value_count(); ++i) {
    if (desc->value(i)->number() == fp8d::v1::JOB_STATE_UNSPECIFIED) continue;
    out += (out.empty() ? "" : ", ") + desc->value(i)->name();
  }
  return out;
}

fp8::StatusOr<fp8d::v1::JobState> ParseStateFlag(const std::string& text) {
  std::string upper = text;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  fp8d::v1::JobState state;
  if (upper.empty() || upper == "JOB_STATE_UNSPECIFIED" || !fp8d::v1::JobState_Parse(upper, &state)) {
    return fp8::InvalidArgumentError("--state " + text + ": unknown state; valid states: " + ValidStates());
  }
  return state;
}

fp8::StatusOr<std::map<std::string, std::string>> ParseLabelFlags(const std::vector<std::string>& flags) {
  std::map<std::string, std::string> labels;
  for (const auto& f : flags) {
    const size_t eq = f.find('=');
    if (eq == std::string::npos || eq == 0) {
      return fp8::InvalidArgumentError("--label " + f + ": expected KEY=VALUE");
    }
    labels[f.substr(0, eq)] = f.substr(eq + 1);
  }
  return labels;
}

std::string BashCompletion(const std::vector<CommandWords>& commands,
                           const std::vector<std::string>& global_flags) {
  std::vector<std::string> names;
  for (const auto& c : commands) names.push_back(c.name);
  std::string cases;
  for (const auto& c : commands) {
    cases += "    " + c.name + ") words=\"" + Join(c.flags) + " " + Join(global_flags) + "\" ;;\n";
  }
  return "# fp8ctl bash completion: source <(fp8ctl completion bash)\n"
         "_fp8ctl() {\n"
         "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" cmd=\"\" i words\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    case \"${COMP_WORDS[i]}\" in\n"
         "      -*) ;;\n"
         "      *) cmd=\"${COMP_WORDS[i]}\"; break ;;\n"
         "    esac\n"
         "  done\n"
         "  if [[ -z \"$cmd\" ]]; then\n"
         "    COMPREPLY=($(compgen -W \"" + Join(names) + " " + Join(global_flags) + "\" -- \"$cur\"))\n"
         "    return\n"
         "  fi\n"
         "  case \"$cmd\" in\n" + cases +
         "    *) words=\"\" ;;\n"
         "  esac\n"
         "  if [[ \"$cur\" == -* ]]; then\n"
         "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
         "  else\n"
         "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
         "  fi\n"
         "}\n"
         "complete -F _fp8ctl fp8ctl\n";
}

std::string ZshCompletion(const std::vector<CommandWords>& commands,
                          const std::vector<std::string>& global_flags) {
  return "#compdef fp8ctl\n"
         "# fp8ctl zsh completion: source <(fp8ctl completion zsh)\n"
         "autoload -U +X bashcompinit && bashcompinit\n" +
         BashCompletion(commands, global_flags);
}

}  // namespace fp8d::client
