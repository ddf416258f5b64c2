#include "worker/train/spec.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace fp8::train {
namespace {

using nlohmann::json;

// protobuf's JSON printer writes lowerCamelCase unless told otherwise; map it back.
std::string SnakeCase(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (std::isupper(static_cast<unsigned char>(c))) {
      out.push_back('_');
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Reads the fields of one JSON object, refusing the ones nobody asked for.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string path) : path_(std::move(path)) {
    if (!obj.is_object()) {
      status_ = InvalidArgumentError(Name("") + ": must be an object");
      return;
    }
    for (auto it = obj.begin(); it != obj.end(); ++it) fields_[SnakeCase(it.key())] = it.value();
  }

  std::string Name(const std::string& field) const {
    if (field.empty()) return path_.empty() ? "spec" : path_;
    return path_.empty() ? field : path_ + "." + field;
  }

  // Absent, null, "" and 0 mean "default" (the proto cannot tell them apart).
  const json* Get(const std::string& field) {
    seen_.insert(field);
    auto it = fields_.find(field);
    if (it == fields_.end() || it->second.is_null()) return nullptr;
    return &it->second;
  }

  void String(const std::string& field, std::string* out) {
    const json* v = Get(field);
    if (!v || !status_.ok()) return;
    if (!v->is_string()) return Fail(field, "must be a string");
    if (!v->get<std::string>().empty()) *out = v->get<std::string>();
  }

  // protobuf JSON writes int64 as strings, so numeric strings are accepted.
  bool Number(const std::string& field, double* out) {
    const json* v = Get(field);
    if (!v || !status_.ok()) return false;
    double d;
    if (v->is_number()) {
      d = v->get<double>();
    } else if (v->is_string()) {
      const std::string s = v->get<std::string>();
      char* end = nullptr;
      d = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0') {
        Fail(field, "must be a number, got \"" + s + "\"");
        return false;
      }
    } else {
      Fail(field, "must be a number");
      return false;
    }
    if (!std::isfinite(d)) {
      Fail(field, "must be finite");
      return false;
    }
    if (d == 0) return false;  // default
    *out = d;
    return true;
  }

  template <typename Int>
  void Integer(const std::string& field, Int* out, int64_t min_value) {
    double d;
    if (!Number(field, &d)) return;
    if (d != std::floor(d)) return Fail(field, "must be an integer");
    if (d < static_cast<double>(min_value))
      return Fail(field, "must be >= " + std::to_string(min_value) + " (0 means the default)");
    if (d > 9.0e15) return Fail(field, "too large");
    *out = static_cast<Int>(d);
  }

  void Bool(const std::string& field, bool* out) {
    const json* v = Get(field);
    if (!v || !status_.ok()) return;
    if (!v->is_boolean()) return Fail(field, "must be true or false");
    *out = v->get<bool>();
  }

  const json* Object(const std::string& field) { return Get(field); }

  void Fail(const std::string& field, const std::string& msg) {
    if (status_.ok()) status_ = InvalidArgumentError(Name(field) + ": " + msg);
  }

  // Call last: reports the first unknown field.
  Status Finish() {
    if (!status_.ok()) return status_;
    for (const auto& [k, v] : fields_) {
      if (!seen_.count(k)) return InvalidArgumentError(Name(k) + ": unknown field");
    }
    return OkStatus();
  }

 private:
  std::string path_;
  std::map<std::string, json> fields_;
  std::set<std::string> seen_;
  Status status_;
};

Status ApplyPreset(ModelConfig* m) {
  struct P { const char* name; int l, h, c, t, v; };
  static const P kPresets[] = {
      {"tiny", 2, 4, 128, 64, 256},
      {"gpt2-124m", 12, 12, 768, 1024, 50257},
      {"gpt-1b", 24, 16, 2048, 2048, 50304},
      {"gpt-2b", 24, 20, 2560, 2048, 50304},
  };
  for (const P& p : kPresets) {
    if (m->preset != p.name) continue;
    if (!m->n_layer) m->n_layer = p.l;
    if (!m->n_head) m->n_head = p.h;
    if (!m->d_model) m->d_model = p.c;
    if (!m->seq_len) m->seq_len = p.t;
    if (!m->vocab_size) m->vocab_size = p.v;
    return OkStatus();
  }
  return InvalidArgumentError("model.preset: unknown preset '" + m->preset +
                              "' (want tiny, gpt2-124m, gpt-1b or gpt-2b)");
}

// The daemon writes every field of the proto: "", 0 and null mean "not set".
bool HasNonDefaultField(const json& obj) {
  if (!obj.is_object()) return true;
  for (const auto& [key, v] : obj.items()) {
    if (v.is_null() || (v.is_string() && (v.get<std::string>().empty() || v.get<std::string>() == "0"))) continue;
    if (v.is_number() && v.get<double>() == 0) continue;
    return true;
  }
  return false;
}

Status ParseModel(const json& j, ModelConfig* m) {
  FieldReader r(j, "model");
  r.String("preset", &m->preset);
  r.Integer("n_layer", &m->n_layer, 1);
  r.Integer("n_head", &m->n_head, 1);
  r.Integer("d_model", &m->d_model, 1);
  r.Integer("seq_len", &m->seq_len, 1);
  r.Integer("vocab_size", &m->vocab_size, 1);
  FP8_RETURN_IF_ERROR(r.Finish());
  FP8_RETURN_IF_ERROR(ApplyPreset(m));
  if (m->d_model % m->n_head != 0)
    return InvalidArgumentError("model.n_head: must divide d_model (" + std::to_string(m->d_model) + ")");
  if (m->vocab_size > 65536)
    return InvalidArgumentError("model.vocab_size: must be <= 65536 (llm.c shards hold uint16 tokens)");
  return OkStatus();
}

Status ParsePrecision(const json& j, PrecisionConfig* p) {
  FieldReader r(j, "precision");
  std::string recipe, scale_format = "fp32", algo = "max";
  r.String("recipe", &recipe);
  r.Integer("amax_history_len", &p->amax_history_len, 1);
  double margin = 0;
  if (r.Number("margin", &margin)) {
    if (margin != std::floor(margin) || margin < 0 || margin > 64)
      r.Fail("margin", "must be an integer in [0, 64]");
    p->margin = static_cast<int>(margin);
  }
  r.String("scale_format", &scale_format);
  r.String("amax_compute_algo", &algo);
  r.Bool("bf16_moments", &p->bf16_moments);
  FP8_RETURN_IF_ERROR(r.Finish());
  if (recipe.empty() || recipe == "bf16") p->recipe = Recipe::kBf16;
  else if (recipe == "fp8-tensorwise") p->recipe = Recipe::kFp8Tensorwise;
  else if (recipe == "fp8-blockwise") p->recipe = Recipe::kFp8Blockwise;
  else return InvalidArgumentError("precision.recipe: unknown recipe '" + recipe +
                                   "' (want bf16, fp8-tensorwise or fp8-blockwise)");
  if (scale_format == "fp32") p->ue8m0 = false;
  else if (scale_format == "ue8m0") p->ue8m0 = true;
  else return InvalidArgumentError("precision.scale_format: must be fp32 or ue8m0, got '" + scale_format + "'");
  if (algo == "max") p->amax_most_recent = false;
  else if (algo == "most_recent") p->amax_most_recent = true;
  else return InvalidArgumentError("precision.amax_compute_algo: must be max or most_recent, got '" + algo + "'");
  if (p->amax_history_len > 1024) return InvalidArgumentError("precision.amax_history_len: must be <= 1024");
  return OkStatus();
}

Status ParseTraining(const json& j, TrainingConfig* t) {
  FieldReader r(j, "training");
  r.Integer("max_steps", &t->max_steps, 1);
  r.Integer("per_device_train_batch_size", &t->per_device_train_batch_size, 1);
  r.Integer("gradient_accumulation_steps", &t->gradient_accumulation_steps, 1);
  double d;
  if (r.Number("learning_rate", &d)) {
    if (d <= 0) r.Fail("learning_rate", "must be > 0");
    else if (d > 10) r.Fail("learning_rate", "must be <= 10");
    else t->learning_rate = d;
  }
  std::string sched = "cosine";
  r.String("lr_scheduler_type", &sched);
  r.Integer("warmup_steps", &t->warmup_steps, 0);
  if (r.Number("weight_decay", &d)) {
    if (d < 0) r.Fail("weight_decay", "must be >= 0");
    else t->weight_decay = d;
  }
  if (r.Number("adam_beta1", &d)) {
    if (d < 0 || d >= 1) r.Fail("adam_beta1", "must be in [0, 1)");
    else t->adam_beta1 = d;
  }
  if (r.Number("adam_beta2", &d)) {
    if (d < 0 || d >= 1) r.Fail("adam_beta2", "must be in [0, 1)");
    else t->adam_beta2 = d;
  }
  if (r.Number("adam_epsilon", &d)) {
    if (d <= 0) r.Fail("adam_epsilon", "must be > 0");
    else t->adam_epsilon = d;
  }
  if (r.Number("max_grad_norm", &d)) {
    if (d < 0) r.Fail("max_grad_norm", "must be >= 0");
    else t->max_grad_norm = d;
  }
  r.Integer("seed", &t->seed, 0);
  r.Integer("logging_steps", &t->logging_steps, 1);
  r.Integer("eval_steps", &t->eval_steps, 1);
  r.Integer("save_steps", &t->save_steps, 1);
  r.Integer("save_total_limit", &t->save_total_limit, 1);
  std::string export_format;
  r.String("export", &export_format);
  FP8_RETURN_IF_ERROR(r.Finish());
  if (export_format == "hf") t->export_hf = true;
  else if (!export_format.empty())
    return InvalidArgumentError("training.export: must be \"\" or hf, got '" + export_format + "'");
  if (sched == "cosine") t->lr_scheduler_type = LrSchedule::kCosine;
  else if (sched == "linear") t->lr_scheduler_type = LrSchedule::kLinear;
  else if (sched == "constant") t->lr_scheduler_type = LrSchedule::kConstant;
  else return InvalidArgumentError("training.lr_scheduler_type: must be cosine, linear or constant, got '" + sched + "'");
  return OkStatus();
}

}  // namespace

StatusOr<TrainSpec> ParseTrainSpec(const json& j) {
  TrainSpec s;
  FieldReader r(j, "");
  const json* model = r.Object("model");
  const json* data = r.Object("data");
  const json* precision = r.Object("precision");
  const json* training = r.Object("training");
  r.String("output_dir", &s.output_dir);
  std::string backend = "auto";
  r.String("backend", &backend);
  r.String("init_from", &s.init_from);
  FP8_RETURN_IF_ERROR(r.Finish());
  if (!s.init_from.empty() && model && HasNonDefaultField(*model))
    return InvalidArgumentError("model: must be left out with init_from (the shape comes from " + s.init_from + ")");
  FP8_RETURN_IF_ERROR(ParseModel(model ? *model : json::object(), &s.model));
  {
    FieldReader d(data ? *data : json::object(), "data");
    d.String("train", &s.data.train);
    d.String("val", &s.data.val);
    FP8_RETURN_IF_ERROR(d.Finish());
    if (s.data.train.empty()) return InvalidArgumentError("data.train: required (a glob of llm.c shards)");
  }
  FP8_RETURN_IF_ERROR(ParsePrecision(precision ? *precision : json::object(), &s.precision));
  FP8_RETURN_IF_ERROR(ParseTraining(training ? *training : json::object(), &s.training));
  if (backend == "auto") s.backend = Backend::kAuto;
  else if (backend == "cpu") s.backend = Backend::kCpu;
  else if (backend == "cuda") s.backend = Backend::kCuda;
  else return InvalidArgumentError("backend: must be auto, cpu or cuda, got '" + backend + "'");
  return s;
}

namespace {
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

StatusOr<TrainSpec> LoadTrainSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("spec: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const bool yaml = path.ends_with(".yaml") || path.ends_with(".yml");
  json j;
  if (yaml) {
    FP8_ASSIGN_OR_RETURN(j, YamlToJson(text));
  } else {
    j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return InvalidArgumentError("spec: " + path + " is not valid JSON");
  }
  return ParseTrainSpec(j);
}

const char* RecipeName(Recipe r) {
  switch (r) {
    case Recipe::kFp32: return "fp32";
    case Recipe::kBf16: return "bf16";
    case Recipe::kFp8Tensorwise: return "fp8-tensorwise";
    case Recipe::kFp8Blockwise: return "fp8-blockwise";
  }
  return "?";
}

json SpecToJson(const TrainSpec& s) {
  static const char* kSched[] = {"cosine", "linear", "constant"};
  static const char* kBackend[] = {"auto", "cpu", "cuda"};
  const auto& t = s.training;
  return json{
      {"model", {{"preset", s.model.preset}, {"n_layer", s.model.n_layer}, {"n_head", s.model.n_head},
                 {"d_model", s.model.d_model}, {"seq_len", s.model.seq_len}, {"vocab_size", s.model.vocab_size}}},
      {"data", {{"train", s.data.train}, {"val", s.data.val}}},
      {"precision", {{"recipe", RecipeName(s.precision.recipe)}, {"amax_history_len", s.precision.amax_history_len},
                     {"margin", s.precision.margin}, {"scale_format", s.precision.ue8m0 ? "ue8m0" : "fp32"},
                     {"amax_compute_algo", s.precision.amax_most_recent ? "most_recent" : "max"},
                     {"bf16_moments", s.precision.bf16_moments}}},
      {"training", {{"max_steps", t.max_steps}, {"per_device_train_batch_size", t.per_device_train_batch_size},
                    {"gradient_accumulation_steps", t.gradient_accumulation_steps}, {"learning_rate", t.learning_rate},
                    {"lr_scheduler_type", kSched[static_cast<int>(t.lr_scheduler_type)]},
                    {"warmup_steps", t.warmup_steps}, {"weight_decay", t.weight_decay},
                    {"adam_beta1", t.adam_beta1}, {"adam_beta2", t.adam_beta2}, {"adam_epsilon", t.adam_epsilon},
                    {"max_grad_norm", t.max_grad_norm}, {"seed", t.seed}, {"logging_steps", t.logging_steps},
                    {"eval_steps", t.eval_steps}, {"save_steps", t.save_steps},
                    {"save_total_limit", t.save_total_limit}, {"export", t.export_hf ? "hf" : ""}}},
      {"output_dir", s.output_dir},
      {"init_from", s.init_from},
      {"backend", kBackend[static_cast<int>(s.backend)]},
  };
}

}  // namespace fp8::train
