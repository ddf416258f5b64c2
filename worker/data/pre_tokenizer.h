// SPDX-License-Identifier: Apache-2.0
// The pre-tokenizers of Hugging Face byte-level BPE tokenizers: `Split` with a regex
// (behavior Isolated) and `ByteLevel` (prefix space, the GPT-2 regex), on RE2.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <re2/re2.h>

#include "common/status.h"

namespace fp8::data {

// The split regex of the GPT-2 ByteLevel pre-tokenizer (`use_regex`).
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// An Oniguruma pattern (the library's engine) in RE2 syntax: `\s` and `\S` as Unicode
// White_Space, as Oniguruma reads them (RE2's `\s` is ASCII only), and the top-level
// alternatives `\s+(?!\S)|\s+` as one named group `\s+` that SplitRegex shortens by hand (RE2 has
// no lookahead). InvalidArgument naming `field` for what RE2 cannot express.
StatusOr<std::string> OnigurumaToRe2(std::string_view pattern, const std::string& field);

// Splits text at the matches of a regex and keeps both the matches and the text between them
// (the library's SplitDelimiterBehavior::Isolated).
class SplitRegex {
 public:
  static StatusOr<std::unique_ptr<SplitRegex>> Compile(std::string_view oniguruma_pattern, const std::string& field);
  // Appends the non-empty pieces of `text`, views into it, in order.
  void Split(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  std::unique_ptr<RE2> re_;
  int ws_group_ = -1;  // the `\s+(?!\S)|\s+` group, -1 when the pattern has none
  int num_groups_ = 0;
};

// One step of a pre-tokenizer: split every piece with a regex, or give every piece that does
// not start with a space one (ByteLevel's add_prefix_space).
struct PreTokenizerStep {
  std::unique_ptr<SplitRegex> split;  // null: the prefix-space step
};

class PreTokenizer {
 public:
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}
  // The pre-tokens of `text`: views into `text` or into strings kept in `arena`.
  void Run(std::string_view text, std::deque<std::string>* arena, std::vector<std::string_view>* out) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace fp8::data
