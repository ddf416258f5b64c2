// SPDX-License-Identifier: Apache-2.0
#include "worker/data/pre_tokenizer.h"

#include "worker/data/utf8.h"

namespace fp8::data {
namespace {

// Unicode White_Space: U+0009..U+000D, U+0085 and the separators (Zs, Zl, Zp).
constexpr std::string_view kSpaceClassBody = R"(\t-\r\x{85}\p{Z})";
constexpr std::string_view kLookaheadSpaces = R"(\s+(?!\S)|\s+)";
constexpr std::string_view kSpaceGroup = "fp8_spaces";

}  // namespace

StatusOr<std::string> OnigurumaToRe2(std::string_view p, const std::string& field) {
  std::string out;
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (!in_class && depth == 0 && p.substr(i).starts_with(kLookaheadSpaces) && (i == 0 || p[i - 1] == '|') &&
        (i + kLookaheadSpaces.size() == p.size() || p[i + kLookaheadSpaces.size()] == '|')) {
      out += "(?P<" + std::string(kSpaceGroup) + ">[" + std::string(kSpaceClassBody) + "]+)";
      i += kLookaheadSpaces.size() - 1;
      continue;
    }
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        out += in_class ? std::string(kSpaceClassBody) : "[" + std::string(kSpaceClassBody) + "]";
      } else if (e == 'S') {
        if (in_class) return InvalidArgumentError(field + ": \\S inside a character class is not supported");
        out += "[^" + std::string(kSpaceClassBody) + "]";
      } else if (e == 'w' || e == 'W' || e == 'd' || e == 'D' || e == 'b' || e == 'B' || e == 'h' || e == 'H') {
        // Unicode in Oniguruma, ASCII in RE2: refused rather than matched differently.
        return InvalidArgumentError(field + ": \\" + std::string(1, e) + " is not supported (use \\p{...} classes)");
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
    } else if (c == '[') {
      in_class = true;
      out += c;
      // A leading ']' (or '^]') is a literal, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    }
    out += c;
  }
  return out;
}

StatusOr<std::unique_ptr<SplitRegex>> SplitRegex::Compile(std::string_view oniguruma_pattern, const std::string& field) {
  FP8_ASSIGN_OR_RETURN(std::string pattern, OnigurumaToRe2(oniguruma_pattern, field));
  RE2::Options opts;
  opts.set_log_errors(false);
  auto re = std::make_unique<RE2>(pattern, opts);
  if (!re->ok()) return InvalidArgumentError(field + ": RE2 cannot compile the pattern: " + re->error());
  auto s = std::unique_ptr<SplitRegex>(new SplitRegex());
  s->num_groups_ = re->NumberOfCapturingGroups();
  const auto& named = re->NamedCapturingGroups();
  if (auto it = named.find(std::string(kSpaceGroup)); it != named.end()) s->ws_group_ = it->second;
  s->re_ = std::move(re);
  return s;
}

void SplitRegex::Split(std::string_view text, std::vector<std::string_view>* out) const {
  std::vector<re2::StringPiece> m(static_cast<size_t>(num_groups_) + 1);
  size_t pos = 0, last = 0;
  const size_t n = text.size();
  const re2::StringPiece sp(text.data(), n);
  while (pos < n && re_->Match(sp, pos, n, RE2::UNANCHORED, m.data(), static_cast<int>(m.size()))) {
    const size_t start = static_cast<size_t>(m[0].data() - text.data());
    size_t end = start + m[0].size();
    if (ws_group_ > 0 && m[ws_group_].data() != nullptr && end < n) {
      // `\s+(?!\S)`: a run of spaces before a non-space gives up its last space to what follows;
      // a run of one space is the `\s+` alternative's and stays whole.
      size_t last_char = end - 1;
      while (last_char > start && (static_cast<unsigned char>(text[last_char]) & 0xC0) == 0x80) --last_char;
      if (last_char > start) end = last_char;
    }
    if (end == start) {  // an empty match separates nothing
      pos = start + Utf8CharLen(static_cast<unsigned char>(text[start]));
      continue;
    }
    if (start > last) out->push_back(text.substr(last, start - last));
    out->push_back(text.substr(start, end - start));
    last = pos = end;
  }
  if (last < n) out->push_back(text.substr(last));
}

void PreTokenizer::Run(std::string_view text, std::deque<std::string>* arena, std::vector<std::string_view>* out) const {
  std::vector<std::string_view> pieces{text}, next;
  for (const PreTokenizerStep& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) {
      if (step.split) {
        step.split->Split(piece, &next);
      } else if (piece.starts_with(' ')) {
        next.push_back(piece);
      } else {
        std::string& prefixed = arena->emplace_back(1, ' ');
        prefixed.append(piece);
        next.push_back(prefixed);
      }
    }
    pieces.swap(next);
  }
  out->insert(out->end(), pieces.begin(), pieces.end());
}

}  // namespace fp8::data
