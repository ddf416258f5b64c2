#include "worker/calibrate/spec.h"

#include <fstream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace fp8::calibrate {

namespace {

using json = nlohmann::json;

Status FieldError(const std::string& field, const std::string& what) {
  return InvalidArgumentError("spec field \"" + field + "\": " + what);
}

Status CheckKnownFields(const json& obj, const std::string& prefix, const std::set<std::string>& known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!known.count(it.key())) return FieldError(prefix + it.key(), "unknown field");
  }
  return OkStatus();
}

StatusOr<std::string> GetString(const json& obj, const std::string& key, const std::string& field) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) return FieldError(field, "must be a string");
  return it->get<std::string>();
}

StatusOr<std::vector<std::string>> GetStrings(const json& obj, const std::string& key, const std::string& field) {
  std::vector<std::string> out;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_array()) return FieldError(field, "must be a list of strings");
  for (const auto& v : *it) {
    if (!v.is_string() || v.get<std::string>().empty())
      return FieldError(field, "must be a list of non-empty strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

// Picks one of `choices` (the first is the default for an empty value).
template <typename E>
StatusOr<E> GetEnum(const json& obj, const std::string& key, const std::string& field,
                    const std::vector<std::pair<std::string, E>>& choices) {
  FP8_ASSIGN_OR_RETURN(std::string v, GetString(obj, key, field));
  if (v.empty()) return choices.front().second;
  std::string names;
  for (const auto& [name, value] : choices) {
    if (v == name) return value;
    names += (names.empty() ? "" : " | ") + name;
  }
  return FieldError(field, "\"" + v + "\" is not one of " + names);
}

StatusOr<json> GetObject(const json& obj, const std::string& key, const std::string& field) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return json::object();
  if (!it->is_object()) return FieldError(field, "must be an object");
  return *it;
}

// YAML scalars are untyped; map them onto JSON the way a YAML 1.2 core-schema loader would.
json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : node) o[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& v : node) a.push_back(YamlToJson(v));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = node.Scalar();
      if (node.Tag() == "!") return s;  // quoted: always a string
      if (s == "true" || s == "True") return true;
      if (s == "false" || s == "False") return false;
      if (s == "null" || s == "~") return nullptr;
      try {
        size_t pos = 0;
        long long i = std::stoll(s, &pos);
        if (pos == s.size()) return i;
        double d = std::stod(s, &pos);
        if (pos == s.size()) return d;
      } catch (...) {
      }
      return s;
    }
    default:
      return nullptr;
  }
}

}  // namespace

const char* GranularityName(WeightGranularity g) {
  switch (g) {
    case WeightGranularity::kBlock: return "block";
    case WeightGranularity::kChannel: return "channel";
    case WeightGranularity::kTensor: return "tensor";
  }
  return "?";
}

StatusOr<CalibrateOptions> ParseCalibrateSpec(const json& spec) {
  if (!spec.is_object()) return InvalidArgumentError("spec: must be a JSON object");
  FP8_RETURN_IF_ERROR(CheckKnownFields(
      spec, "", {"input", "output_dir", "weights", "activations", "direction", "backend"}));
  CalibrateOptions o;
  FP8_ASSIGN_OR_RETURN(o.input, GetString(spec, "input", "input"));
  if (o.input.empty()) return FieldError("input", "required");
  FP8_ASSIGN_OR_RETURN(o.output_dir, GetString(spec, "output_dir", "output_dir"));
  if (o.output_dir.empty()) return FieldError("output_dir", "required");
  while (o.output_dir.size() > 1 && o.output_dir.back() == '/') o.output_dir.pop_back();
  if (o.output_dir == "/" || o.output_dir == "." || o.output_dir == "..")
    return FieldError("output_dir", "\"" + o.output_dir + "\" cannot be replaced by the output");

  FP8_ASSIGN_OR_RETURN(json w, GetObject(spec, "weights", "weights"));
  FP8_RETURN_IF_ERROR(CheckKnownFields(w, "weights.", {"granularity", "fmt", "scale_format", "include", "exclude", "skip_unaligned"}));
  FP8_ASSIGN_OR_RETURN(o.weights.granularity,
                       (GetEnum<WeightGranularity>(w, "granularity", "weights.granularity",
                                                   {{"block", WeightGranularity::kBlock},
                                                    {"channel", WeightGranularity::kChannel},
                                                    {"tensor", WeightGranularity::kTensor}})));
  // E5M2 has too few mantissa bits for weights; the kernels support it for gradients only.
  FP8_ASSIGN_OR_RETURN(o.weights.fmt, (GetEnum<kernels::Fp8Format>(w, "fmt", "weights.fmt",
                                                                   {{"e4m3", kernels::Fp8Format::kE4M3}})));
  FP8_ASSIGN_OR_RETURN(o.weights.scale_format,
                       (GetEnum<kernels::ScaleFormat>(w, "scale_format", "weights.scale_format",
                                                      {{"fp32", kernels::ScaleFormat::kFp32},
                                                       {"ue8m0", kernels::ScaleFormat::kUe8m0}})));
  FP8_ASSIGN_OR_RETURN(o.weights.include, GetStrings(w, "include", "weights.include"));
  FP8_ASSIGN_OR_RETURN(o.weights.exclude, GetStrings(w, "exclude", "weights.exclude"));
  if (auto it = w.find("skip_unaligned"); it != w.end() && !it->is_null()) {
    if (!it->is_boolean()) return FieldError("weights.skip_unaligned", "must be true or false");
    o.weights.skip_unaligned = it->get<bool>();
  }

  FP8_ASSIGN_OR_RETURN(json a, GetObject(spec, "activations", "activations"));
  FP8_RETURN_IF_ERROR(CheckKnownFields(a, "activations.", {"data", "num_samples", "method", "percentile"}));
  FP8_ASSIGN_OR_RETURN(o.activations.data, GetString(a, "data", "activations.data"));
  if (auto it = a.find("num_samples"); it != a.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > (1 << 30))
      return FieldError("activations.num_samples", "must be a non-negative integer");
    o.activations.num_samples = it->get<int>();
  }
  FP8_ASSIGN_OR_RETURN(o.activations.method,
                       (GetEnum<std::string>(a, "method", "activations.method",
                                             {{"max", "max"}, {"percentile", "percentile"}, {"mse", "mse"}})));
  if (auto it = a.find("percentile"); it != a.end() && !it->is_null()) {
    if (!it->is_number()) return FieldError("activations.percentile", "must be a number");
    double p = it->get<double>();
    if (p != 0) {
      if (!(p > 0 && p <= 100)) return FieldError("activations.percentile", "must be in (0, 100]");
      o.activations.percentile = p;
    }
  }
  FP8_ASSIGN_OR_RETURN(o.direction, (GetEnum<Direction>(spec, "direction", "direction",
                                                        {{"quantize", Direction::kQuantize},
                                                         {"dequantize", Direction::kDequantize}})));
  FP8_ASSIGN_OR_RETURN(o.backend, (GetEnum<Backend>(spec, "backend", "backend",
                                                    {{"auto", Backend::kAuto},
                                                     {"cpu", Backend::kCpu},
                                                     {"cuda", Backend::kCuda}})));
  if (!o.activations.data.empty() && o.direction != Direction::kQuantize)
    return FieldError("activations.data", "static activation scales are calibrated by direction quantize only");

  o.canonical = {
      {"input", o.input},
      {"output_dir", o.output_dir},
      {"weights",
       {{"granularity", GranularityName(o.weights.granularity)},
        {"fmt", "e4m3"},
        {"scale_format", o.weights.scale_format == kernels::ScaleFormat::kUe8m0 ? "ue8m0" : "fp32"},
        {"include", o.weights.include},
        {"exclude", o.weights.exclude}}},
      {"direction", o.direction == Direction::kQuantize ? "quantize" : "dequantize"},
  };
  // Only when set, so the fingerprint of an earlier job's spec stays what it was.
  if (o.weights.skip_unaligned) o.canonical["weights"]["skip_unaligned"] = true;
  // Only with static calibration, so the fingerprint of a weights-only job stays what it was.
  if (!o.activations.data.empty()) {
    o.canonical["activations"] = {{"data", o.activations.data},
                                  {"num_samples", o.activations.num_samples},
                                  {"method", o.activations.method},
                                  {"percentile", o.activations.percentile}};
  }
  return o;
}

StatusOr<CalibrateOptions> LoadCalibrateSpec(const std::string& path) {
  std::ifstream f(path);
  if (!f) return InvalidArgumentError("spec file " + path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  json spec;
  const bool yaml = path.size() >= 5 && (path.ends_with(".yaml") || path.ends_with(".yml"));
  if (yaml) {
    try {
      spec = YamlToJson(YAML::Load(text));
    } catch (const YAML::Exception& e) {
      return InvalidArgumentError("spec file " + path + ": malformed YAML: " + e.what());
    }
  } else {
    try {
      spec = json::parse(text);
    } catch (const json::exception& e) {
      return InvalidArgumentError("spec file " + path + ": malformed JSON: " + e.what());
    }
  }
  return ParseCalibrateSpec(spec);
}

}  // namespace fp8::calibrate
