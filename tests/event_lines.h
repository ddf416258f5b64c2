// SPDX-License-Identifier: Apache-2.0
// Worker event lines (proto/fp8d/v1/worker_event.proto as JSON) in the flat shape the worker
// tests read: {"type": <the payload's key>, "time": t, <the payload's fields>...}, with proto
// JSON's int64 strings ("42") and non-finite doubles ("NaN") turned back into numbers. Which
// fields those are comes from the proto, so a string field that happens to hold digits (a
// checksum) stays a string.
#pragma once

#include <cmath>
#include <limits>
#include <string>

#include <google/protobuf/descriptor.h>
#include <nlohmann/json.hpp>

#include "fp8d/v1/worker_event.pb.h"

namespace fp8::testing {

inline nlohmann::json FlatEvent(const nlohmann::json& line) {
  using google::protobuf::FieldDescriptor;
  nlohmann::json flat = nlohmann::json::object();
  if (!line.is_object()) return flat;
  for (const auto& [key, value] : line.items()) {
    if (key == "time") {
      flat["time"] = value;
      continue;
    }
    flat["type"] = key;
    const FieldDescriptor* payload = fp8d::v1::WorkerEvent::descriptor()->FindFieldByName(key);
    if (!value.is_object() || payload == nullptr || payload->message_type() == nullptr) continue;
    for (const auto& [name, v] : value.items()) {
      const FieldDescriptor* field = payload->message_type()->FindFieldByName(name);
      const auto type = field != nullptr ? field->cpp_type() : FieldDescriptor::CPPTYPE_MESSAGE;
      if (v.is_string() && (type == FieldDescriptor::CPPTYPE_INT64 || type == FieldDescriptor::CPPTYPE_UINT64)) {
        flat[name] = std::stoll(v.get<std::string>());
      } else if (v.is_string() && (type == FieldDescriptor::CPPTYPE_DOUBLE || type == FieldDescriptor::CPPTYPE_FLOAT)) {
        const std::string s = v.get<std::string>();
        flat[name] = s == "NaN" ? std::numeric_limits<double>::quiet_NaN() : s[0] == '-' ? -HUGE_VAL : HUGE_VAL;
      } else {
        flat[name] = v;
      }
    }
  }
  return flat;
}

}  // namespace fp8::testing
