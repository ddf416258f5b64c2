// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/conversion_plan.h"

#include <algorithm>
#include <set>

#include "kernels/quantize.h"
#include "worker/calibrate/selection.h"
#include "worker/calibrate/tensor_convert.h"

namespace fp8::calibrate {

using json = nlohmann::json;
using safetensors::DType;
using safetensors::TensorInfo;

namespace {

// transformers' FP8Linear requires both dimensions of a block-scaled weight to be multiples of
// the block size; vLLM requires it of every dimension it splits (the q/k/v parts of a fused
// layer, and tensor-parallel shards).
json UnalignedWarning(const TensorInfo& t, bool skipped) {
  std::vector<int> dims;
  for (int d = 0; d < 2; ++d)
    if (t.shape[static_cast<size_t>(d)] % kernels::kTile != 0) dims.push_back(d);
  std::string what;
  for (int d : dims)
    what += (what.empty() ? "" : " and ") + std::string("dimension ") + std::to_string(d) + " (" +
            std::to_string(t.shape[static_cast<size_t>(d)]) + ")";
  const std::string message =
      "tensor \"" + t.name + "\": " + what + (dims.size() > 1 ? " are" : " is") + " not a multiple of the block size " +
      std::to_string(kernels::kTile) + ": transformers' FP8 loader refuses it, and vLLM refuses it where it " +
      "splits that dimension (fused q/k/v parts, tensor parallelism)" +
      (skipped ? "; left unquantized (weights.skip_unaligned)" : "; set weights.skip_unaligned to leave it in BF16");
  return {{"tensor", t.name}, {"shape", t.shape}, {"dims", dims}, {"engines", {"transformers", "vllm"}},
          {"skipped", skipped}, {"message", message}};
}

std::string ModuleOf(const std::string& tensor) {
  return tensor.ends_with(".weight") ? tensor.substr(0, tensor.size() - 7) : tensor;
}

// vLLM's CompressedTensorsW8A8Fp8 asserts dynamic activations for block weights
// (vllm/model_executor/layers/quantization/compressed_tensors/schemes/compressed_tensors_w8a8_fp8.py),
// as its and SGLang's Fp8Config do (quantization/fp8.py); compressed-tensors' own
// QuantizationScheme accepts the pairing, so transformers loads it.
json BlockStaticWarning() {
  return {{"engines", {"vllm", "sglang"}},
          {"message", "block weights with static activation scales: vLLM and SGLang refuse this pairing in any "
                      "layout (their block FP8 kernels quantize activations per token group at run time); "
                      "transformers loads it with the compressed-tensors package. For vLLM, use "
                      "weights.granularity channel or tensor, or leave activations.data out"}};
}

// The scale of FP8 weight `name` in either layout, or "" when it has none.
std::string FindScale(const ModelInput& in, const std::string& name) {
  for (const char* suffix : {kScaleInvSuffix, kCompressedScaleSuffix})
    if (in.tensor_shard.count(name + suffix)) return name + suffix;
  return "";
}

}  // namespace

const char* ScaleSuffix(OutputFormat f) {
  return f == OutputFormat::kDeepSeek ? kScaleInvSuffix : kCompressedScaleSuffix;
}

StatusOr<Plan> PlanQuantize(const ModelInput& in, const CalibrateOptions& opts) {
  Plan plan;
  TensorSelector selector(opts.weights);
  int64_t selected = 0;
  for (size_t s = 0; s < in.readers.size(); ++s) {
    const auto& r = in.readers[s];
    auto& actions = plan.shards.emplace_back();
    for (const auto& t : r.tensors()) {
      Action a;
      a.tensor = &t;
      bool selected_here = selector.Selected(t.name, t.shape.size());
      if (selected_here && opts.weights.granularity == WeightGranularity::kBlock &&
          (t.shape[0] % kernels::kTile != 0 || t.shape[1] % kernels::kTile != 0)) {
        plan.unaligned.push_back(UnalignedWarning(t, opts.weights.skip_unaligned));
        if (opts.weights.skip_unaligned) selected_here = false;
      }
      if (selected_here) {
        if (!IsQuantizableDType(t.dtype))
          return InvalidArgumentError(r.path() + ": tensor \"" + t.name + "\" has unsupported dtype " +
                                      safetensors::DTypeName(t.dtype) + " (quantize reads F32, BF16, F16)");
        a.kind = Action::kQuantize;
        a.scale_name = t.name + ScaleSuffix(opts.output_format);
        if (const std::string existing = FindScale(in, t.name); !existing.empty())
          return InvalidArgumentError(r.path() + ": tensor \"" + existing +
                                      "\" already exists (is the model already quantized?)");
        ++selected;
      } else if (t.shape.size() == 2 && t.name.ends_with(".weight")) {
        plan.not_converted.push_back(ModuleOf(t.name));
      }
      actions.push_back(a);
      ++plan.total_tensors;
    }
  }
  if (Status st = selector.CheckEveryPatternMatched(); !st.ok())
    return InvalidArgumentError(opts.input + ": " + st.message());
  std::sort(plan.not_converted.begin(), plan.not_converted.end());
  if (selected == 0 && !plan.unaligned.empty() && opts.weights.skip_unaligned)
    return InvalidArgumentError(opts.input + ": weights.skip_unaligned leaves nothing to quantize: every selected tensor (" +
                                std::to_string(plan.unaligned.size()) + ") has a dimension that is not a multiple of " +
                                std::to_string(kernels::kTile));
  if (selected == 0)
    return InvalidArgumentError(opts.input + ": no tensor matches the weight patterns (2-D, include, not exclude)");
  if (opts.weights.granularity == WeightGranularity::kBlock && !opts.activations.data.empty())
    plan.layout_warnings.push_back(BlockStaticWarning());
  return plan;
}

StatusOr<Plan> PlanDequantize(const ModelInput& in, const std::string& input) {
  if (in.config && in.config->contains("quantization_config")) {
    const json& qc = (*in.config)["quantization_config"];
    if (qc.is_object() && qc.contains("weight_block_size") && qc["weight_block_size"] != json::array({128, 128}))
      return InvalidArgumentError(in.dir + "/" + kConfigFile + ": weight_block_size " +
                                  qc["weight_block_size"].dump() + " is not supported (only [128, 128])");
    // compressed-tensors keeps its block shape per config group, in the weights' QuantizationArgs.
    if (qc.is_object() && qc.contains("config_groups") && qc["config_groups"].is_object()) {
      for (const auto& [group, scheme] : qc["config_groups"].items()) {
        const json* bs = scheme.is_object() && scheme.contains("weights") && scheme["weights"].is_object() &&
                                 scheme["weights"].contains("block_structure")
                             ? &scheme["weights"]["block_structure"]
                             : nullptr;
        if (bs && !bs->is_null() && *bs != json::array({128, 128}))
          return InvalidArgumentError(in.dir + "/" + kConfigFile + ": config_groups." + group +
                                      ".weights.block_structure " + bs->dump() + " is not supported (only [128, 128])");
      }
    }
  }
  Plan plan;
  std::set<std::string> scales_used;
  for (size_t s = 0; s < in.readers.size(); ++s) {
    for (const auto& t : in.readers[s].tensors()) {
      if (t.dtype != DType::F8_E4M3 && t.dtype != DType::F8_E5M2) continue;
      const std::string scale = FindScale(in, t.name);
      if (scale.empty())
        return InvalidArgumentError(in.readers[s].path() + ": FP8 tensor \"" + t.name + "\" has no \"" + t.name +
                                    kScaleInvSuffix + "\" nor \"" + t.name + kCompressedScaleSuffix + "\"");
      scales_used.insert(scale);
    }
  }
  if (scales_used.empty()) return InvalidArgumentError(input + ": no FP8 tensor to dequantize");
  for (size_t s = 0; s < in.readers.size(); ++s) {
    auto& actions = plan.shards.emplace_back();
    for (const auto& t : in.readers[s].tensors()) {
      Action a;
      a.tensor = &t;
      const std::string layer_weight =
          t.name.ends_with(kInputScaleSuffix)
              ? t.name.substr(0, t.name.size() - std::string(kInputScaleSuffix).size()) + ".weight"
              : std::string();
      const bool static_input_scale =
          !layer_weight.empty() && (scales_used.count(layer_weight + kScaleInvSuffix) ||
                                    scales_used.count(layer_weight + kCompressedScaleSuffix));
      if (scales_used.count(t.name) || static_input_scale) {
        // Scales of FP8 layers mean nothing next to BF16 weights.
        a.kind = Action::kDrop;
      } else if (t.dtype == DType::F8_E4M3 || t.dtype == DType::F8_E5M2) {
        a.kind = Action::kDequantize;
        a.scale_name = FindScale(in, t.name);
        a.scale_shard = in.tensor_shard.at(a.scale_name);
        a.scale = in.readers[a.scale_shard].Find(a.scale_name);
      }
      actions.push_back(a);
      ++plan.total_tensors;
    }
  }
  return plan;
}

Status AddInputScales(const ModelInput& in, const ActivationCalibration& cal, Plan* plan) {
  for (auto& actions : plan->shards) {
    for (auto& a : actions) {
      if (a.kind != Action::kQuantize) continue;
      // fp8d's layer names are GPT2Model's; an export's tensors carry transformers' prefix.
      const std::string module = ModuleOf(a.tensor->name);
      const ActivationLayerStats* l = cal.Find(module.starts_with(kHfPrefix) ? module.substr(kHfPrefix.size()) : module);
      if (!l) continue;
      a.input_scale_name = module + kInputScaleSuffix;
      a.input_scale = l->scale;
      if (in.tensor_shard.count(a.input_scale_name))
        return InvalidArgumentError(in.dir + ": tensor \"" + a.input_scale_name +
                                    "\" already exists (is the model already quantized?)");
    }
  }
  return OkStatus();
}

}  // namespace fp8::calibrate
