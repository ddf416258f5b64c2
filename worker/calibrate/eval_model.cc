// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/eval_model.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "kernels/fp8_format.h"
#include "kernels/quantize.h"
#include "worker/calibrate/conversion_plan.h"
#include "worker/calibrate/tensor_convert.h"
#include "worker/safetensors/safetensors.h"
#include "worker/train/hf_gpt2.h"

namespace fp8::calibrate {

namespace fs = std::filesystem;
using json = nlohmann::json;
using safetensors::DType;

namespace {

StatusOr<int> IntField(const json& obj, const std::string& key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1 << 24))
    return InvalidArgumentError(where + ": \"" + key + "\" must be a positive integer");
  return it->get<int>();
}

// Reads a whole tensor as FP32.
Status ReadAsFloat(const safetensors::Reader& r, const safetensors::TensorInfo& t, float* dst) {
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::F32: return r.ReadInto(t.name, dst, sizeof(float) * static_cast<size_t>(n));
    case DType::BF16:
    case DType::F16: {
      std::vector<uint16_t> raw(static_cast<size_t>(n));
      FP8_RETURN_IF_ERROR(r.ReadInto(t.name, raw.data(), raw.size() * sizeof(uint16_t)));
      for (int64_t i = 0; i < n; ++i)
        dst[i] = t.dtype == DType::BF16 ? kernels::Bf16ToFloat(raw[static_cast<size_t>(i)])
                                        : kernels::HalfToFloat(raw[static_cast<size_t>(i)]);
      return OkStatus();
    }
    default:
      return InvalidArgumentError(r.path() + ": tensor \"" + t.name + "\" is " + safetensors::DTypeName(t.dtype) +
                                  "; a model to calibrate activations on needs F32, BF16 or F16 weights");
  }
}

}  // namespace

StatusOr<train::ModelConfig> GptConfigOf(const ModelInput& in) {
  train::ModelConfig cfg;
  const std::string state_path = (fs::path(in.dir) / kTrainerStateFile).string();
  if (fs::exists(state_path)) {
    FP8_ASSIGN_OR_RETURN(json state, ReadJsonFile(state_path));
    const json m = state.is_object() ? state.value("spec", json::object()).value("model", json::object()) : json();
    if (!m.is_object()) return InvalidArgumentError(state_path + ": no spec.model object");
    const std::string where = state_path + ": spec.model";
    // A Llama checkpoint has GPT-2's shape fields too; its tensors are another model's.
    if (const std::string arch = m.value("architecture", "gpt2"); arch != "gpt2")
      return InvalidArgumentError(where + ".architecture is " + arch + ": activation calibration runs fp8d's GPT-2 "
                                  "model only (weights calibrate without activations.data)");
    FP8_ASSIGN_OR_RETURN(cfg.n_layer, IntField(m, "n_layer", where));
    FP8_ASSIGN_OR_RETURN(cfg.n_head, IntField(m, "n_head", where));
    FP8_ASSIGN_OR_RETURN(cfg.d_model, IntField(m, "d_model", where));
    FP8_ASSIGN_OR_RETURN(cfg.seq_len, IntField(m, "seq_len", where));
    FP8_ASSIGN_OR_RETURN(cfg.vocab_size, IntField(m, "vocab_size", where));
    cfg.preset = m.value("preset", "");
  } else if (in.config && in.config->contains("n_head")) {
    const std::string where = (fs::path(in.dir) / kConfigFile).string();
    const json& c = *in.config;
    FP8_ASSIGN_OR_RETURN(cfg.n_layer, IntField(c, "n_layer", where));
    FP8_ASSIGN_OR_RETURN(cfg.n_head, IntField(c, "n_head", where));
    FP8_ASSIGN_OR_RETURN(cfg.d_model, IntField(c, "n_embd", where));
    FP8_ASSIGN_OR_RETURN(cfg.seq_len, IntField(c, c.contains("n_positions") ? "n_positions" : "n_ctx", where));
    FP8_ASSIGN_OR_RETURN(cfg.vocab_size, IntField(c, "vocab_size", where));
  } else if (in.config && in.config->contains("architectures")) {
    return InvalidArgumentError((fs::path(in.dir) / kConfigFile).string() + ": architectures is " +
                                (*in.config)["architectures"].dump() + ": activation calibration runs fp8d's GPT-2 "
                                "model only (weights calibrate without activations.data)");
  } else {
    return InvalidArgumentError(in.dir + ": activation calibration runs fp8d's GPT model and needs its shape: " +
                                "no trainer_state.json (fp8d checkpoint) and no GPT-2 config.json with n_head");
  }
  if (cfg.d_model % cfg.n_head != 0)
    return InvalidArgumentError(in.dir + ": d_model " + std::to_string(cfg.d_model) + " is not a multiple of n_head " +
                                std::to_string(cfg.n_head));
  return cfg;
}

StatusOr<std::unique_ptr<train::GptModel>> LoadGptModel(const ModelInput& in) {
  FP8_ASSIGN_OR_RETURN(train::ModelConfig cfg, GptConfigOf(in));
  train::PrecisionConfig precision;
  precision.recipe = train::Recipe::kBf16;
  auto model = std::make_unique<train::GptModel>(cfg, precision);
  // A Hugging Face GPT-2 (an fp8d export, say): transformers' names and Conv1D orientation.
  if (!in.single_file && in.tensor_shard.count(train::HfTensorName("wte.weight"))) {
    auto src = train::OpenModelSource(in.dir);
    Status s = src.ok() ? train::LoadModelWeights(*src, model.get()) : src.status();
    if (!s.ok()) return InvalidArgumentError(s.message());
    return model;
  }
  for (const train::ParamTensor& p : model->tensors()) {
    auto it = in.tensor_shard.find(p.name);
    if (it == in.tensor_shard.end())
      return InvalidArgumentError(in.dir + ": activation calibration needs fp8d's GPT tensor \"" + p.name +
                                  "\", which the model does not have");
    const safetensors::Reader& r = in.readers[it->second];
    const safetensors::TensorInfo& t = *r.Find(p.name);
    if (t.shape != p.shape)
      return InvalidArgumentError(r.path() + ": tensor \"" + p.name + "\" has another shape than the model config says");
    FP8_RETURN_IF_ERROR(ReadAsFloat(r, t, model->params().data() + p.offset));
  }
  return model;
}

double MeanLoss(train::GptModel& model, const data::TokenDataset& data, uint64_t seed, int num_samples) {
  const int t = model.config().seq_len;
  std::vector<int32_t> inputs(static_cast<size_t>(kCalibrationBatch) * t), targets(inputs.size());
  double sum = 0;
  for (int first = 0; first < num_samples; first += kCalibrationBatch) {
    const int n = std::min(kCalibrationBatch, num_samples - first);
    for (int j = 0; j < n; ++j)
      data.Sample(seed, static_cast<uint64_t>(first + j), inputs.data() + j * t, targets.data() + j * t);
    sum += model.Forward(inputs.data(), targets.data(), n, /*training=*/false) * n;
  }
  return num_samples > 0 ? sum / num_samples : 0.0;
}

StatusOr<int> LoadDequantizedWeights(const std::string& dir, const json& weight_map, train::GptModel* model) {
  int replaced = 0;
  for (const train::ParamTensor& p : model->tensors()) {
    // fp8d's names and [out, in], or (an export) transformers' names and Conv1D's [in, out].
    const bool hf = !weight_map.contains(p.name) && weight_map.contains(train::HfTensorName(p.name));
    const std::string name = hf ? train::HfTensorName(p.name) : p.name;
    const bool transposed = hf && train::IsConv1DWeight(p.name);
    const std::vector<int64_t> shape = transposed ? std::vector<int64_t>{p.shape[1], p.shape[0]} : p.shape;
    if (p.shape.size() != 2 || !weight_map.contains(name)) continue;
    // DeepSeek's layout or compressed-tensors' (conversion_plan.h ScaleSuffix).
    std::string scale_name = name + kScaleInvSuffix;
    if (!weight_map.contains(scale_name)) scale_name = name + kCompressedScaleSuffix;
    if (!weight_map.contains(scale_name)) continue;  // left in high precision
    FP8_ASSIGN_OR_RETURN(safetensors::Reader r, safetensors::Reader::Open((fs::path(dir) / weight_map[name].get<std::string>()).string()));
    FP8_ASSIGN_OR_RETURN(safetensors::Reader rs, safetensors::Reader::Open((fs::path(dir) / weight_map[scale_name].get<std::string>()).string()));
    const safetensors::TensorInfo* w = r.Find(name);
    const safetensors::TensorInfo* s = rs.Find(scale_name);
    if (!w || !s || w->dtype != DType::F8_E4M3 || s->dtype != DType::F32 || w->shape != shape)
      return InternalError(r.path() + ": output tensor \"" + name + "\" is not the F8_E4M3 weight just written");
    // A Conv1D weight's scales are written [out, in]-oriented (IsConv1DInOut), the weight [in, out].
    FP8_ASSIGN_OR_RETURN(WeightGranularity g, GranularityFromScaleShape(w->shape, s->shape, transposed));
    FP8_ASSIGN_OR_RETURN(std::vector<uint8_t> q, r.Read(name));
    std::vector<float> scales(static_cast<size_t>(s->numel()));
    FP8_RETURN_IF_ERROR(rs.ReadInto(scale_name, scales.data(), scales.size() * sizeof(float)));
    const int64_t rows = shape[0], cols = shape[1];
    if (transposed) scales = StoredLayoutScales(g, scales, rows, cols);
    std::vector<float> stored(transposed ? static_cast<size_t>(p.numel) : 0);
    float* dst = transposed ? stored.data() : model->params().data() + p.offset;
    FP8_RETURN_IF_ERROR(DequantizeStored(q.data(), scales, g, transposed, rows, cols, kernels::Fp8Format::kE4M3, dst));
    if (transposed) {  // [in, out] as stored → the model's [out, in]
      float* out = model->params().data() + p.offset;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = stored[static_cast<size_t>(i * cols + j)];
    }
    ++replaced;
  }
  return replaced;
}

}  // namespace fp8::calibrate
