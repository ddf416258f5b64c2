// One weight at a time, streamed in bands of 128 rows so memory follows the band, not the
// tensor: FP32/BF16/FP16 → FP8 E4M3 + FP32 scale_inv (with round-trip statistics), and back
// from FP8 + scale_inv to BF16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/calibrate/spec.h"
#include "worker/safetensors/safetensors.h"

namespace fp8::calibrate {

// What one tensor lost in the round trip x → fp8 → x̂.
struct TensorReport {
  std::string name;
  std::string shard;
  std::string dtype;  // input dtype
  std::vector<int64_t> shape;
  bool quantized = false;
  std::string granularity;  // "block" | "channel" | "tensor" when quantized
  double amax = 0;
  double scale_inv_min = 0, scale_inv_max = 0;
  double frac_saturated = 0;  // elements the cast clipped to ±fp8 max
  double frac_flushed = 0;    // non-zero elements that became 0
  double rel_error = 0;       // ||x − x̂|| / ||x||
  double snr_db = 0;          // 10·log10(Σx² / Σ(x−x̂)²); +inf (JSON null) when exact
  uint64_t bytes_in = 0, bytes_out = 0;

  nlohmann::json ToJson() const;
  static TensorReport FromJson(const nlohmann::json& j);
};

// Shape of `<name>.weight_scale_inv` for a [rows, cols] weight.
std::vector<int64_t> ScaleShape(WeightGranularity g, int64_t rows, int64_t cols);
// Inverse of ScaleShape: which granularity a stored scale tensor encodes (for dequantize).
StatusOr<WeightGranularity> GranularityFromScaleShape(const std::vector<int64_t>& weight_shape,
                                                      const std::vector<int64_t>& scale_shape);

bool IsQuantizableDType(safetensors::DType d);  // F32, BF16, F16

// Reads `weight` (2-D, F32/BF16/F16) from `reader`; writes `weight.name` as F8_E4M3 and
// `scale_name` as F32 into `writer` (both declared there already).
StatusOr<TensorReport> QuantizeWeight(const safetensors::Reader& reader,
                                      const safetensors::TensorInfo& weight,
                                      const WeightOptions& opts, const std::string& scale_name,
                                      safetensors::Writer& writer);

// Reads FP8 `weight` from `reader` and its `scale` from `scale_reader` (DeepSeek's index may put
// them in different shards); writes `weight.name` as BF16 into
// `writer`. The values are float(q)·scale_inv rounded to BF16, as kernels::Dequantize* give.
Status DequantizeWeight(const safetensors::Reader& reader, const safetensors::TensorInfo& weight,
                        const safetensors::TensorInfo& scale, const safetensors::Reader& scale_reader,
                        safetensors::Writer& writer);

}  // namespace fp8::calibrate
