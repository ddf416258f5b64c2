// SPDX-License-Identifier: Apache-2.0
#include "worker/common/spec_file.h"

#include <fstream>
#include <sstream>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

namespace fp8::worker {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using nlohmann::json;

std::string Join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

// protobuf's parser says "Cannot find field." without a path; walk the JSON against the
// descriptor first so the error names the field as the user wrote it.
Status CheckFields(const json& obj, const Descriptor* desc, const std::string& path) {
  if (!obj.is_object()) return InvalidArgumentError((path.empty() ? "spec" : path) + ": must be an object");
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string field = Join(path, it.key());
    const FieldDescriptor* f = desc->FindFieldByName(it.key());
    for (int i = 0; f == nullptr && i < desc->field_count(); ++i) {
      if (desc->field(i)->json_name() == it.key()) f = desc->field(i);
    }
    if (f == nullptr) return InvalidArgumentError(field + ": unknown field");
    // protobuf's parser would take a single value as a list of one.
    if (f->is_repeated() && !it.value().is_array() && !it.value().is_null())
      return InvalidArgumentError(field + ": must be a list");
    if (f->type() == FieldDescriptor::TYPE_MESSAGE && !f->is_repeated() && !it.value().is_null()) {
      FP8_RETURN_IF_ERROR(CheckFields(it.value(), f->message_type(), field));
    }
  }
  return OkStatus();
}

// protobuf's messages look like "(training.seed): invalid value "abc" for type TYPE_INT64";
// put the path first like every other spec error.
std::string Reworded(const std::string& message) {
  const size_t open = message.find('(');
  const size_t close = message.find("): ", open);
  if (open == std::string::npos || close == std::string::npos) return "spec: " + message;
  return message.substr(open + 1, close - open - 1) + ": " + message.substr(close + 3);
}

json YamlNodeToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = YamlNodeToJson(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& e : n) a.push_back(YamlNodeToJson(e));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted: a string
      if (s == "true" || s == "True") return true;
      if (s == "false" || s == "False") return false;
      if (s == "null" || s == "~") return nullptr;
      char* end = nullptr;
      long long i = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0') return i;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0') return d;
      return s;
    }
    default:
      return nullptr;
  }
}

}  // namespace

StatusOr<json> YamlToJson(const std::string& yaml_text) {
  try {
    return YamlNodeToJson(YAML::Load(yaml_text));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("spec: YAML parse error: ") + e.what());
  }
}

Status ParseSpecJson(const json& j, google::protobuf::Message* spec) {
  FP8_RETURN_IF_ERROR(CheckFields(j, spec->GetDescriptor(), ""));
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  spec->Clear();
  const auto st = google::protobuf::util::JsonStringToMessage(j.dump(), spec, options);
  if (!st.ok()) return InvalidArgumentError(Reworded(std::string(st.message())));
  return OkStatus();
}

Status ReadSpecFile(const std::string& path, google::protobuf::Message* spec) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("spec: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  if (path.ends_with(".yaml") || path.ends_with(".yml")) {
    FP8_ASSIGN_OR_RETURN(j, YamlToJson(ss.str()));
  } else {
    j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return InvalidArgumentError("spec: " + path + " is not valid JSON");
  }
  return ParseSpecJson(j, spec);
}

}  // namespace fp8::worker
