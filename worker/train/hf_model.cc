// SPDX-License-Identifier: Apache-2.0
#include "worker/train/hf_model.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "kernels/fp8_format.h"
#include "worker/safetensors/safetensors.h"
#include "worker/train/checkpoint.h"
#include "worker/train/hf_gpt2.h"
#include "worker/train/hf_llama.h"

namespace fp8::train {
namespace fs = std::filesystem;
namespace st = fp8::safetensors;
using json = nlohmann::json;

namespace {

constexpr const char* kTrainerState = "trainer_state.json";

StatusOr<json> ReadJson(const fs::path& p) {
  std::ifstream f(p);
  if (!f) return DataLossError(p.string() + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return DataLossError(p.string() + ": not a JSON object");
  return j;
}

StatusOr<ModelSource> OpenHuggingFace(const fs::path& dir) {
  ModelSource src;
  src.kind = ModelSource::Kind::kHuggingFace;
  src.dir = dir.string();
  src.config_path = (dir / kHfConfigFile).string();
  FP8_ASSIGN_OR_RETURN(json c, ReadJson(src.config_path));
  // The family by name: an architecture that merely has similar fields (GPT-J, Gemma...) is refused.
  if (IsGpt2HfConfig(c)) {
    FP8_ASSIGN_OR_RETURN(src.config, Gpt2ConfigFromHf(c, src.config_path));
  } else if (IsLlamaHfConfig(c)) {
    FP8_ASSIGN_OR_RETURN(src.config, LlamaConfigFromHf(c, src.config_path));
  } else {
    const char* kKnown =
        "; fp8d imports GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM,"
        " Qwen3ForCausalLM and Qwen3MoeForCausalLM";
    if (c.contains("architectures")) return DataLossError(src.config_path + ": field \"architectures\" is " + c["architectures"].dump() + kKnown);
    if (c.contains("model_type")) return DataLossError(src.config_path + ": field \"model_type\" is " + c["model_type"].dump() + kKnown);
    return DataLossError(src.config_path + ": neither \"architectures\" nor \"model_type\" names the model" + kKnown);
  }
  return src;
}

StatusOr<ModelSource> OpenFp8dCheckpoint(const std::string& path) {
  ModelSource src;
  src.kind = ModelSource::Kind::kFp8dCheckpoint;
  FP8_ASSIGN_OR_RETURN(src.dir, FindCheckpoint(path));
  src.config_path = (fs::path(src.dir) / kTrainerState).string();
  FP8_ASSIGN_OR_RETURN(json state, ReadJson(src.config_path));
  const json m = state.value("spec", json::object()).value("model", json());
  if (!m.is_object()) return DataLossError(src.config_path + ": no spec.model object");
  FP8_ASSIGN_OR_RETURN(src.config, ModelConfigFromJson(m, src.config_path + ": spec.model"));
  return src;
}

// Shard file names of a Hugging Face directory, from the index when there is one.
StatusOr<std::vector<std::string>> HfShards(const fs::path& dir, json* weight_map) {
  const fs::path index = dir / kHfIndexFile;
  if (fs::exists(index)) {
    FP8_ASSIGN_OR_RETURN(json j, ReadJson(index));
    if (!j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
      return DataLossError(index.string() + ": no \"weight_map\" object");
    std::set<std::string> shards;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      const std::string f = it->is_string() ? it->get<std::string>() : "";
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        return DataLossError(index.string() + ": weight_map[\"" + it.key() + "\"] is not a file name in the directory");
      shards.insert(f);
    }
    *weight_map = j["weight_map"];
    return std::vector<std::string>(shards.begin(), shards.end());
  }
  if (fs::exists(dir / kHfSingleFile)) return std::vector<std::string>{kHfSingleFile};
  return DataLossError(dir.string() + ": no " + kHfSingleFile + " and no " + kHfIndexFile);
}

Status ReadAsFloat(const st::Reader& r, const st::TensorInfo& t, float* dst) {
  const size_t n = static_cast<size_t>(t.numel());
  switch (t.dtype) {
    case st::DType::F32: return r.ReadInto(t.name, dst, sizeof(float) * n);
    case st::DType::BF16:
    case st::DType::F16: {
      std::vector<uint16_t> raw(n);
      FP8_RETURN_IF_ERROR(r.ReadInto(t.name, raw.data(), raw.size() * sizeof(uint16_t)));
      for (size_t i = 0; i < n; ++i)
        dst[i] = t.dtype == st::DType::BF16 ? kernels::Bf16ToFloat(raw[i]) : kernels::HalfToFloat(raw[i]);
      return OkStatus();
    }
    default:
      return DataLossError(r.path() + ": tensor \"" + t.name + "\" is " + st::DTypeName(t.dtype) +
                           "; fp8d loads F32, BF16 or F16 weights");
  }
}

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void Transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

Status WriteText(const fs::path& p, const std::string& text) { return st::WriteFileAtomically(p.string(), text); }

}  // namespace

StatusOr<json> ReadJsonObject(const std::string& path) { return ReadJson(path); }

StatusOr<int> ConfigPositiveInt(const json& obj, const std::string& key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return DataLossError(where + ": field \"" + key + "\" is missing");
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1 << 24))
    return DataLossError(where + ": field \"" + key + "\" must be a positive integer, got " + it->dump());
  return it->get<int>();
}


HfLayout HfLayoutOf(const ModelConfig& cfg) {
  switch (cfg.architecture) {
    case Architecture::kGpt2: return Gpt2HfLayout(cfg);
    case Architecture::kLlama: return LlamaHfLayout(cfg);
  }
  return {};
}

Status ExportHf(const CausalLm& model, const std::string& out_dir, const HfExportOptions& opts) {
  const HfLayout layout = HfLayoutOf(model.config());
  if (!layout.refusal.empty()) return FailedPreconditionError("cannot export as Hugging Face " + layout.family + ": " + layout.refusal);
  json generation_config = layout.generation_config;
  if (opts.tokenizer) {
    FP8_RETURN_IF_ERROR(data::CheckTokenizerFitsVocab(*opts.tokenizer, model.config().vocab_size));
    // The family's defaults (GPT-2's 50256) belong to its own tokenizer, not to this one.
    generation_config.erase("bos_token_id");
    generation_config.erase("eos_token_id");
    if (opts.tokenizer->bos_id) generation_config["bos_token_id"] = *opts.tokenizer->bos_id;
    if (opts.tokenizer->eos_id) generation_config["eos_token_id"] = *opts.tokenizer->eos_id;
  }
  std::error_code ec;
  fs::path out = fs::absolute(out_dir);
  while (out.has_filename() == false && out.has_parent_path() && out != out.root_path()) out = out.parent_path();
  if (fs::exists(out, ec) && !(fs::is_directory(out) && (fs::is_empty(out) || fs::exists(out / kHfConfigFile))))
    return FailedPreconditionError(out.string() + ": exists and is not an earlier export (no " + kHfConfigFile +
                                   "); refusing to replace it");
  fs::create_directories(out.parent_path(), ec);
  const fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return InternalError("cannot create " + tmp.string() + ": " + ec.message());

  auto write_all = [&]() -> Status {
    const std::vector<float>& params = model.params();
    // Transposed weights (GPT-2's Conv1D) in buffers of their own; the rest point into params.
    std::vector<std::vector<float>> transposed;
    transposed.reserve(model.tensors().size());
    std::vector<st::TensorData> all;
    for (const ParamTensor& t : model.tensors()) {
      st::TensorData d{layout.export_name(t.name), st::DType::F32, t.shape, params.data() + t.offset,
                       sizeof(float) * static_cast<size_t>(t.numel)};
      if (layout.transposed(t.name)) {
        auto& buf = transposed.emplace_back(static_cast<size_t>(t.numel));
        Transpose(params.data() + t.offset, t.shape[0], t.shape[1], buf.data());
        d.shape = {t.shape[1], t.shape[0]};
        d.data = buf.data();
      }
      all.push_back(std::move(d));
    }
    // Greedy shards in the model's order.
    std::vector<std::vector<st::TensorData>> shards(1);
    uint64_t in_shard = 0, total = 0;
    for (auto& d : all) {
      if (!shards.back().empty() && in_shard + d.nbytes > opts.max_shard_bytes) {
        shards.emplace_back();
        in_shard = 0;
      }
      in_shard += d.nbytes;
      total += d.nbytes;
      shards.back().push_back(d);
    }
    const std::map<std::string, std::string> meta = {{"format", "pt"}};
    if (shards.size() == 1) {
      FP8_RETURN_IF_ERROR(st::WriteFile((tmp / kHfSingleFile).string(), shards[0], meta));
    } else {
      json weight_map = json::object();
      char name[64];
      for (size_t i = 0; i < shards.size(); ++i) {
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
        FP8_RETURN_IF_ERROR(st::WriteFile((tmp / name).string(), shards[i], meta));
        for (const auto& d : shards[i]) weight_map[d.name] = name;
      }
      json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      FP8_RETURN_IF_ERROR(WriteText(tmp / kHfIndexFile, index.dump(2) + "\n"));
    }
    FP8_RETURN_IF_ERROR(WriteText(tmp / kHfConfigFile, layout.config.dump(2) + "\n"));
    FP8_RETURN_IF_ERROR(WriteText(tmp / kHfGenerationConfigFile, generation_config.dump(2) + "\n"));
    if (opts.tokenizer) FP8_RETURN_IF_ERROR(data::CopyTokenizerFiles(*opts.tokenizer, tmp.string()));
    FP8_RETURN_IF_ERROR(st::FsyncParentDir((tmp / kHfConfigFile).string()));
    // rename() cannot replace a non-empty directory: move the earlier export aside first.
    if (fs::exists(out)) {
      const fs::path old = out.parent_path() / ("." + out.filename().string() + ".old-" + std::to_string(::getpid()));
      fs::remove_all(old, ec);
      fs::rename(out, old, ec);
      if (ec) return InternalError("cannot move aside " + out.string() + ": " + ec.message());
      fs::remove_all(old, ec);
    }
    fs::rename(tmp, out, ec);
    if (ec) return InternalError("rename " + tmp.string() + " → " + out.string() + ": " + ec.message());
    return st::FsyncParentDir(out.string());
  };
  Status s = write_all();
  if (!s.ok()) fs::remove_all(tmp, ec);
  return s;
}

StatusOr<ModelSource> OpenModelSource(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::is_directory(p, ec)) return NotFoundError(path + ": no such directory");
  // A directory this user may not list or enter is bad input (DATA_ERROR), not a crash of the
  // filesystem calls below.
  if (::access(p.c_str(), R_OK | X_OK) != 0) return DataLossError(path + ": cannot be read (" + std::strerror(errno) + ")");
  if (fs::exists(p / kTrainerState, ec)) return OpenFp8dCheckpoint(path);
  if (fs::exists(p / kHfConfigFile, ec)) return OpenHuggingFace(p);
  if (FindCheckpoint(path).ok()) return OpenFp8dCheckpoint(path);
  return DataLossError(path + ": neither a Hugging Face model (" + kHfConfigFile + ") nor an fp8d checkpoint (" +
                       kTrainerState + ")");
}

Status LoadModelWeights(const ModelSource& source, CausalLm* model) {
  const HfLayout layout = HfLayoutOf(model->config());
  const fs::path dir(source.dir);
  const bool hf = source.kind == ModelSource::Kind::kHuggingFace;
  json weight_map;
  std::vector<std::string> shard_names;
  if (hf) {
    FP8_ASSIGN_OR_RETURN(shard_names, HfShards(dir, &weight_map));
  } else {
    shard_names = {kHfSingleFile};  // an fp8d step-N directory's model.safetensors
  }
  std::map<std::string, const ParamTensor*> wanted;
  for (const ParamTensor& t : model->tensors()) wanted[t.name] = &t;

  // Every tensor of every shard is accounted for before a single parameter changes.
  struct Found {
    size_t shard;
    const st::TensorInfo* info;
    bool transpose;
  };
  std::vector<st::Reader> readers;
  std::map<std::string, Found> found;
  for (size_t s = 0; s < shard_names.size(); ++s) {
    auto r = st::Reader::Open((dir / shard_names[s]).string());
    if (!r.ok()) return DataLossError(r.status().message());
    readers.push_back(std::move(r).value());
  }
  for (size_t s = 0; s < readers.size(); ++s) {
    for (const st::TensorInfo& t : readers[s].tensors()) {
      std::string name = t.name;
      if (hf) {
        name = layout.import_name(t.name);
        if (name.empty()) continue;  // a buffer, or a tied head
        if (!weight_map.is_null() && weight_map.value(t.name, "") != shard_names[s])
          return DataLossError(readers[s].path() + ": tensor \"" + t.name + "\" is not where " + kHfIndexFile +
                               " says it is");
      }
      auto it = wanted.find(name);
      if (it == wanted.end())
        return DataLossError(readers[s].path() + ": unexpected tensor \"" + t.name + "\" (not a parameter of " +
                             layout.family + ")");
      if (found.count(name)) return DataLossError(readers[s].path() + ": tensor \"" + t.name + "\" appears twice");
      const ParamTensor& p = *it->second;
      const bool transpose = hf && layout.transposed(name);
      const std::vector<int64_t> expect = transpose ? std::vector<int64_t>{p.shape[1], p.shape[0]} : p.shape;
      if (t.shape != expect)
        return DataLossError(readers[s].path() + ": tensor \"" + t.name + "\" has shape " + ShapeString(t.shape) +
                             ", the config (" + source.config_path + ") makes it " + ShapeString(expect));
      found[name] = {s, &t, transpose};
    }
  }
  for (const ParamTensor& p : model->tensors())
    if (!found.count(p.name))
      return DataLossError(source.dir + ": missing tensor \"" + (hf ? layout.export_name(p.name) : p.name) + "\"");

  std::vector<float> params(model->params().size());
  std::vector<float> tmp;
  for (const ParamTensor& p : model->tensors()) {
    const Found& f = found.at(p.name);
    float* dst = params.data() + p.offset;
    if (f.transpose) {
      tmp.resize(static_cast<size_t>(p.numel));
      FP8_RETURN_IF_ERROR(ReadAsFloat(readers[f.shard], *f.info, tmp.data()));
      Transpose(tmp.data(), p.shape[1], p.shape[0], dst);
    } else {
      FP8_RETURN_IF_ERROR(ReadAsFloat(readers[f.shard], *f.info, dst));
    }
    for (int64_t i = 0; i < p.numel; ++i)
      if (!std::isfinite(dst[i]))
        return DataLossError(readers[f.shard].path() + ": tensor \"" + f.info->name + "\" holds NaN or Inf");
  }
  model->params() = std::move(params);
  return OkStatus();
}

}  // namespace fp8::train
