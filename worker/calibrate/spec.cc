// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/spec.h"

#include "jobspec/defaults.h"
#include "jobspec/paths.h"
#include "jobspec/validate.h"
#include "worker/common/spec_file.h"

namespace fp8::calibrate {
namespace {

using json = nlohmann::json;

WeightGranularity GranularityOf(const std::string& name) {
  if (name == "channel") return WeightGranularity::kChannel;
  if (name == "tensor") return WeightGranularity::kTensor;
  return WeightGranularity::kBlock;
}

Backend BackendOf(const std::string& name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  return Backend::kAuto;
}

// The fingerprint a restart compares against its staging dir. Optional parts appear only when
// set, so the fingerprint of an earlier job's spec stays what it was.
json Canonical(const CalibrateOptions& o) {
  json c = {
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
  if (o.weights.skip_unaligned) c["weights"]["skip_unaligned"] = true;
  // Only when not DeepSeek's, the one layout that existed before the option: a staging dir of
  // another layout is never resumed into this one.
  if (o.direction == Direction::kQuantize && o.output_format != OutputFormat::kDeepSeek)
    c["output_format"] = OutputFormatName(o.output_format);
  if (!o.activations.data.empty()) {
    c["activations"] = {{"data", o.activations.data},
                        {"num_samples", o.activations.num_samples},
                        {"method", o.activations.method},
                        {"percentile", o.activations.percentile}};
  }
  return c;
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

const char* OutputFormatName(OutputFormat f) {
  switch (f) {
    case OutputFormat::kCompressedTensors: return "compressed-tensors";
    case OutputFormat::kDeepSeek: return "deepseek";
  }
  return "?";
}

OutputFormat ResolveOutputFormat(const std::string& name, WeightGranularity g, bool static_activations) {
  if (name == "compressed-tensors") return OutputFormat::kCompressedTensors;
  if (name == "deepseek") return OutputFormat::kDeepSeek;
  return g == WeightGranularity::kBlock && !static_activations ? OutputFormat::kDeepSeek
                                                               : OutputFormat::kCompressedTensors;
}

StatusOr<CalibrateOptions> ParseCalibrateSpec(fp8d::v1::CalibrateSpec spec) {
  jobspec::ApplyCalibrateDefaults(&spec);
  FP8_RETURN_IF_ERROR(jobspec::ValidateCalibrateSpec(spec, ""));
  FP8_RETURN_IF_ERROR(jobspec::CheckPathsBeforeOpen(spec, spec.allowed_roots()));
  CalibrateOptions o;
  o.input = spec.input();
  o.output_dir = spec.output_dir();
  while (o.output_dir.size() > 1 && o.output_dir.back() == '/') o.output_dir.pop_back();
  const auto& w = spec.weights();
  o.weights.granularity = GranularityOf(w.granularity());
  o.weights.fmt = kernels::Fp8Format::kE4M3;  // the only format the validator lets through
  o.weights.scale_format = w.scale_format() == "ue8m0" ? kernels::ScaleFormat::kUe8m0 : kernels::ScaleFormat::kFp32;
  o.weights.include.assign(w.include().begin(), w.include().end());
  o.weights.exclude.assign(w.exclude().begin(), w.exclude().end());
  o.weights.skip_unaligned = w.skip_unaligned();
  const auto& a = spec.activations();
  o.activations = {a.data(), a.num_samples(), a.method(), a.percentile()};
  o.direction = spec.direction() == "dequantize" ? Direction::kDequantize : Direction::kQuantize;
  o.backend = BackendOf(spec.backend());
  o.output_format = ResolveOutputFormat(spec.output_format(), o.weights.granularity, !o.activations.data.empty());
  o.canonical = Canonical(o);
  return o;
}

StatusOr<CalibrateOptions> ParseCalibrateSpec(const json& spec) {
  fp8d::v1::CalibrateSpec proto;
  FP8_RETURN_IF_ERROR(worker::ParseSpecJson(spec, &proto));
  return ParseCalibrateSpec(std::move(proto));
}

StatusOr<CalibrateOptions> LoadCalibrateSpec(const std::string& path) {
  fp8d::v1::CalibrateSpec proto;
  FP8_RETURN_IF_ERROR(worker::ReadSpecFile(path, &proto));
  return ParseCalibrateSpec(std::move(proto));
}

}  // namespace fp8::calibrate
