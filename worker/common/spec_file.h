// SPDX-License-Identifier: Apache-2.0
// Reads a job spec file (spec.json, or YAML when the name ends in .yaml / .yml) into its proto
// message (fp8d::v1::TrainSpec / CalibrateSpec) through protobuf's JSON parser: snake_case and
// lowerCamelCase names, int64 as numbers or strings, null as "not set". Unknown fields and
// values of the wrong type are InvalidArgument naming the field path ("training.learnin_rate:
// unknown field"), the worker exits 64 on them.
#pragma once

#include <string>

#include <google/protobuf/message.h>
#include <nlohmann/json.hpp>

#include "common/status.h"

namespace fp8::worker {

Status ReadSpecFile(const std::string& path, google::protobuf::Message* spec);
Status ParseSpecJson(const nlohmann::json& json, google::protobuf::Message* spec);
// YAML text → JSON (unquoted scalars that look like numbers or booleans become them).
StatusOr<nlohmann::json> YamlToJson(const std::string& yaml_text);

}  // namespace fp8::worker
