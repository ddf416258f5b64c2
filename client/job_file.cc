#include "client/job_file.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace fp8d::client {
namespace {

namespace fs = std::filesystem;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using nlohmann::json;

fp8::Status Bad(const std::string& path, const std::string& why) {
  return fp8::InvalidArgumentError(path + ": " + why);
}

std::string Scalar(const YAML::Node& node) { return node.Scalar(); }

// A plain (unquoted) YAML scalar that spells null.
bool IsYamlNull(const YAML::Node& node) {
  if (node.IsNull()) return true;
  if (!node.IsScalar() || node.Tag() == "!") return false;
  const std::string& s = node.Scalar();
  return s == "~" || s == "null" || s == "Null" || s == "NULL";
}

fp8::StatusOr<json> ToJson(const YAML::Node& node, const Descriptor* desc, const std::string& path);

fp8::StatusOr<json> FieldValue(const YAML::Node& node, const FieldDescriptor* field,
                               const std::string& path) {
  using FD = FieldDescriptor;
  if (field->type() == FD::TYPE_MESSAGE) {
    const std::string full = field->message_type()->full_name();
    if (full == "google.protobuf.Duration") {
      if (!node.IsScalar()) return Bad(path, "expected a duration like 500ms, 30s, 5m or 2h");
      auto parsed = ParseDuration(Scalar(node));
      if (!parsed.ok()) return Bad(path, parsed.status().message());
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%lld.%09ds", static_cast<long long>(parsed->seconds()),
                    parsed->nanos());
      return json(std::string(buf));
    }
    if (full == "google.protobuf.Timestamp") {
      if (!node.IsScalar()) return Bad(path, "expected an RFC 3339 timestamp");
      return json(Scalar(node));
    }
    if (full == "google.protobuf.Struct" || full == "google.protobuf.Value") {
      // Free-form: convert generically.
      std::function<json(const YAML::Node&)> generic = [&](const YAML::Node& n) -> json {
        if (n.IsMap()) {
          json o = json::object();
          for (const auto& kv : n) o[kv.first.as<std::string>()] = generic(kv.second);
          return o;
        }
        if (n.IsSequence()) {
          json a = json::array();
          for (const auto& v : n) a.push_back(generic(v));
          return a;
        }
        if (IsYamlNull(n)) return nullptr;
        if (n.Tag() != "!") {
          try { return n.as<double>(); } catch (...) {}
          try { return n.as<bool>(); } catch (...) {}
        }
        return n.Scalar();
      };
      return generic(node);
    }
    if (!node.IsMap()) return Bad(path, "expected a mapping");
    return ToJson(node, field->message_type(), path);
  }
  if (!node.IsScalar()) return Bad(path, "expected a scalar value");
  const std::string s = Scalar(node);
  try {
    switch (field->cpp_type()) {
      case FD::CPPTYPE_STRING:
        return json(s);
      case FD::CPPTYPE_BOOL:
        return json(node.as<bool>());
      case FD::CPPTYPE_INT32:
      case FD::CPPTYPE_INT64: {
        size_t used = 0;
        long long v = std::stoll(s, &used, 10);
        if (used != s.size()) return Bad(path, "expected an integer, got \"" + s + "\"");
        if (field->cpp_type() == FD::CPPTYPE_INT32 && (v < INT32_MIN || v > INT32_MAX)) {
          return Bad(path, "out of range for a 32-bit integer");
        }
        return json(v);
      }
      case FD::CPPTYPE_UINT32:
      case FD::CPPTYPE_UINT64: {
        size_t used = 0;
        unsigned long long v = std::stoull(s, &used, 10);
        if (used != s.size() || s[0] == '-') return Bad(path, "expected a non-negative integer");
        return json(v);
      }
      case FD::CPPTYPE_DOUBLE:
      case FD::CPPTYPE_FLOAT: {
        size_t used = 0;
        double v = std::stod(s, &used);
        if (used != s.size()) return Bad(path, "expected a number, got \"" + s + "\"");
        if (!std::isfinite(v)) return Bad(path, "must be finite");
        return json(v);
      }
      case FD::CPPTYPE_ENUM: {
        // By name, or by number.
        if (field->enum_type()->FindValueByName(s) != nullptr) return json(s);
        size_t used = 0;
        try {
          int v = std::stoi(s, &used, 10);
          if (used == s.size() && field->enum_type()->FindValueByNumber(v) != nullptr) return json(v);
        } catch (...) {
        }
        return Bad(path, "unknown value \"" + s + "\"");
      }
      case FD::CPPTYPE_MESSAGE:
        break;
    }
  } catch (const std::exception&) {
    return Bad(path, "cannot read \"" + s + "\" as " + field->cpp_type_name());
  }
  return Bad(path, "unsupported field type");
}

fp8::StatusOr<json> ToJson(const YAML::Node& node, const Descriptor* desc, const std::string& path) {
  json out = json::object();
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string field_path = path + "." + key;
    const FieldDescriptor* field = desc->FindFieldByName(key);
    if (field == nullptr) field = desc->FindFieldByCamelcaseName(key);
    if (field == nullptr) return Bad(field_path, "unknown field");
    if (IsYamlNull(kv.second)) continue;
    if (field->is_map()) {
      if (!kv.second.IsMap()) return Bad(field_path, "expected a mapping");
      const FieldDescriptor* value_field = field->message_type()->FindFieldByName("value");
      json m = json::object();
      for (const auto& entry : kv.second) {
        const std::string k = entry.first.as<std::string>();
        FP8_ASSIGN_OR_RETURN(json v, FieldValue(entry.second, value_field, field_path + "[\"" + k + "\"]"));
        m[k] = std::move(v);
      }
      out[field->name()] = std::move(m);
    } else if (field->is_repeated()) {
      json a = json::array();
      if (kv.second.IsSequence()) {
        int i = 0;
        for (const auto& item : kv.second) {
          FP8_ASSIGN_OR_RETURN(json v, FieldValue(item, field, field_path + "[" + std::to_string(i++) + "]"));
          a.push_back(std::move(v));
        }
      } else {
        FP8_ASSIGN_OR_RETURN(json v, FieldValue(kv.second, field, field_path + "[0]"));
        a.push_back(std::move(v));
      }
      out[field->name()] = std::move(a);
    } else {
      FP8_ASSIGN_OR_RETURN(json v, FieldValue(kv.second, field, field_path));
      out[field->name()] = std::move(v);
    }
  }
  return out;
}

std::string Resolve(const std::string& p, const std::string& base_dir) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  return (fs::path(base_dir) / p).lexically_normal().string();
}

}  // namespace

fp8::StatusOr<google::protobuf::Duration> ParseDuration(const std::string& text) {
  std::string s;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  }
  if (s.empty()) return fp8::InvalidArgumentError("empty duration");
  if (s[0] == '-') return fp8::InvalidArgumentError("duration \"" + text + "\" must not be negative");
  long double total_ns = 0;
  size_t i = 0;
  bool bare_number = true;
  while (i < s.size()) {
    size_t start = i;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
    if (start == i) return fp8::InvalidArgumentError("duration \"" + text + "\": expected a number");
    long double value;
    try {
      value = std::stold(s.substr(start, i - start));
    } catch (...) {
      return fp8::InvalidArgumentError("duration \"" + text + "\": bad number");
    }
    size_t unit_start = i;
    while (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i]))) ++i;
    const std::string unit = s.substr(unit_start, i - unit_start);
    long double scale;
    if (unit.empty()) {
      if (!bare_number || i != s.size()) {
        return fp8::InvalidArgumentError("duration \"" + text + "\": missing unit (ms, s, m, h)");
      }
      scale = 1e9L;  // a bare number is seconds
    } else if (unit == "ns") {
      scale = 1;
    } else if (unit == "us") {
      scale = 1e3L;
    } else if (unit == "ms") {
      scale = 1e6L;
    } else if (unit == "s") {
      scale = 1e9L;
    } else if (unit == "m") {
      scale = 60e9L;
    } else if (unit == "h") {
      scale = 3600e9L;
    } else if (unit == "d") {
      scale = 86400e9L;
    } else {
      return fp8::InvalidArgumentError("duration \"" + text + "\": unknown unit \"" + unit +
                                       "\" (use ms, s, m, h)");
    }
    bare_number = false;
    total_ns += value * scale;
  }
  if (total_ns > 315576000000e9L) return fp8::InvalidArgumentError("duration \"" + text + "\" is too large");
  const long long ns = static_cast<long long>(std::llround(total_ns));
  google::protobuf::Duration d;
  d.set_seconds(ns / 1000000000LL);
  d.set_nanos(static_cast<int>(ns % 1000000000LL));
  return d;
}

void ResolveJobPaths(fp8d::v1::Job& job, const std::string& base_dir) {
  if (job.has_train()) {
    auto* t = job.mutable_train();
    if (t->has_data()) {
      t->mutable_data()->set_train(Resolve(t->data().train(), base_dir));
      t->mutable_data()->set_val(Resolve(t->data().val(), base_dir));
    }
    t->set_output_dir(Resolve(t->output_dir(), base_dir));
    t->set_init_from(Resolve(t->init_from(), base_dir));
  }
  if (job.has_calibrate()) {
    auto* c = job.mutable_calibrate();
    c->set_input(Resolve(c->input(), base_dir));
    c->set_output_dir(Resolve(c->output_dir(), base_dir));
    if (c->has_activations()) {
      c->mutable_activations()->set_data(Resolve(c->activations().data(), base_dir));
    }
  }
}

fp8::StatusOr<fp8d::v1::Job> ParseJobText(const std::string& text, const std::string& base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return fp8::InvalidArgumentError(std::string("job file: ") + e.what());
  }
  if (!root.IsMap()) return fp8::InvalidArgumentError("job: the job file must be a mapping");
  FP8_ASSIGN_OR_RETURN(json j, ToJson(root, fp8d::v1::Job::descriptor(), "job"));
  fp8d::v1::Job job;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(j.dump(), &job, options);
  if (!st.ok()) return fp8::InvalidArgumentError("job: " + std::string(st.message()));
  ResolveJobPaths(job, base_dir);
  return job;
}

fp8::StatusOr<fp8d::v1::Job> LoadJobFile(const std::string& path) {
  std::stringstream buffer;
  std::string base_dir;
  if (path == "-") {
    buffer << std::cin.rdbuf();
    base_dir = fs::current_path().string();
  } else {
    std::ifstream in(path);
    if (!in) return fp8::InvalidArgumentError("-f " + path + ": cannot open");
    buffer << in.rdbuf();
    base_dir = fs::absolute(path).parent_path().string();
  }
  return ParseJobText(buffer.str(), base_dir);
}

}  // namespace fp8d::client
