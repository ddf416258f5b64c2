// SPDX-License-Identifier: Apache-2.0
#include "common/label_selector.h"

#include <cctype>

namespace fp8 {
namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Keys as validation allows them in labels: letters, digits, '-', '_', '.', '/'.
bool ValidKey(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!std::isalnum(c) && c != '-' && c != '_' && c != '.' && c != '/') return false;
  }
  return true;
}

}  // namespace

StatusOr<std::vector<LabelRequirement>> ParseLabelSelector(const std::string& text, const std::string& field) {
  std::vector<LabelRequirement> out;
  if (Trim(text).empty()) return out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string part = Trim(text.substr(start, comma - start));
    start = comma + 1;
    auto bad = [&](const std::string& why) {
      return InvalidArgumentError(field + ": \"" + part + "\": " + why +
                                  " (expected k=v, k!=v, k or !k, separated by commas)");
    };
    if (part.empty()) return bad("empty requirement");
    LabelRequirement r;
    size_t op;
    if ((op = part.find("!=")) != std::string::npos) {
      r.op = LabelRequirement::Op::kNotEquals;
      r.key = Trim(part.substr(0, op));
      r.value = Trim(part.substr(op + 2));
    } else if ((op = part.find("==")) != std::string::npos) {
      r.key = Trim(part.substr(0, op));
      r.value = Trim(part.substr(op + 2));
    } else if ((op = part.find('=')) != std::string::npos) {
      r.key = Trim(part.substr(0, op));
      r.value = Trim(part.substr(op + 1));
    } else if (part[0] == '!') {
      r.op = LabelRequirement::Op::kNotExists;
      r.key = Trim(part.substr(1));
    } else {
      r.op = LabelRequirement::Op::kExists;
      r.key = part;
    }
    if (!ValidKey(r.key)) return bad("bad key");
    for (unsigned char c : r.value) {
      if (c < 0x20 || c == '=' || c == '!') return bad("bad value");
    }
    out.push_back(std::move(r));
    if (comma == text.size()) break;
  }
  return out;
}

bool MatchesLabels(const std::vector<LabelRequirement>& selector,
                   const std::map<std::string, std::string>& labels) {
  for (const auto& r : selector) {
    auto it = labels.find(r.key);
    const bool has = it != labels.end();
    switch (r.op) {
      case LabelRequirement::Op::kEquals:
        if (!has || it->second != r.value) return false;
        break;
      case LabelRequirement::Op::kNotEquals:
        if (has && it->second == r.value) return false;
        break;
      case LabelRequirement::Op::kExists:
        if (!has) return false;
        break;
      case LabelRequirement::Op::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

}  // namespace fp8
