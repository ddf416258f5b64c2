// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/tensor_convert.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/fp8_format.h"
#include "kernels/parallel.h"
#include "kernels/quantize.h"
#include "kernels/scaling.h"
#include "worker/train/hf_gpt2.h"

#if FP8_CALIBRATE_CUDA
#include "worker/calibrate/cuda_weight_converter.h"
#endif

namespace fp8::calibrate {

using safetensors::DType;
using safetensors::Reader;
using safetensors::TensorInfo;
using safetensors::Writer;

namespace {

// Rows are processed in bands of 128 (one row of 128x128 blocks); the bands of a group are
// read, converted and written in parallel (each band pwrites its own slice). Buffers hold
// raw input + FP32 + FP8 ≈ 7 bytes/element: a group is ~4M elements (~28 MB), more only to
// give every thread a band, and never more than 16M elements (~112 MB) however many threads.
constexpr int64_t kBandRows = kernels::kTile;
constexpr int64_t kGroupElements = int64_t{4} << 20;
constexpr int64_t kMaxGroupElements = int64_t{16} << 20;

int64_t BandsPerGroup(int64_t rows, int64_t cols) {
  const int64_t band = kBandRows * std::max<int64_t>(1, cols);
  const int64_t by_size = std::max<int64_t>(1, kGroupElements / band);
  const int64_t cap = std::max<int64_t>(1, kMaxGroupElements / band);
  const int64_t want = std::max<int64_t>(by_size, std::min<int64_t>(kernels::NumThreads(), cap));
  return std::min(want, kernels::CeilDiv(rows, kBandRows));
}

const float* HalfTable() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = kernels::HalfToFloat(static_cast<uint16_t>(i));
    return t;
  }();
  return table.data();
}

// Source elements → FP32. BF16 is the top half of an FP32, so the widening is exact (in either
// build of the function: AVX2 or baseline, picked at load time).
[[gnu::target_clones("avx2", "default")]]
void ToFloat(DType dtype, const void* src, int64_t n, float* dst) {
  if (dtype == DType::BF16) {
    const auto* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<uint32_t>(s[i]) << 16);
  } else if (dtype == DType::F16) {
    const auto* s = static_cast<const uint16_t*>(src);
    const float* table = HalfTable();
    for (int64_t i = 0; i < n; ++i) dst[i] = table[s[i]];
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
}

// kernels::FloatToBf16 (round to nearest even, any NaN → 0x7FFF), inlined and branch-free so
// the conversion loop vectorizes; the dequantize test checks it bit for bit against the kernel.
inline uint16_t ToBf16(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
  return (b & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t{0x7FFF} : static_cast<uint16_t>(rounded);
}

// ToBf16 over a span, for AVX2 or the baseline (picked at load time; integer ops only).
[[gnu::target_clones("avx2", "default")]]
void FloatsToBf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ToBf16(x[i]);
}

// One run of elements sharing scale_inv `s`; x̂ = decode[q]·s exactly as Dequantize* do.
// Two loops: the table lookups (a gather), then a branch-free loop the compiler vectorizes
// (this file is built with -fassociative-math for the float sums; amax is reduced on the bit
// patterns, which order like the values for |x|). Compiled for AVX2 and the baseline, picked
// at load time: only the order of the float sums differs between the two.
[[gnu::target_clones("avx2", "default")]]
void AddRoundTripSpan(RoundTripSums& sums, const float* x, const uint8_t* q, int64_t n, float s, const float* decode,
                      float clip) {
  const float limit = clip * s;
  for (int64_t i0 = 0; i0 < n; i0 += kernels::kTile) {
    const int len = static_cast<int>(std::min<int64_t>(kernels::kTile, n - i0));
    float h[kernels::kTile];
    for (int i = 0; i < len; ++i) h[i] = decode[q[i0 + i]];
    float x2 = 0, e2 = 0;
    uint32_t m = 0;
    int sat = 0, fl = 0, nz = 0;
    const float* xs = x + i0;
    for (int i = 0; i < len; ++i) {
      const float v = xs[i], hv = h[i] * s, e = v - hv;
      const uint32_t abits = std::bit_cast<uint32_t>(v) & 0x7FFFFFFFu;
      x2 += v * v;
      e2 += e * e;
      m = std::max(m, abits);
      sat += std::fabs(v) >= limit;
      fl += (v != 0.0f) & (hv == 0.0f);
      nz += v != 0.0f;
    }
    sums.sum_x2 += x2;
    sums.sum_e2 += e2;
    sums.saturated += sat;
    sums.flushed += fl;
    sums.nonzero += nz;
    sums.amax = std::max(sums.amax, std::bit_cast<float>(m));
  }
}

Status NonFinite(const Reader& reader, const TensorInfo& w) {
  return DataLossError(reader.path() + ": tensor \"" + w.name + "\" contains NaN or Inf");
}

}  // namespace

bool IsConv1DInOut(const std::string& name) {
  return name.starts_with("transformer.") && train::IsConv1DWeight(name);
}

std::vector<int64_t> ScaleShape(WeightGranularity g, int64_t rows, int64_t cols, bool in_out) {
  if (in_out) std::swap(rows, cols);  // the [out, in] orientation vLLM reads (IsConv1DInOut)
  switch (g) {
    case WeightGranularity::kBlock: return {kernels::CeilDiv(rows, kernels::kTile), kernels::CeilDiv(cols, kernels::kTile)};
    case WeightGranularity::kChannel: return {rows, 1};
    case WeightGranularity::kTensor: return {1};
  }
  return {};
}

StatusOr<WeightGranularity> GranularityFromScaleShape(const std::vector<int64_t>& ws,
                                                      const std::vector<int64_t>& ss, bool in_out) {
  if (ws.size() != 2) return InvalidArgumentError("FP8 weight is not 2-D");
  for (auto g : {WeightGranularity::kBlock, WeightGranularity::kChannel}) {
    if (ss == ScaleShape(g, ws[0], ws[1], in_out)) return g;
  }
  int64_t n = 1;
  for (int64_t d : ss) n *= d;
  if (n == 1 && ss.size() <= 2) return WeightGranularity::kTensor;
  std::string s;
  for (int64_t d : ss) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return InvalidArgumentError("scale_inv shape [" + s + "] is neither 128x128 blocks, per channel nor per tensor for weight [" +
                              std::to_string(ws[0]) + ", " + std::to_string(ws[1]) + "]" +
                              (in_out ? " (a Conv1D [in, out] weight: scales are [out, in]-oriented)" : ""));
}

namespace {
// [r, c] row-major → [c, r].
std::vector<float> TransposeGrid(const std::vector<float>& a, int64_t r, int64_t c) {
  std::vector<float> t(a.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[static_cast<size_t>(j * r + i)] = a[static_cast<size_t>(i * c + j)];
  return t;
}
}  // namespace

std::vector<float> StoredLayoutScales(WeightGranularity g, const std::vector<float>& written, int64_t rows,
                                      int64_t cols) {
  if (g != WeightGranularity::kBlock) return written;
  return TransposeGrid(written, kernels::CeilDiv(cols, kernels::kTile), kernels::CeilDiv(rows, kernels::kTile));
}

Status DequantizeStored(const uint8_t* q, const std::vector<float>& scales, WeightGranularity g, bool per_column,
                        int64_t rows, int64_t cols, kernels::Fp8Format fmt, float* x) {
  switch (g) {
    case WeightGranularity::kBlock: return kernels::Dequantize128x128(q, scales.data(), rows, cols, fmt, x);
    case WeightGranularity::kChannel:
      for (int64_t i = 0; i < rows; ++i) {
        if (per_column) {
          for (int64_t j = 0; j < cols; ++j)
            kernels::DequantizeTensor(q + i * cols + j, 1, scales[static_cast<size_t>(j)], fmt, x + i * cols + j);
        } else {
          kernels::DequantizeTensor(q + i * cols, cols, scales[static_cast<size_t>(i)], fmt, x + i * cols);
        }
      }
      return OkStatus();
    case WeightGranularity::kTensor: kernels::DequantizeTensor(q, rows * cols, scales[0], fmt, x); return OkStatus();
  }
  return OkStatus();
}

// The cast clipped a value when, without saturation, it would have rounded past the largest
// finite value: |x/s| ≥ max + half an ulp at max (E4M3: 448 + 16; E5M2: 57344 + 4096).
float ClipThreshold(kernels::Fp8Format fmt) { return fmt == kernels::Fp8Format::kE4M3 ? 464.0f : 61440.0f; }

void RoundTripSums::Add(const RoundTripSums& o) {
  sum_x2 += o.sum_x2;
  sum_e2 += o.sum_e2;
  saturated += o.saturated;
  flushed += o.flushed;
  nonzero += o.nonzero;
  amax = std::max(amax, o.amax);
}

TensorReport MakeQuantizeReport(const TensorInfo& w, WeightGranularity g, const std::vector<float>& scales,
                                const RoundTripSums& sums) {
  TensorReport rep;
  rep.name = w.name;
  rep.dtype = safetensors::DTypeName(w.dtype);
  rep.shape = w.shape;
  rep.quantized = true;
  rep.granularity = GranularityName(g);
  rep.amax = sums.amax;
  if (!scales.empty()) {
    auto [lo, hi] = std::minmax_element(scales.begin(), scales.end());
    rep.scale_inv_min = *lo;
    rep.scale_inv_max = *hi;
  }
  const double n = static_cast<double>(std::max<int64_t>(1, w.numel()));
  rep.frac_saturated = sums.saturated / n;
  rep.frac_flushed = sums.nonzero > 0 ? static_cast<double>(sums.flushed) / sums.nonzero : 0.0;
  rep.rel_error = sums.sum_x2 > 0 ? std::sqrt(sums.sum_e2 / sums.sum_x2) : 0.0;
  rep.snr_db = sums.sum_e2 > 0 ? 10.0 * std::log10(sums.sum_x2 / sums.sum_e2) : std::numeric_limits<double>::infinity();
  rep.bytes_in = w.nbytes();
  rep.bytes_out = static_cast<uint64_t>(w.numel()) + scales.size() * sizeof(float);
  return rep;
}

bool IsQuantizableDType(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

StatusOr<TensorReport> QuantizeWeight(const Reader& reader, const TensorInfo& w,
                                      const WeightOptions& opts, const std::string& scale_name,
                                      Writer& writer) {
  if (w.shape.size() != 2 || !IsQuantizableDType(w.dtype))
    return InvalidArgumentError(reader.path() + ": tensor \"" + w.name + "\" (" + safetensors::DTypeName(w.dtype) +
                                ") is not a 2-D F32/BF16/F16 tensor");
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const size_t esize = safetensors::DTypeSize(w.dtype);
  const kernels::Fp8Format fmt = opts.fmt;
  // Conv1D [in, out]: quantized as stored; per channel means per output feature = per column.
  const bool in_out = IsConv1DInOut(w.name);
  const bool per_column = in_out && opts.granularity == WeightGranularity::kChannel;
  const float clip = ClipThreshold(fmt);
  float decode[256];
  for (int i = 0; i < 256; ++i) decode[i] = kernels::Fp8ToFloat(static_cast<uint8_t>(i), fmt);

  const int64_t bands = kernels::CeilDiv(rows, kBandRows);
  const int64_t group_bands = BandsPerGroup(rows, cols);
  const int64_t group_elems = group_bands * kBandRows * cols;
  std::vector<uint8_t> raw(w.dtype == DType::F32 ? 0 : static_cast<size_t>(group_elems) * esize);
  std::vector<float> x(static_cast<size_t>(group_elems));
  std::vector<uint8_t> q(static_cast<size_t>(group_elems));
  const std::vector<int64_t> scale_shape = ScaleShape(opts.granularity, rows, cols, in_out);
  std::vector<float> scales(static_cast<size_t>(scale_shape[0] * (scale_shape.size() > 1 ? scale_shape[1] : 1)));
  const int64_t tiles = kernels::CeilDiv(cols, kernels::kTile);

  // Reads band b of the current group (rows [r0, r1)) into x.
  auto read_band = [&](int64_t first_band, int64_t b, int64_t r0, int64_t r1) -> Status {
    const int64_t n = (r1 - r0) * cols;
    const size_t at = static_cast<size_t>((b - first_band) * kBandRows * cols);
    const uint64_t offset = static_cast<uint64_t>(r0 * cols) * esize;
    if (w.dtype == DType::F32) return reader.ReadRange(w.name, offset, x.data() + at, static_cast<size_t>(n) * 4);
    FP8_RETURN_IF_ERROR(reader.ReadRange(w.name, offset, raw.data() + at * esize, static_cast<size_t>(n) * esize));
    ToFloat(w.dtype, raw.data() + at * esize, n, x.data() + at);
    return OkStatus();
  };

  // Per-tensor scaling needs the amax of the whole tensor first, per-column scaling that of
  // every column: one extra read pass.
  float tensor_scale = 0;
  if (opts.granularity == WeightGranularity::kTensor || per_column) {
    float amax = 0;
    std::vector<float> col_amax(per_column ? static_cast<size_t>(cols) : 0, 0.0f);
    for (int64_t g0 = 0; g0 < bands; g0 += group_bands) {
      const int64_t g1 = std::min(bands, g0 + group_bands);
      std::vector<Status> st(static_cast<size_t>(g1 - g0));
      std::vector<float> part(static_cast<size_t>(g1 - g0), 0.0f);
      kernels::ParallelFor(g1 - g0, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t b = g0 + i, r0 = b * kBandRows, r1 = std::min(rows, r0 + kBandRows);
          st[i] = read_band(g0, b, r0, r1);
          if (st[i].ok()) part[i] = kernels::Amax(x.data() + i * kBandRows * cols, (r1 - r0) * cols);
        }
      });
      for (auto& s : st) FP8_RETURN_IF_ERROR(s);
      for (float a : part) amax = (std::isnan(a) || std::isnan(amax)) ? NAN : std::max(amax, a);
      if (per_column) {
        const int64_t n_rows = std::min(rows, g1 * kBandRows) - g0 * kBandRows;
        for (int64_t r = 0; r < n_rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const float v = std::fabs(x[static_cast<size_t>(r * cols + c)]);
            float& m = col_amax[static_cast<size_t>(c)];
            m = (std::isnan(v) || std::isnan(m)) ? NAN : std::max(m, v);
          }
      }
    }
    if (per_column) {
      for (int64_t c = 0; c < cols; ++c) {
        scales[static_cast<size_t>(c)] = kernels::ScaleInvFromAmax(col_amax[static_cast<size_t>(c)], fmt, opts.scale_format);
        if (!std::isfinite(scales[static_cast<size_t>(c)])) return NonFinite(reader, w);
      }
    } else {
      tensor_scale = kernels::ScaleInvFromAmax(amax, fmt, opts.scale_format);
      if (!std::isfinite(tensor_scale)) return NonFinite(reader, w);
      scales[0] = tensor_scale;
    }
  }

  RoundTripSums total;
  for (int64_t g0 = 0; g0 < bands; g0 += group_bands) {
    const int64_t g1 = std::min(bands, g0 + group_bands);
    std::vector<Status> st(static_cast<size_t>(g1 - g0));
    std::vector<RoundTripSums> sums(static_cast<size_t>(g1 - g0));
    // Bands in parallel; the kernels called inside run inline (nested ParallelFor).
    kernels::ParallelFor(g1 - g0, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t b = g0 + i, r0 = b * kBandRows, r1 = std::min(rows, r0 + kBandRows), rb = r1 - r0;
        st[i] = read_band(g0, b, r0, r1);
        if (!st[i].ok()) continue;
        const float* xb = x.data() + i * kBandRows * cols;
        uint8_t* qb = q.data() + i * kBandRows * cols;
        RoundTripSums& s = sums[i];
        switch (opts.granularity) {
          case WeightGranularity::kBlock: {
            float* sb = scales.data() + b * tiles;
            st[i] = kernels::Quantize128x128(xb, rb, cols, fmt, opts.scale_format, qb, sb);
            if (!st[i].ok()) break;
            for (int64_t t = 0; t < tiles; ++t) {
              if (!std::isfinite(sb[t])) st[i] = NonFinite(reader, w);
            }
            if (!st[i].ok()) break;
            for (int64_t r = 0; r < rb; ++r)
              for (int64_t t = 0; t < tiles; ++t) {
                const int64_t c0 = t * kernels::kTile, n = std::min(cols - c0, kernels::kTile);
                AddRoundTripSpan(s, xb + r * cols + c0, qb + r * cols + c0, n, sb[t], decode, clip);
              }
            break;
          }
          case WeightGranularity::kChannel:
            for (int64_t r = 0; per_column && r < rb; ++r)
              for (int64_t c = 0; c < cols; ++c) {
                const float sc = scales[static_cast<size_t>(c)];
                kernels::QuantizeTensor(xb + r * cols + c, 1, sc, fmt, qb + r * cols + c);
                AddRoundTripSpan(s, xb + r * cols + c, qb + r * cols + c, 1, sc, decode, clip);
              }
            for (int64_t r = 0; !per_column && r < rb; ++r) {
              const float* xr = xb + r * cols;
              const float sc = kernels::ScaleInvFromAmax(kernels::Amax(xr, cols), fmt, opts.scale_format);
              if (!std::isfinite(sc)) {
                st[i] = NonFinite(reader, w);
                break;
              }
              scales[r0 + r] = sc;
              kernels::QuantizeTensor(xr, cols, sc, fmt, qb + r * cols);
              AddRoundTripSpan(s, xr, qb + r * cols, cols, sc, decode, clip);
            }
            break;
          case WeightGranularity::kTensor:
            kernels::QuantizeTensor(xb, rb * cols, tensor_scale, fmt, qb);
            AddRoundTripSpan(s, xb, qb, rb * cols, tensor_scale, decode, clip);
            break;
        }
        if (st[i].ok())
          st[i] = writer.WriteAt(w.name, static_cast<uint64_t>(r0 * cols), qb, static_cast<size_t>(rb * cols));
      }
    });
    for (auto& s : st) FP8_RETURN_IF_ERROR(s);
    for (auto& s : sums) total.Add(s);
  }
  // A Conv1D weight's block grid was built as stored, [in/128, out/128]; vLLM reads it [out/128, in/128].
  if (in_out && opts.granularity == WeightGranularity::kBlock)
    scales = TransposeGrid(scales, kernels::CeilDiv(rows, kernels::kTile), tiles);
  FP8_RETURN_IF_ERROR(writer.Write(scale_name, scales.data(), scales.size() * sizeof(float)));

  return MakeQuantizeReport(w, opts.granularity, scales, total);
}

Status DequantizeWeight(const Reader& reader, const TensorInfo& w, const TensorInfo& scale,
                        const Reader& scale_reader, Writer& writer) {
  const std::string where = reader.path() + ": tensor \"" + w.name + "\": ";
  if (w.dtype != DType::F8_E4M3 && w.dtype != DType::F8_E5M2)
    return InvalidArgumentError(where + "expected F8_E4M3 or F8_E5M2, found " + safetensors::DTypeName(w.dtype));
  if (scale.dtype != DType::F32)
    return InvalidArgumentError(scale_reader.path() + ": tensor \"" + scale.name + "\": scale_inv must be F32, found " +
                                safetensors::DTypeName(scale.dtype));
  const bool in_out = IsConv1DInOut(w.name);
  auto g = GranularityFromScaleShape(w.shape, scale.shape, in_out);
  if (!g.ok()) return InvalidArgumentError(where + g.status().message());
  const kernels::Fp8Format fmt = w.dtype == DType::F8_E4M3 ? kernels::Fp8Format::kE4M3 : kernels::Fp8Format::kE5M2;
  const int64_t rows = w.shape[0], cols = w.shape[1], tiles = kernels::CeilDiv(cols, kernels::kTile);
  std::vector<float> scales(static_cast<size_t>(scale.numel()));
  FP8_RETURN_IF_ERROR(scale_reader.ReadInto(scale.name, scales.data(), scales.size() * sizeof(float)));
  if (in_out) scales = StoredLayoutScales(*g, scales, rows, cols);
  const bool per_column = in_out && *g == WeightGranularity::kChannel;

  const int64_t bands = kernels::CeilDiv(rows, kBandRows);
  const int64_t group_bands = BandsPerGroup(rows, cols);
  const int64_t group_elems = group_bands * kBandRows * cols;
  std::vector<uint8_t> q(static_cast<size_t>(group_elems));
  std::vector<float> x(static_cast<size_t>(group_elems));
  std::vector<uint16_t> out(static_cast<size_t>(group_elems));
  for (int64_t g0 = 0; g0 < bands; g0 += group_bands) {
    const int64_t g1 = std::min(bands, g0 + group_bands);
    std::vector<Status> st(static_cast<size_t>(g1 - g0));
    kernels::ParallelFor(g1 - g0, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t b = g0 + i, r0 = b * kBandRows, r1 = std::min(rows, r0 + kBandRows), rb = r1 - r0;
        const size_t at = static_cast<size_t>(i * kBandRows * cols);
        st[i] = reader.ReadRange(w.name, static_cast<uint64_t>(r0 * cols), q.data() + at, static_cast<size_t>(rb * cols));
        if (!st[i].ok()) continue;
        switch (*g) {
          case WeightGranularity::kBlock:
            st[i] = kernels::Dequantize128x128(q.data() + at, scales.data() + b * tiles, rb, cols, fmt, x.data() + at);
            break;
          case WeightGranularity::kChannel:
            for (int64_t r = 0; r < rb; ++r) {
              if (per_column) {
                for (int64_t c = 0; c < cols; ++c)
                  kernels::DequantizeTensor(q.data() + at + r * cols + c, 1, scales[c], fmt, x.data() + at + r * cols + c);
              } else {
                kernels::DequantizeTensor(q.data() + at + r * cols, cols, scales[r0 + r], fmt, x.data() + at + r * cols);
              }
            }
            break;
          case WeightGranularity::kTensor:
            kernels::DequantizeTensor(q.data() + at, rb * cols, scales[0], fmt, x.data() + at);
            break;
        }
        uint16_t* os = out.data() + at;
        FloatsToBf16(x.data() + at, rb * cols, os);
        if (st[i].ok())
          st[i] = writer.WriteAt(w.name, static_cast<uint64_t>(r0 * cols) * 2, os, static_cast<size_t>(rb * cols) * 2);
      }
    });
    for (auto& s : st) FP8_RETURN_IF_ERROR(s);
  }
  return OkStatus();
}

namespace {

class CpuWeightConverter final : public WeightConverter {
 public:
  const char* backend() const override { return "cpu"; }
  StatusOr<TensorReport> Quantize(const Reader& reader, const TensorInfo& w, const WeightOptions& opts,
                                  const std::string& scale_name, Writer& writer) override {
    return QuantizeWeight(reader, w, opts, scale_name, writer);
  }
  Status Dequantize(const Reader& reader, const TensorInfo& w, const TensorInfo& scale, const Reader& scale_reader,
                    Writer& writer) override {
    return DequantizeWeight(reader, w, scale, scale_reader, writer);
  }
};

}  // namespace

std::unique_ptr<WeightConverter> MakeCpuWeightConverter() { return std::make_unique<CpuWeightConverter>(); }

StatusOr<std::unique_ptr<WeightConverter>> MakeWeightConverter(Backend backend) {
  if (backend == Backend::kCpu) return MakeCpuWeightConverter();
#if FP8_CALIBRATE_CUDA
  if (CudaDeviceAvailable()) return MakeCudaWeightConverter();
  if (backend == Backend::kCuda)
    return FailedPreconditionError("backend: cuda requested, but no CUDA device is visible");
#else
  if (backend == Backend::kCuda)
    return FailedPreconditionError("backend: cuda requested, but this fp8-worker was built without CUDA");
#endif
  return MakeCpuWeightConverter();
}

nlohmann::json TensorReport::ToJson() const {
  auto finite_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"name", name}, {"shard", shard}, {"dtype", dtype}, {"shape", shape},
                      {"quantized", quantized}, {"bytes_in", bytes_in}, {"bytes_out", bytes_out}};
  if (quantized) {
    j["granularity"] = granularity;
    j["amax"] = amax;
    j["scale_inv_min"] = scale_inv_min;
    j["scale_inv_max"] = scale_inv_max;
    j["frac_saturated"] = frac_saturated;
    j["frac_flushed"] = frac_flushed;
    j["rel_error"] = rel_error;
    j["snr_db"] = finite_or_null(snr_db);  // null: the round trip was exact
  }
  return j;
}

TensorReport TensorReport::FromJson(const nlohmann::json& j) {
  TensorReport r;
  r.name = j.value("name", "");
  r.shard = j.value("shard", "");
  r.dtype = j.value("dtype", "");
  r.shape = j.value("shape", std::vector<int64_t>{});
  r.quantized = j.value("quantized", false);
  r.bytes_in = j.value("bytes_in", uint64_t{0});
  r.bytes_out = j.value("bytes_out", uint64_t{0});
  if (r.quantized) {
    r.granularity = j.value("granularity", "");
    r.amax = j.value("amax", 0.0);
    r.scale_inv_min = j.value("scale_inv_min", 0.0);
    r.scale_inv_max = j.value("scale_inv_max", 0.0);
    r.frac_saturated = j.value("frac_saturated", 0.0);
    r.frac_flushed = j.value("frac_flushed", 0.0);
    r.rel_error = j.value("rel_error", 0.0);
    r.snr_db = j.contains("snr_db") && j["snr_db"].is_number() ? j["snr_db"].get<double>()
                                                                : std::numeric_limits<double>::infinity();
  }
  return r;
}

}  // namespace fp8::calibrate
