// SPDX-License-Identifier: Apache-2.0
// The calibration job's spec as the worker runs it: spec.json / spec.yaml read into the proto
// fp8d::v1::CalibrateSpec (worker/common/spec_file.h), filled and checked by fp8_jobspec (the
// same defaults and checks as the daemon's at create), then mapped onto the options below,
// which hold no defaults of their own. Bad values are InvalidArgument naming the field (exit 64).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"
#include "kernels/quantize.h"

namespace fp8::calibrate {

enum class WeightGranularity { kBlock, kChannel, kTensor };
enum class Direction { kQuantize, kDequantize };
enum class Backend { kAuto, kCpu, kCuda };
// The FP8 checkpoint's layout (CalibrateSpec.output_format, `auto` resolved): llm-compressor's
// compressed-tensors (`weight_scale`, `input_scale`) or DeepSeek-V3's (`weight_scale_inv`).
enum class OutputFormat { kCompressedTensors, kDeepSeek };

struct WeightOptions {
  WeightGranularity granularity{};
  kernels::Fp8Format fmt{};
  kernels::ScaleFormat scale_format{};
  std::vector<std::string> include;  // empty: the defaults (see selection.h)
  std::vector<std::string> exclude;
  // Block granularity: selected tensors with a dimension not a multiple of the block size stay
  // in BF16 (transformers' and vLLM's FP8 loaders refuse them).
  bool skip_unaligned = false;
};

// Static activation calibration and the eval loss before/after (fp8d's GPT models only; see
// activation_calib.h and eval_loss.h).
struct ActivationOptions {
  std::string data;  // glob of token shards; empty: activation_scheme dynamic, no eval loss
  int num_samples = 0;  // sequences
  std::string method;
  double percentile = 0;
};

struct CalibrateOptions {
  std::string input;
  std::string output_dir;
  WeightOptions weights;
  ActivationOptions activations;
  Direction direction{};
  Backend backend{};
  OutputFormat output_format{};
  // The validated spec, defaults filled in: what a restart compares against its staging dir.
  nlohmann::json canonical;
};

const char* GranularityName(WeightGranularity g);
const char* OutputFormatName(OutputFormat f);  // "compressed-tensors" | "deepseek"
// `auto`: deepseek for block weights with dynamic activations, compressed-tensors otherwise.
OutputFormat ResolveOutputFormat(const std::string& name, WeightGranularity g, bool static_activations);

StatusOr<CalibrateOptions> ParseCalibrateSpec(fp8d::v1::CalibrateSpec spec);
StatusOr<CalibrateOptions> ParseCalibrateSpec(const nlohmann::json& spec);
// Reads a spec file: JSON, or YAML when the name ends in .yaml / .yml.
StatusOr<CalibrateOptions> LoadCalibrateSpec(const std::string& path);

}  // namespace fp8::calibrate
