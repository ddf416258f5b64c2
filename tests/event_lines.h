// Worker event lines (proto/fp8d/v1/worker_event.proto as JSON) in the flat shape the worker
// tests read: {"type": <the payload's key>, "time": t, <the payload's fields>...}, with proto
// JSON's int64 strings ("42") and non-finite doubles ("NaN") turned back into numbers.
#pragma once

#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

namespace fp8::testing {

inline nlohmann::json FlatEvent(const nlohmann::json& line) {
  nlohmann::json flat = nlohmann::json::object();
  if (!line.is_object()) return flat;
  for (const auto& [key, value] : line.items()) {
    if (key == "time") {
      flat["time"] = value;
      continue;
    }
    flat["type"] = key;
    if (!value.is_object()) continue;
    for (const auto& [field, v] : value.items()) {
      const std::string s = v.is_string() ? v.get<std::string>() : "";
      if (!s.empty() && s.find_first_not_of("-0123456789") == std::string::npos) {
        flat[field] = std::stoll(s);
      } else if (s == "NaN") {
        flat[field] = std::numeric_limits<double>::quiet_NaN();
      } else if (s == "Infinity" || s == "-Infinity") {
        flat[field] = s[0] == '-' ? -HUGE_VAL : HUGE_VAL;
      } else {
        flat[field] = v;
      }
    }
  }
  return flat;
}

}  // namespace fp8::testing
