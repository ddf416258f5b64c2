// SPDX-License-Identifier: Apache-2.0
#include "client/job_file.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/time_util.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/eventhandler.h>
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

// "line 3, column 5" of a node (yaml-cpp counts from 0).
std::string Where(const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.is_null()) return "";
  return " (line " + std::to_string(m.line + 1) + ", column " + std::to_string(m.column + 1) + ")";
}

// yaml-cpp shares an aliased node instead of copying it, so a small file of aliases to
// aliases (a "billion laughs") expands exponentially on conversion, and an alias to its own
// ancestor recurses forever. Every node visited while converting counts against these limits.
struct Budget {
  static constexpr int64_t kMaxNodes = 100000;
  static constexpr int kMaxDepth = 64;
  int64_t nodes = 0;
  int depth = 0;
};

// Counts one node and one level of nesting; pair with Budget::depth-- when the level ends.
fp8::Status Enter(Budget& budget, const std::string& path) {
  if (++budget.nodes > Budget::kMaxNodes) {
    return Bad(path, "the job file expands to more than " + std::to_string(Budget::kMaxNodes) +
                         " nodes (aliases that repeat each other?)");
  }
  if (++budget.depth > Budget::kMaxDepth) {
    return Bad(path, "nested more than " + std::to_string(Budget::kMaxDepth) +
                         " levels deep (an alias that contains itself?)");
  }
  return fp8::OkStatus();
}

struct DepthGuard {
  Budget& budget;
  ~DepthGuard() { --budget.depth; }
};

// A mapping key must be a scalar, once per mapping.
fp8::StatusOr<std::string> KeyOf(const YAML::Node& key, const std::string& path,
                                 std::set<std::string>& seen) {
  if (!key.IsScalar()) return Bad(path, "a key must be a plain string, not a " +
                                            std::string(key.IsMap() ? "mapping" : key.IsSequence() ? "sequence" : "null") +
                                            Where(key));
  const std::string k = key.Scalar();
  if (!seen.insert(k).second) return Bad(path + "." + k, "duplicate key" + Where(key));
  return k;
}

std::string Scalar(const YAML::Node& node) { return node.Scalar(); }

// A plain (unquoted) YAML scalar that spells null.
bool IsYamlNull(const YAML::Node& node) {
  if (node.IsNull()) return true;
  if (!node.IsScalar() || node.Tag() == "!") return false;
  const std::string& s = node.Scalar();
  return s == "~" || s == "null" || s == "Null" || s == "NULL";
}

// A free-form value (google.protobuf.Value), converted generically.
fp8::Status FillValue(const YAML::Node& n, google::protobuf::Value* out, const std::string& at, Budget& budget);

fp8::Status FillStruct(const YAML::Node& n, google::protobuf::Struct* out, const std::string& at, Budget& budget) {
  std::set<std::string> seen;
  for (const auto& kv : n) {
    FP8_ASSIGN_OR_RETURN(std::string k, KeyOf(kv.first, at, seen));
    FP8_RETURN_IF_ERROR(FillValue(kv.second, &(*out->mutable_fields())[k], at + "." + k, budget));
  }
  return fp8::OkStatus();
}

fp8::Status FillValue(const YAML::Node& n, google::protobuf::Value* out, const std::string& at, Budget& budget) {
  FP8_RETURN_IF_ERROR(Enter(budget, at));
  DepthGuard inner{budget};
  if (n.IsMap()) return FillStruct(n, out->mutable_struct_value(), at, budget);
  if (n.IsSequence()) {
    auto* list = out->mutable_list_value();
    for (const auto& v : n) {
      FP8_RETURN_IF_ERROR(FillValue(v, list->add_values(), at + "[" + std::to_string(list->values_size()) + "]", budget));
    }
    return fp8::OkStatus();
  }
  if (IsYamlNull(n)) {
    out->set_null_value(google::protobuf::NULL_VALUE);
    return fp8::OkStatus();
  }
  if (n.Tag() != "!") {
    double d;
    if (YAML::convert<double>::decode(n, d)) {
      // JSON has no NaN or infinity, and the proto JSON mapping refuses them in a Value.
      if (!std::isfinite(d)) return Bad(at, "must be finite");
      out->set_number_value(d);
      return fp8::OkStatus();
    }
    bool b;
    if (YAML::convert<bool>::decode(n, b)) {
      out->set_bool_value(b);
      return fp8::OkStatus();
    }
  }
  out->set_string_value(n.Scalar());
  return fp8::OkStatus();
}

// The message is written in the protobuf wire format straight from the YAML tree and parsed
// once by the generated code. Filling it through reflection, or through proto JSON, would make
// protobuf build the descriptors of descriptor.proto (and JSON a type resolver) on every
// `fp8ctl submit`: a fifth of its CPU.
void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void PutTag(int number, WireType type, std::string* out) {
  PutVarint((static_cast<uint64_t>(number) << 3) | type, out);
}

void PutBytes(int number, const std::string& bytes, std::string* out) {
  PutTag(number, kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out->append(bytes);
}

template <typename T>
void PutFixed(int number, T value, std::string* out) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  PutTag(number, sizeof(T) == 4 ? kFixed32 : kFixed64, out);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 are little-endian, as the format
  out->append(bytes, sizeof(T));
}

fp8::Status EncodeMessage(const YAML::Node& node, const Descriptor* desc, const std::string& path,
                          Budget& budget, std::string* out);

// Appends one value of `field` (one element, when repeated) read from a YAML node.
fp8::Status EncodeField(const YAML::Node& node, const FieldDescriptor* field, const std::string& path,
                        Budget& budget, std::string* out) {
  using FD = FieldDescriptor;
  FP8_RETURN_IF_ERROR(Enter(budget, path));
  DepthGuard guard{budget};
  const int number = field->number();
  if (field->type() == FD::TYPE_MESSAGE) {
    const std::string& full = field->message_type()->full_name();
    if (full == "google.protobuf.Duration") {
      if (!node.IsScalar()) return Bad(path, "expected a duration like 500ms, 30s, 5m or 2h");
      auto parsed = ParseDuration(Scalar(node));
      if (!parsed.ok()) return Bad(path, parsed.status().message());
      PutBytes(number, parsed->SerializeAsString(), out);
      return fp8::OkStatus();
    }
    if (full == "google.protobuf.Timestamp") {
      google::protobuf::Timestamp ts;
      if (!node.IsScalar() || !google::protobuf::util::TimeUtil::FromString(Scalar(node), &ts)) {
        return Bad(path, "expected an RFC 3339 timestamp");
      }
      PutBytes(number, ts.SerializeAsString(), out);
      return fp8::OkStatus();
    }
    if (full == "google.protobuf.Value" || full == "google.protobuf.Struct") {
      // Free-form: converted generically first, so a hostile tree meets the budget's limits
      // whatever its shape.
      google::protobuf::Value value;
      FP8_RETURN_IF_ERROR(FillValue(node, &value, path, budget));
      if (full == "google.protobuf.Value") {
        PutBytes(number, value.SerializeAsString(), out);
      } else if (value.has_struct_value()) {
        PutBytes(number, value.struct_value().SerializeAsString(), out);
      } else {
        return Bad(path, "expected a mapping" + Where(node));
      }
      return fp8::OkStatus();
    }
    if (!node.IsMap()) return Bad(path, "expected a mapping" + Where(node));
    std::string sub;
    FP8_RETURN_IF_ERROR(EncodeMessage(node, field->message_type(), path, budget, &sub));
    PutBytes(number, sub, out);
    return fp8::OkStatus();
  }
  if (!node.IsScalar()) return Bad(path, "expected a scalar value" + Where(node));
  const std::string s = Scalar(node);
  try {
    switch (field->cpp_type()) {
      case FD::CPPTYPE_STRING:
        if (field->type() == FD::TYPE_BYTES) return Bad(path, "bytes fields cannot be set from a job file");
        PutBytes(number, s, out);
        return fp8::OkStatus();
      case FD::CPPTYPE_BOOL:
        PutTag(number, kVarint, out);
        PutVarint(node.as<bool>() ? 1 : 0, out);
        return fp8::OkStatus();
      case FD::CPPTYPE_INT32:
      case FD::CPPTYPE_INT64: {
        size_t used = 0;
        long long v = std::stoll(s, &used, 10);
        if (used != s.size()) return Bad(path, "expected an integer, got \"" + s + "\"");
        const bool is32 = field->cpp_type() == FD::CPPTYPE_INT32;
        if (is32 && (v < INT32_MIN || v > INT32_MAX)) return Bad(path, "out of range for a 32-bit integer");
        switch (field->type()) {
          case FD::TYPE_SINT32:
          case FD::TYPE_SINT64:
            PutTag(number, kVarint, out);
            PutVarint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63), out);
            break;
          case FD::TYPE_SFIXED32:
            PutFixed(number, static_cast<int32_t>(v), out);
            break;
          case FD::TYPE_SFIXED64:
            PutFixed(number, static_cast<int64_t>(v), out);
            break;
          default:  // int32 and int64: negative values are ten-byte varints of the 64-bit value
            PutTag(number, kVarint, out);
            PutVarint(static_cast<uint64_t>(v), out);
        }
        return fp8::OkStatus();
      }
      case FD::CPPTYPE_UINT32:
      case FD::CPPTYPE_UINT64: {
        size_t used = 0;
        unsigned long long v = std::stoull(s, &used, 10);
        if (used != s.size() || s[0] == '-') return Bad(path, "expected a non-negative integer");
        if (field->cpp_type() == FD::CPPTYPE_UINT32 && v > UINT32_MAX) {
          return Bad(path, "out of range for a 32-bit integer");
        }
        if (field->type() == FD::TYPE_FIXED32) {
          PutFixed(number, static_cast<uint32_t>(v), out);
        } else if (field->type() == FD::TYPE_FIXED64) {
          PutFixed(number, static_cast<uint64_t>(v), out);
        } else {
          PutTag(number, kVarint, out);
          PutVarint(v, out);
        }
        return fp8::OkStatus();
      }
      case FD::CPPTYPE_DOUBLE:
      case FD::CPPTYPE_FLOAT: {
        size_t used = 0;
        double v = std::stod(s, &used);
        if (used != s.size()) return Bad(path, "expected a number, got \"" + s + "\"");
        if (!std::isfinite(v)) return Bad(path, "must be finite");
        if (field->cpp_type() == FD::CPPTYPE_FLOAT) {
          if (std::fabs(v) > std::numeric_limits<float>::max()) return Bad(path, "out of range for a 32-bit float");
          PutFixed(number, static_cast<float>(v), out);
        } else {
          PutFixed(number, v, out);
        }
        return fp8::OkStatus();
      }
      case FD::CPPTYPE_ENUM: {
        // By name, or by number.
        const google::protobuf::EnumValueDescriptor* value = field->enum_type()->FindValueByName(s);
        if (value == nullptr) {
          size_t used = 0;
          try {
            const int v = std::stoi(s, &used, 10);
            if (used == s.size()) value = field->enum_type()->FindValueByNumber(v);
          } catch (...) {
          }
        }
        if (value == nullptr) return Bad(path, "unknown value \"" + s + "\"");
        PutTag(number, kVarint, out);
        PutVarint(static_cast<uint64_t>(static_cast<int64_t>(value->number())), out);
        return fp8::OkStatus();
      }
      case FD::CPPTYPE_MESSAGE:
        break;
    }
  } catch (const std::exception&) {
    return Bad(path, "cannot read \"" + s + "\" as " + field->cpp_type_name());
  }
  return Bad(path, "unsupported field type");
}

fp8::Status EncodeMessage(const YAML::Node& node, const Descriptor* desc, const std::string& path,
                          Budget& budget, std::string* out) {
  FP8_RETURN_IF_ERROR(Enter(budget, path));
  DepthGuard guard{budget};
  std::set<std::string> seen;
  std::set<int> fields_seen;
  std::map<const google::protobuf::OneofDescriptor*, std::string> oneof_seen;
  for (const auto& kv : node) {
    FP8_ASSIGN_OR_RETURN(const std::string key, KeyOf(kv.first, path, seen));
    const std::string field_path = path + "." + key;
    const FieldDescriptor* field = desc->FindFieldByName(key);
    if (field == nullptr) field = desc->FindFieldByCamelcaseName(key);
    if (field == nullptr) return Bad(field_path, "unknown field" + Where(kv.first));
    // `name` and `jobs/...` spelled two ways (snake and camel) would be the same field twice.
    if (!fields_seen.insert(field->number()).second) return Bad(field_path, "duplicate key" + Where(kv.first));
    if (IsYamlNull(kv.second)) continue;
    // The wire format keeps the last member of a oneof; a file that sets two is a mistake.
    if (const auto* oneof = field->real_containing_oneof(); oneof != nullptr) {
      auto [it, first] = oneof_seen.emplace(oneof, field->name());
      if (!first) {
        return Bad(field_path, "only one of " + it->second + " and " + field->name() + " may be set" + Where(kv.first));
      }
    }
    if (field->is_map()) {
      if (!kv.second.IsMap()) return Bad(field_path, "expected a mapping" + Where(kv.second));
      const Descriptor* entry_type = field->message_type();
      std::set<std::string> map_keys;
      for (const auto& entry : kv.second) {
        FP8_ASSIGN_OR_RETURN(const std::string k, KeyOf(entry.first, field_path, map_keys));
        const std::string entry_path = field_path + "[\"" + k + "\"]";
        std::string item;
        FP8_RETURN_IF_ERROR(EncodeField(entry.first, entry_type->map_key(), entry_path, budget, &item));
        FP8_RETURN_IF_ERROR(EncodeField(entry.second, entry_type->map_value(), entry_path, budget, &item));
        PutBytes(field->number(), item, out);
      }
    } else if (field->is_repeated()) {
      // Unpacked even where the field is packed: parsers accept both.
      if (kv.second.IsSequence()) {
        int i = 0;
        for (const auto& item : kv.second) {
          FP8_RETURN_IF_ERROR(EncodeField(item, field, field_path + "[" + std::to_string(i++) + "]", budget, out));
        }
      } else {
        FP8_RETURN_IF_ERROR(EncodeField(kv.second, field, field_path + "[0]", budget, out));
      }
    } else {
      FP8_RETURN_IF_ERROR(EncodeField(kv.second, field, field_path, budget, out));
    }
  }
  return fp8::OkStatus();
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
    const std::string number = s.substr(start, i - start);
    try {
      size_t used = 0;
      value = std::stold(number, &used);
      // "1.5.5" would read as 1.5 with the rest dropped.
      if (used != number.size()) throw std::invalid_argument(number);
    } catch (...) {
      return fp8::InvalidArgumentError("duration \"" + text + "\": bad number \"" + number + "\"");
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

std::vector<std::string> ClearOutputOnlyFields(fp8d::v1::Job& job) {
  static const char* kOutputOnly[] = {"name",       "state",      "attempt",   "progress",
                                      "checkpoint", "result",     "error",     "create_time",
                                      "start_time", "end_time",   "update_time", "version",
                                      "attempts",   "events",     "owner",     "run_as_uid"};
  std::vector<std::string> cleared;
  const auto* desc = job.GetDescriptor();
  const auto* reflection = job.GetReflection();
  for (const char* name : kOutputOnly) {
    const FieldDescriptor* field = desc->FindFieldByName(name);
    const bool set = field->is_repeated() ? reflection->FieldSize(job, field) > 0 : reflection->HasField(job, field);
    if (!set) continue;
    reflection->ClearField(&job, field);
    cleared.push_back(name);
  }
  return cleared;
}

void ResolveJobPaths(fp8d::v1::Job& job, const std::string& base_dir) {
  switch (job.spec_case()) {  // exhaustive: a new kind's paths must be listed here
    case fp8d::v1::Job::kTrain: {
      auto* t = job.mutable_train();
      if (t->has_data()) {
        t->mutable_data()->set_train(Resolve(t->data().train(), base_dir));
        t->mutable_data()->set_val(Resolve(t->data().val(), base_dir));
      }
      t->set_output_dir(Resolve(t->output_dir(), base_dir));
      t->set_init_from(Resolve(t->init_from(), base_dir));
      break;
    }
    case fp8d::v1::Job::kCalibrate: {
      auto* c = job.mutable_calibrate();
      c->set_input(Resolve(c->input(), base_dir));
      c->set_output_dir(Resolve(c->output_dir(), base_dir));
      if (c->has_activations()) {
        c->mutable_activations()->set_data(Resolve(c->activations().data(), base_dir));
      }
      break;
    }
    case fp8d::v1::Job::SPEC_NOT_SET:
      break;
  }
}

namespace {

// The first byte that is not valid UTF-8, as "line L, column C"; empty when all is valid.
std::string FirstInvalidUtf8(const std::string& text) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= text.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (ok && len > 1) {
      // Overlong forms, surrogates and code points past U+10FFFF are invalid too.
      uint32_t cp = c & (0xFF >> (len + 1));
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
      static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (!ok) return "line " + std::to_string(line) + ", column " + std::to_string(column);
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += len;
  }
  return "";
}

// JSON is parsed by yaml-cpp like any YAML, but a file that is JSON gets JSON's stricter rules
// first: no duplicate keys and nothing after the closing brace.
class DuplicateKeyCheck : public nlohmann::json_sax<json> {
 public:
  std::string error;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second) {
      error = "duplicate key \"" + k + "\"";
      return false;
    }
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return ++depth_ < 1000; }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    (void)position;
    return false;
  }

 private:
  std::vector<std::set<std::string>> keys_;
  int depth_ = 0;
};

// Builds the first document's tree from the parser's events and counts the documents, so the
// text is parsed once. Nodes made through yaml-cpp's public API carry no marks (line and
// column): a conversion that fails is run again on a tree from YAML::Load to name the place.
// (A YAML::Node is rebound with reset(): its operator= writes through to the node it refers to.)
class FirstDocumentBuilder : public YAML::EventHandler {
 public:
  const YAML::Node& root() const { return root_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override { done_ = true; }
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override {
    Complete(YAML::Node(YAML::NodeType::Null), anchor);
  }
  void OnAlias(const YAML::Mark&, YAML::anchor_t anchor) override {
    // The parser refuses an alias to an unknown anchor before this is called.
    if (!done_ && anchor >= 1 && anchor <= anchors_.size()) Complete(anchors_[anchor - 1], YAML::NullAnchor);
  }
  void OnScalar(const YAML::Mark&, const std::string& tag, YAML::anchor_t anchor, const std::string& value) override {
    YAML::Node node(value);
    node.SetTag(tag);
    Complete(node, anchor);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(YAML::NodeType::Sequence, tag, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark&, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(YAML::NodeType::Map, tag, anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct OpenCollection {
    YAML::Node node;
    bool have_key = false;
    YAML::Node key;
  };

  void Remember(const YAML::Node& node, YAML::anchor_t anchor) {
    if (anchor == YAML::NullAnchor) return;
    if (anchors_.size() < anchor) anchors_.resize(anchor);
    anchors_[anchor - 1].reset(node);
  }
  void Open(YAML::NodeType::value type, const std::string& tag, YAML::anchor_t anchor) {
    if (done_) return;
    YAML::Node node(type);
    node.SetTag(tag);
    // Registered before its children, as yaml-cpp does: an alias inside refers to this node
    // (a cycle, which the conversion's depth limit refuses).
    Remember(node, anchor);
    stack_.push_back({node, false, YAML::Node()});
  }
  void Close() {
    if (done_ || stack_.empty()) return;
    YAML::Node node = stack_.back().node;
    stack_.pop_back();
    Add(node);
  }
  void Complete(const YAML::Node& node, YAML::anchor_t anchor) {
    if (done_) return;
    Remember(node, anchor);
    Add(node);
  }
  void Add(const YAML::Node& node) {
    if (stack_.empty()) {
      root_.reset(node);
      return;
    }
    OpenCollection& parent = stack_.back();
    if (parent.node.IsSequence()) {
      parent.node.push_back(node);
    } else if (!parent.have_key) {
      parent.key.reset(node);
      parent.have_key = true;
    } else {
      parent.node.force_insert(parent.key, node);
      parent.have_key = false;
    }
  }

  bool done_ = false;
  YAML::Node root_;
  std::vector<OpenCollection> stack_;
  std::vector<YAML::Node> anchors_;
};

fp8::Status CheckJson(const std::string& text) {
  DuplicateKeyCheck check;
  const bool ok = json::sax_parse(text, &check, json::input_format_t::json, /*strict=*/true);
  if (ok) return fp8::OkStatus();
  std::string why = check.error.empty() ? "invalid JSON" : check.error;
  // nlohmann's messages start with "[json.exception.parse_error.101] parse error at line 1,
  // column 9: ..."; the bracketed id says nothing to a user.
  if (why.rfind("[json.exception.", 0) == 0 && why.find("] ") != std::string::npos) {
    why = why.substr(why.find("] ") + 2);
  }
  return fp8::InvalidArgumentError("job file (JSON): " + why);
}

fp8::StatusOr<fp8d::v1::Job> ParseJobTextUnguarded(const std::string& text, const std::string& base_dir) {
  if (const std::string bad = FirstInvalidUtf8(text); !bad.empty()) {
    return fp8::InvalidArgumentError("job file: invalid UTF-8 at " + bad);
  }
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') FP8_RETURN_IF_ERROR(CheckJson(text));
  YAML::Node root;
  try {
    // The documents are counted from the parser's events, stopping at the second: yaml-cpp's
    // LoadAll never ends on some inputs (" ,a[]" yields empty documents forever).
    FirstDocumentBuilder builder;
    std::stringstream in(text);
    YAML::Parser parser(in);
    int documents = 0;
    while (documents < 2 && parser.HandleNextDocument(builder)) ++documents;
    if (documents > 1) {
      return fp8::InvalidArgumentError("job file: holds more than one YAML document; submit one job per file");
    }
    root = builder.root();
  } catch (const YAML::Exception& e) {
    // e.msg without yaml-cpp's own prefix, with the position people count from 1.
    return fp8::InvalidArgumentError("job file: line " + std::to_string(e.mark.line + 1) + ", column " +
                                     std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (!root.IsMap()) return fp8::InvalidArgumentError("job: the job file must be a mapping");
  std::string wire;
  Budget budget;
  if (fp8::Status st = EncodeMessage(root, fp8d::v1::Job::descriptor(), "job", budget, &wire); !st.ok()) {
    // The same conversion on a tree with marks fails the same way and says where.
    Budget again;
    wire.clear();
    fp8::Status placed = EncodeMessage(YAML::Load(text), fp8d::v1::Job::descriptor(), "job", again, &wire);
    return placed.ok() ? st : placed;
  }
  fp8d::v1::Job job;
  if (!job.ParseFromString(wire)) return fp8::InvalidArgumentError("job: the file does not make a valid Job");
  ResolveJobPaths(job, base_dir);
  return job;
}

}  // namespace

fp8::StatusOr<fp8d::v1::Job> ParseJobText(const std::string& text, const std::string& base_dir) {
  // Nothing a hostile file holds may escape as an exception (bad_alloc included): every
  // failure is INVALID_ARGUMENT with a message, and fp8ctl exits 2.
  try {
    return ParseJobTextUnguarded(text, base_dir);
  } catch (const std::bad_alloc&) {
    return fp8::InvalidArgumentError("job file: too large to convert");
  } catch (const std::exception& e) {
    return fp8::InvalidArgumentError(std::string("job file: ") + e.what());
  }
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
