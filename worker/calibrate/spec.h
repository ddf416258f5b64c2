// The calibration job's spec: proto/fp8d/v1/job.proto's CalibrateSpec in its JSON (or YAML)
// form with snake_case field names, validated into plain options. Zero / empty means the
// default. Unknown fields and bad values are InvalidArgument naming the field (exit 64).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kernels/quantize.h"

namespace fp8::calibrate {

enum class WeightGranularity { kBlock, kChannel, kTensor };
enum class Direction { kQuantize, kDequantize };
enum class Backend { kAuto, kCpu, kCuda };

struct WeightOptions {
  WeightGranularity granularity = WeightGranularity::kBlock;
  kernels::Fp8Format fmt = kernels::Fp8Format::kE4M3;
  kernels::ScaleFormat scale_format = kernels::ScaleFormat::kFp32;
  std::vector<std::string> include;  // empty: the defaults (see selection.h)
  std::vector<std::string> exclude;
  // Block granularity: selected tensors with a dimension not a multiple of the block size stay
  // in BF16 (transformers' and vLLM's FP8 loaders refuse them).
  bool skip_unaligned = false;
};

// Static activation calibration and the eval loss before/after (fp8d's GPT models only; see
// activation_calib.h and eval_loss.h).
struct ActivationOptions {
  std::string data;     // glob of token shards; empty: activation_scheme dynamic, no eval loss
  int num_samples = 0;  // sequences; 0: kDefaultCalibrationSamples
  std::string method = "max";
  double percentile = 99.9;
};

struct CalibrateOptions {
  std::string input;
  std::string output_dir;
  WeightOptions weights;
  ActivationOptions activations;
  Direction direction = Direction::kQuantize;
  Backend backend = Backend::kAuto;
  // The validated spec, defaults filled in: what a restart compares against its staging dir.
  nlohmann::json canonical;
};

const char* GranularityName(WeightGranularity g);

StatusOr<CalibrateOptions> ParseCalibrateSpec(const nlohmann::json& spec);
// Reads a spec file: JSON, or YAML when the name ends in .yaml / .yml.
StatusOr<CalibrateOptions> LoadCalibrateSpec(const std::string& path);

}  // namespace fp8::calibrate
