// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/cuda_weight_converter.h"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_dequantize.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/parallel.h"
#include "kernels/quantize.h"
#include "worker/calibrate/cuda_round_trip_stats.h"

namespace fp8::calibrate {

using safetensors::DType;
using safetensors::Reader;
using safetensors::TensorInfo;
using safetensors::Writer;

namespace {

// The kernels' vector loads want rows of a multiple of 16 elements; other rows are padded on
// the device (2-D copies in and out).
constexpr int64_t kRowAlign = 16;

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

cudaError_t AllocPinned(void** p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocDefault); }
cudaError_t FreePinned(void* p) { return cudaFreeHost(p); }
cudaError_t AllocDevice(void** p, size_t n) { return cudaMalloc(p, n); }
cudaError_t FreeDevice(void* p) { return cudaFree(p); }

// Grow-only buffers: a converter serves a whole model, so each is allocated a few times at most.
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*)>
class GrowOnlyBuffer {
 public:
  GrowOnlyBuffer() = default;
  GrowOnlyBuffer(const GrowOnlyBuffer&) = delete;
  GrowOnlyBuffer& operator=(const GrowOnlyBuffer&) = delete;
  ~GrowOnlyBuffer() {
    if (p_ != nullptr) Free(p_);
  }
  Status Reserve(size_t n) {
    if (n <= cap_) return OkStatus();
    if (p_ != nullptr) FP8_RETURN_IF_CUDA_ERROR(Free(p_));
    p_ = nullptr;
    cap_ = 0;
    FP8_RETURN_IF_CUDA_ERROR(Alloc(&p_, n));
    cap_ = n;
    return OkStatus();
  }
  uint8_t* get() const { return static_cast<uint8_t*>(p_); }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};
using PinnedBuffer = GrowOnlyBuffer<AllocPinned, FreePinned>;
using DeviceBuffer = GrowOnlyBuffer<AllocDevice, FreeDevice>;

// Adds the GPU's per-block partials in order (the same order every run).
void AddPartials(const RoundTripPartial* partials, int n, RoundTripSums* sums) {
  for (int i = 0; i < n; ++i) {
    RoundTripSums p;
    p.sum_x2 = partials[i].sum_x2;
    p.sum_e2 = partials[i].sum_e2;
    p.saturated = static_cast<int64_t>(partials[i].saturated);
    p.flushed = static_cast<int64_t>(partials[i].flushed);
    p.nonzero = static_cast<int64_t>(partials[i].nonzero);
    p.amax = std::bit_cast<float>(partials[i].amax_bits);
    sums->Add(p);
  }
}

// One stage of the two-deep pipeline: a chunk's host and device buffers and its stream.
struct Slot {
  cudaStream_t stream = nullptr;
  PinnedBuffer host_in, host_out, host_scales, host_partials;
  DeviceBuffer dev_in, dev_out, dev_scales, dev_partials;
  bool busy = false;
  int64_t r0 = 0, r1 = 0;  // rows of the chunk in flight
  int partials = 0;
};

// pread / pwrite of `nbytes` at `offset` of a tensor, split across the kernels' thread pool (one
// thread copies between the page cache and user memory at a few GB/s; the GPU takes far more).
template <typename Fn>
Status InPieces(size_t nbytes, Fn&& fn) {
  constexpr size_t kMinPiece = size_t{2} << 20;
  const int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(kernels::NumThreads(), nbytes / kMinPiece));
  std::vector<Status> st(static_cast<size_t>(pieces));
  kernels::ParallelFor(pieces, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) st[i] = fn(nbytes * i / pieces, nbytes * (i + 1) / pieces);
  });
  for (auto& s : st) FP8_RETURN_IF_ERROR(s);
  return OkStatus();
}
Status ParallelRead(const Reader& reader, const std::string& name, uint64_t offset, uint8_t* dst, size_t nbytes) {
  return InPieces(nbytes, [&](size_t b, size_t e) { return reader.ReadRange(name, offset + b, dst + b, e - b); });
}
Status ParallelWrite(Writer& writer, const std::string& name, uint64_t offset, const uint8_t* src, size_t nbytes) {
  return InPieces(nbytes, [&](size_t b, size_t e) { return writer.WriteAt(name, offset + b, src + b, e - b); });
}

// Host → device copy of `rows` rows of `width` bytes into rows of `pitch` bytes (zero padding).
Status CopyRowsIn(uint8_t* dev, int64_t pitch, const uint8_t* host, int64_t width, int64_t rows, cudaStream_t s) {
  if (pitch == width) {
    FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(dev, host, static_cast<size_t>(rows * width), cudaMemcpyHostToDevice, s));
    return OkStatus();
  }
  FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(dev, 0, static_cast<size_t>(rows * pitch), s));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy2DAsync(dev, static_cast<size_t>(pitch), host, static_cast<size_t>(width),
                                             static_cast<size_t>(width), static_cast<size_t>(rows),
                                             cudaMemcpyHostToDevice, s));
  return OkStatus();
}

Status CopyRowsOut(uint8_t* host, int64_t width, const uint8_t* dev, int64_t pitch, int64_t rows, cudaStream_t s) {
  if (pitch == width) {
    FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(host, dev, static_cast<size_t>(rows * width), cudaMemcpyDeviceToHost, s));
    return OkStatus();
  }
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy2DAsync(host, static_cast<size_t>(width), dev, static_cast<size_t>(pitch),
                                             static_cast<size_t>(width), static_cast<size_t>(rows),
                                             cudaMemcpyDeviceToHost, s));
  return OkStatus();
}

class CudaWeightConverter final : public WeightConverter {
 public:
  explicit CudaWeightConverter(int64_t chunk_bytes) : chunk_bytes_(std::max<int64_t>(1, chunk_bytes)) {}
  ~CudaWeightConverter() override {
    Drain();
    for (auto& s : slots_)
      if (s.stream != nullptr) cudaStreamDestroy(s.stream);
  }

  const char* backend() const override { return "cuda"; }

  StatusOr<TensorReport> Quantize(const Reader& reader, const TensorInfo& w, const WeightOptions& opts,
                                  const std::string& scale_name, Writer& writer) override {
    // Conv1D weights: the CPU writes their scales in the orientation vLLM reads (IsConv1DInOut).
    if (opts.granularity != WeightGranularity::kBlock || w.shape.size() != 2 ||
        (w.dtype != DType::BF16 && w.dtype != DType::F32) || w.numel() == 0 || IsConv1DInOut(w.name))
      return cpu_->Quantize(reader, w, opts, scale_name, writer);
    FP8_RETURN_IF_ERROR(Init());
    const int64_t rows = w.shape[0], cols = w.shape[1], ld = RoundUp(cols, kRowAlign);
    const int64_t tiles = kernels::CeilDiv(cols, kernels::kTile);
    const bool bf16 = w.dtype == DType::BF16;
    const int64_t esize = bf16 ? 2 : 4;
    const int64_t chunk_rows = ChunkRows(cols * esize);
    const int64_t chunk_scales = chunk_rows / kernels::kTile * tiles;
    const int partials_max = RoundTripPartials(chunk_rows);
    for (auto& s : slots_) {
      FP8_RETURN_IF_ERROR(s.host_in.Reserve(static_cast<size_t>(chunk_rows * cols * esize)));
      FP8_RETURN_IF_ERROR(s.host_out.Reserve(static_cast<size_t>(chunk_rows * cols)));
      FP8_RETURN_IF_ERROR(s.host_scales.Reserve(static_cast<size_t>(chunk_scales) * sizeof(float)));
      FP8_RETURN_IF_ERROR(s.host_partials.Reserve(static_cast<size_t>(partials_max) * sizeof(RoundTripPartial)));
      FP8_RETURN_IF_ERROR(s.dev_in.Reserve(static_cast<size_t>(chunk_rows * ld * esize)));
      FP8_RETURN_IF_ERROR(s.dev_out.Reserve(static_cast<size_t>(chunk_rows * ld)));
      FP8_RETURN_IF_ERROR(s.dev_scales.Reserve(static_cast<size_t>(chunk_scales) * sizeof(float)));
      FP8_RETURN_IF_ERROR(s.dev_partials.Reserve(static_cast<size_t>(partials_max) * sizeof(RoundTripPartial)));
    }

    std::vector<float> scales(static_cast<size_t>(kernels::CeilDiv(rows, kernels::kTile) * tiles));
    RoundTripSums sums;
    bool non_finite = false;
    // Chunk k−2's results, once its stream is done: scales, statistics, the FP8 rows to disk.
    auto finish = [&](Slot& s) -> Status {
      const int64_t n = s.r1 - s.r0;
      const float* sc = reinterpret_cast<const float*>(s.host_scales.get());
      const int64_t count = kernels::CeilDiv(n, kernels::kTile) * tiles;
      for (int64_t i = 0; i < count; ++i) non_finite |= !std::isfinite(sc[i]);
      std::copy(sc, sc + count, scales.begin() + s.r0 / kernels::kTile * tiles);
      AddPartials(reinterpret_cast<const RoundTripPartial*>(s.host_partials.get()), s.partials, &sums);
      return ParallelWrite(writer, w.name, static_cast<uint64_t>(s.r0 * cols), s.host_out.get(), static_cast<size_t>(n * cols));
    };
    auto enqueue = [&](Slot& s, int64_t n) -> Status {
      FP8_RETURN_IF_ERROR(ParallelRead(reader, w.name, static_cast<uint64_t>(s.r0 * cols * esize), s.host_in.get(),
                                       static_cast<size_t>(n * cols * esize)));
      FP8_RETURN_IF_ERROR(CopyRowsIn(s.dev_in.get(), ld * esize, s.host_in.get(), cols * esize, n, s.stream));
      float* dev_scales = reinterpret_cast<float*>(s.dev_scales.get());
      if (bf16) {
        FP8_RETURN_IF_ERROR(kernels::cuda::Sm90Fp8Quantize128x128(reinterpret_cast<const __nv_bfloat16*>(s.dev_in.get()), n,
                                                                  ld, opts.fmt, opts.scale_format, s.dev_out.get(),
                                                                  dev_scales, tiles, s.stream));
      } else {
        FP8_RETURN_IF_ERROR(kernels::cuda::Sm90Fp8Quantize128x128(reinterpret_cast<const float*>(s.dev_in.get()), n, ld,
                                                                  opts.fmt, opts.scale_format, s.dev_out.get(),
                                                                  dev_scales, tiles, s.stream));
      }
      s.partials = RoundTripPartials(n);
      auto* dev_partials = reinterpret_cast<RoundTripPartial*>(s.dev_partials.get());
      FP8_RETURN_IF_ERROR(RoundTripStats128x128(s.dev_in.get(), bf16, s.dev_out.get(), dev_scales, n, cols, ld, tiles,
                                                opts.fmt, ClipThreshold(opts.fmt), dev_partials, s.stream));
      FP8_RETURN_IF_ERROR(CopyRowsOut(s.host_out.get(), cols, s.dev_out.get(), ld, n, s.stream));
      const size_t scale_bytes = static_cast<size_t>(kernels::CeilDiv(n, kernels::kTile) * tiles) * sizeof(float);
      FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(s.host_scales.get(), dev_scales, scale_bytes, cudaMemcpyDeviceToHost, s.stream));
      FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(s.host_partials.get(), dev_partials,
                                               static_cast<size_t>(s.partials) * sizeof(RoundTripPartial),
                                               cudaMemcpyDeviceToHost, s.stream));
      return OkStatus();
    };
    FP8_RETURN_IF_ERROR(RunChunks(rows, chunk_rows, enqueue, finish));
    if (non_finite) return DataLossError(reader.path() + ": tensor \"" + w.name + "\" contains NaN or Inf");
    FP8_RETURN_IF_ERROR(writer.Write(scale_name, scales.data(), scales.size() * sizeof(float)));
    return MakeQuantizeReport(w, opts.granularity, scales, sums);
  }

  Status Dequantize(const Reader& reader, const TensorInfo& w, const TensorInfo& scale, const Reader& scale_reader,
                    Writer& writer) override {
    const bool fp8 = w.dtype == DType::F8_E4M3 || w.dtype == DType::F8_E5M2;
    auto g = GranularityFromScaleShape(w.shape, scale.shape);
    if (!fp8 || scale.dtype != DType::F32 || !g.ok() || *g != WeightGranularity::kBlock || w.numel() == 0 ||
        IsConv1DInOut(w.name))
      return cpu_->Dequantize(reader, w, scale, scale_reader, writer);  // its own checks name the problem
    FP8_RETURN_IF_ERROR(Init());
    const kernels::Fp8Format fmt = w.dtype == DType::F8_E4M3 ? kernels::Fp8Format::kE4M3 : kernels::Fp8Format::kE5M2;
    const int64_t rows = w.shape[0], cols = w.shape[1], ld = RoundUp(cols, kRowAlign);
    const int64_t tiles = kernels::CeilDiv(cols, kernels::kTile);
    const int64_t chunk_rows = ChunkRows(cols);
    std::vector<float> scales(static_cast<size_t>(scale.numel()));
    FP8_RETURN_IF_ERROR(scale_reader.ReadInto(scale.name, scales.data(), scales.size() * sizeof(float)));
    FP8_RETURN_IF_ERROR(all_scales_.Reserve(scales.size() * sizeof(float)));
    FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(all_scales_.get(), scales.data(), scales.size() * sizeof(float), cudaMemcpyHostToDevice));
    for (auto& s : slots_) {
      FP8_RETURN_IF_ERROR(s.host_in.Reserve(static_cast<size_t>(chunk_rows * cols)));
      FP8_RETURN_IF_ERROR(s.host_out.Reserve(static_cast<size_t>(chunk_rows * cols * 2)));
      FP8_RETURN_IF_ERROR(s.dev_in.Reserve(static_cast<size_t>(chunk_rows * ld)));
      FP8_RETURN_IF_ERROR(s.dev_out.Reserve(static_cast<size_t>(chunk_rows * ld * 2)));
    }
    auto finish = [&](Slot& s) -> Status {
      return ParallelWrite(writer, w.name, static_cast<uint64_t>(s.r0 * cols) * 2, s.host_out.get(),
                           static_cast<size_t>((s.r1 - s.r0) * cols) * 2);
    };
    auto enqueue = [&](Slot& s, int64_t n) -> Status {
      FP8_RETURN_IF_ERROR(ParallelRead(reader, w.name, static_cast<uint64_t>(s.r0 * cols), s.host_in.get(),
                                       static_cast<size_t>(n * cols)));
      FP8_RETURN_IF_ERROR(CopyRowsIn(s.dev_in.get(), ld, s.host_in.get(), cols, n, s.stream));
      const float* sc = reinterpret_cast<const float*>(all_scales_.get()) + s.r0 / kernels::kTile * tiles;
      FP8_RETURN_IF_ERROR(kernels::cuda::Sm90Fp8Dequantize128x128(s.dev_in.get(), sc, tiles, n, ld, fmt,
                                                                  reinterpret_cast<__nv_bfloat16*>(s.dev_out.get()),
                                                                  s.stream));
      return CopyRowsOut(s.host_out.get(), cols * 2, s.dev_out.get(), ld * 2, n, s.stream);
    };
    return RunChunks(rows, chunk_rows, enqueue, finish);
  }

 private:
  Status Init() {
    for (auto& s : slots_)
      if (s.stream == nullptr) FP8_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    return OkStatus();
  }
  // Whole 128-row bands, about chunk_bytes_ of input, at least one band.
  int64_t ChunkRows(int64_t row_bytes) const {
    return std::max<int64_t>(1, chunk_bytes_ / std::max<int64_t>(1, kernels::kTile * row_bytes)) * kernels::kTile;
  }
  // The two-slot pipeline over chunks of chunk_rows rows: chunk k is enqueued on slot k % 2
  // (`enqueue(slot, rows)`, rows [slot.r0, slot.r1)) once that slot's previous chunk has
  // finished (its stream synchronized, then `finish(slot)`), so chunk k's reads and writes
  // overlap chunk k±1's GPU work. The last two finish in chunk order, so every chunk finishes
  // in order (the statistics add up the same way every run). On an error nothing may still be
  // copying into the buffers: the streams are drained before returning.
  Status RunChunks(int64_t rows, int64_t chunk_rows, const std::function<Status(Slot&, int64_t)>& enqueue,
                   const std::function<Status(Slot&)>& finish) {
    auto complete = [&](Slot& s) -> Status {
      FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(s.stream));
      s.busy = false;
      return finish(s);
    };
    auto run = [&]() -> Status {
      const int64_t chunks = kernels::CeilDiv(rows, chunk_rows);
      for (int64_t k = 0; k < chunks; ++k) {
        Slot& s = slots_[k % 2];
        if (s.busy) FP8_RETURN_IF_ERROR(complete(s));
        s.r0 = k * chunk_rows;
        s.r1 = std::min(rows, s.r0 + chunk_rows);
        FP8_RETURN_IF_ERROR(enqueue(s, s.r1 - s.r0));
        s.busy = true;
      }
      for (int64_t k = std::max<int64_t>(0, chunks - 2); k < chunks; ++k) FP8_RETURN_IF_ERROR(complete(slots_[k % 2]));
      return OkStatus();
    };
    Status st = run();
    Drain();
    return st;
  }
  void Drain() {
    for (auto& s : slots_) {
      if (s.busy) cudaStreamSynchronize(s.stream);
      s.busy = false;
    }
  }

  std::unique_ptr<WeightConverter> cpu_ = MakeCpuWeightConverter();
  int64_t chunk_bytes_;
  Slot slots_[2];
  DeviceBuffer all_scales_;  // dequantize: the whole scale tensor (small: 1/16384 of the weight)
};

}  // namespace

bool CudaDeviceAvailable() {
  // The kernels are sm_90a SASS only (no PTX): they run on compute capability 9.0 and nowhere else.
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  int major = 0, minor = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess && major == 9 &&
         minor == 0;
}

std::unique_ptr<WeightConverter> MakeCudaWeightConverter(int64_t chunk_bytes) {
  return std::make_unique<CudaWeightConverter>(chunk_bytes);
}

}  // namespace fp8::calibrate
