// SPDX-License-Identifier: Apache-2.0
// Label selectors as kubectl's -l: "k=v,k2!=v,k3,!k4". Parsed by the API's validation (a bad
// selector is INVALID_ARGUMENT naming label_selector) and matched by the store against each
// job's labels, so fp8ctl only passes the text on.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8 {

struct LabelRequirement {
  enum class Op { kEquals, kNotEquals, kExists, kNotExists };
  std::string key;
  Op op = Op::kEquals;
  std::string value;
};

// Empty text → no requirements (everything matches). INVALID_ARGUMENT names `field`.
StatusOr<std::vector<LabelRequirement>> ParseLabelSelector(const std::string& text,
                                                           const std::string& field = "label_selector");
bool MatchesLabels(const std::vector<LabelRequirement>& selector,
                   const std::map<std::string, std::string>& labels);

}  // namespace fp8
