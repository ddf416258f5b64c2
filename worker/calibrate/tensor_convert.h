// SPDX-License-Identifier: Apache-2.0
// One weight at a time, streamed in bands of 128 rows so memory follows the band, not the
// tensor: FP32/BF16/FP16 → FP8 E4M3 + FP32 scale_inv (with round-trip statistics), and back
// from FP8 + scale_inv to BF16.
#pragma once

#include <cstdint>
#include <memory>
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

// transformers' GPT-2 (`transformer.h.N.attn.c_attn.weight`, ...): a Conv1D weight stored
// [in, out]. vLLM's GPT-2 loader transposes such a `.weight` to nn.Linear's [out, in] but reads
// its `.weight_scale_inv` as is, so the scales of these tensors are written in the [out, in]
// orientation: the 128x128 grid as [ceil(out/128), ceil(in/128)], per channel one scale per
// output feature [out, 1]. The FP8 weight itself stays [in, out].
bool IsConv1DInOut(const std::string& weight_name);

// Shape of `<name>.weight_scale_inv` for a [rows, cols] weight as stored; `in_out`: a Conv1D
// weight (IsConv1DInOut), whose scale is in the [cols, rows] orientation.
std::vector<int64_t> ScaleShape(WeightGranularity g, int64_t rows, int64_t cols, bool in_out = false);
// Inverse of ScaleShape: which granularity a stored scale tensor encodes (for dequantize).
StatusOr<WeightGranularity> GranularityFromScaleShape(const std::vector<int64_t>& weight_shape,
                                                      const std::vector<int64_t>& scale_shape, bool in_out = false);

// A Conv1D weight's written scales → the scales of its stored [rows, cols] = [in, out] layout
// that Dequantize128x128 and the per-row loops take: the block grid transposed to
// [ceil(rows/128), ceil(cols/128)]; per channel and per tensor unchanged (per channel then
// holds one scale per column).
std::vector<float> StoredLayoutScales(WeightGranularity g, const std::vector<float>& written, int64_t rows,
                                      int64_t cols);
// Dequantizes a whole [rows, cols] FP8 weight with scales in its stored layout (as
// StoredLayoutScales gives); `per_column` for a Conv1D weight's per-channel scales.
Status DequantizeStored(const uint8_t* q, const std::vector<float>& scales, WeightGranularity g, bool per_column,
                        int64_t rows, int64_t cols, kernels::Fp8Format fmt, float* x);

bool IsQuantizableDType(safetensors::DType d);  // F32, BF16, F16

// Sums over a round trip x → q = fp8(x / s) → x̂ = decode(q)·s, from which a TensorReport's
// statistics come (CPU: tensor_convert.cc; GPU: cuda_round_trip_stats.cu).
struct RoundTripSums {
  double sum_x2 = 0, sum_e2 = 0;  // Σx², Σ(x − x̂)²
  int64_t saturated = 0;          // |x| ≥ ClipThreshold·s: the cast clipped
  int64_t flushed = 0;            // x ≠ 0, x̂ = 0
  int64_t nonzero = 0;
  float amax = 0;
  void Add(const RoundTripSums& o);
};

// max + half an ulp at max (E4M3: 464): |x / s| at or above it was clipped by the cast.
float ClipThreshold(kernels::Fp8Format fmt);

// The report of a quantized weight from its scales and round-trip sums (CPU and CUDA paths).
TensorReport MakeQuantizeReport(const safetensors::TensorInfo& w, WeightGranularity g, const std::vector<float>& scales,
                                const RoundTripSums& sums);

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

// Converts weights on one backend: the two functions above on the CPU, or kernels/cuda on a GPU
// (worker/calibrate/cuda_weight_converter.h). Both write the same bytes and scales.
class WeightConverter {
 public:
  virtual ~WeightConverter() = default;
  virtual const char* backend() const = 0;  // "cpu" | "cuda": the report's summary.backend
  virtual StatusOr<TensorReport> Quantize(const safetensors::Reader& reader, const safetensors::TensorInfo& weight,
                                          const WeightOptions& opts, const std::string& scale_name,
                                          safetensors::Writer& writer) = 0;
  virtual Status Dequantize(const safetensors::Reader& reader, const safetensors::TensorInfo& weight,
                            const safetensors::TensorInfo& scale, const safetensors::Reader& scale_reader,
                            safetensors::Writer& writer) = 0;
};

std::unique_ptr<WeightConverter> MakeCpuWeightConverter();

// The spec's `backend`: auto = CUDA when this build has it (FP8D_CUDA) and a device is
// visible, the CPU otherwise; cpu = CPU; cuda = CUDA, or FailedPrecondition naming the field
// when this build or this machine has none.
StatusOr<std::unique_ptr<WeightConverter>> MakeWeightConverter(Backend backend);

}  // namespace fp8::calibrate
