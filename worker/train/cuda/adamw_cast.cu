// SPDX-License-Identifier: Apache-2.0
// AdamW + 128x128 cast of the updated weights in one kernel (adamw_cast.h).
#include "worker/train/cuda/adamw_cast.h"

#include <string>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_quantize.cuh"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "worker/train/cuda/adamw.cuh"

namespace fp8::train::cuda {
namespace {

namespace kc = kernels::cuda;
using kernels::Fp8Format;

// One CTA per 128x128 block of W: each pass, a thread updates its 4 weights (16-byte loads of w,
// g, m, v; stores of w, m, v) and keeps the new w in registers; then the block is cast exactly as
// the plain cast casts a block it loaded. 512 threads and two CTAs per SM, not the plain cast's
// 256: the update moves 7 words per weight where the cast moves 1.5, and with 256 threads (112
// registers, 2 CTAs per SM) too few loads were in flight: 2.32 ms per d4096 block against 1.82
// for AdamW + the cast apart; with 512, 1.56 ms (1024 threads: 1.57; H200, docs/perf-history.md).
constexpr int kAdamWCastThreads = 512;
template <Fp8Format F>
__global__ void __launch_bounds__(kAdamWCastThreads, 2)
    AdamWCast128x128Kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
                           float* __restrict__ v, int64_t rows, int64_t cols, bool decay, AdamWArgs a, bool ue8m0,
                           uint8_t* __restrict__ q, float* __restrict__ scale_inv, int64_t scale_ld,
                           uint8_t* __restrict__ qt, float* __restrict__ scale_inv_t, int64_t scale_ld_t) {
  using B = kc::Sm90Block128x128<float, kAdamWCastThreads>;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * 128;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 128 + B::ColInBlock();
  uint4 raw[B::kPasses];
#pragma unroll
  for (int p = 0; p < B::kPasses; ++p) {
    const int64_t r = row0 + p * B::kRowsPerPass + B::RowInPass();
    if (r < rows && col < cols) {
      const int64_t i = (r * cols + col) / 4;
      float4 ww = reinterpret_cast<float4*>(w)[i], mm = reinterpret_cast<float4*>(m)[i], vv = reinterpret_cast<float4*>(v)[i];
      const float4 gg = reinterpret_cast<const float4*>(g)[i];
      AdamWOne(ww.x, gg.x, mm.x, vv.x, decay, a);
      AdamWOne(ww.y, gg.y, mm.y, vv.y, decay, a);
      AdamWOne(ww.z, gg.z, mm.z, vv.z, decay, a);
      AdamWOne(ww.w, gg.w, mm.w, vv.w, decay, a);
      reinterpret_cast<float4*>(w)[i] = ww;
      reinterpret_cast<float4*>(m)[i] = mm;
      reinterpret_cast<float4*>(v)[i] = vv;
      raw[p] = make_uint4(__float_as_uint(ww.x), __float_as_uint(ww.y), __float_as_uint(ww.z), __float_as_uint(ww.w));
    } else {
      raw[p] = make_uint4(0, 0, 0, 0);
    }
  }
  kc::Sm90Fp8Cast128x128Block<float, F, kAdamWCastThreads>(raw, rows, cols, ue8m0, q, scale_inv, scale_ld, qt, scale_inv_t, scale_ld_t,
                                                           nullptr, nullptr);
}

Status CheckAligned(const void* p, const char* name) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return InvalidArgumentError(std::string(name) + " must be 16-byte aligned");
  return OkStatus();
}

}  // namespace

Status AdamWStepCast128x128(float* w, const float* g, float* m, float* v, int64_t rows, int64_t cols, bool decay,
                            const AdamWArgs& a, Fp8Format fmt, kernels::ScaleFormat sf, uint8_t* q, float* scale_inv,
                            int64_t scale_ld, uint8_t* qt, float* scale_inv_t, int64_t scale_ld_t, cudaStream_t s) {
  FP8_RETURN_IF_ERROR(kc::Sm90ValidateQuantShape(rows, cols, w, q, scale_inv));
  FP8_RETURN_IF_ERROR(kc::Sm90ValidateQuantShape(rows, cols, w, qt, scale_inv_t));
  FP8_RETURN_IF_ERROR(CheckAligned(g, "gradient pointer"));
  FP8_RETURN_IF_ERROR(CheckAligned(m, "first-moment pointer"));
  FP8_RETURN_IF_ERROR(CheckAligned(v, "second-moment pointer"));
  if (rows % 16 != 0)
    return InvalidArgumentError("rows must be a multiple of 16 for the transposed output, got " + std::to_string(rows));
  if (scale_ld < (cols + 127) / 128) return InvalidArgumentError("scale_ld must be ≥ ceil(cols/128), got " + std::to_string(scale_ld));
  if (scale_ld_t < (rows + 127) / 128)
    return InvalidArgumentError("scale_ld_t must be ≥ ceil(rows/128), got " + std::to_string(scale_ld_t));
  const dim3 grid(static_cast<unsigned>((cols + 127) / 128), static_cast<unsigned>((rows + 127) / 128));
  if (grid.y > 65535) return InvalidArgumentError("rows too large: " + std::to_string(rows));
  const bool ue8m0 = sf == kernels::ScaleFormat::kUe8m0;
  constexpr size_t kSmem = kc::Sm90Block128x128<float, kAdamWCastThreads>::kTransposeSmemBytes;
  if (fmt == Fp8Format::kE4M3) {
    AdamWCast128x128Kernel<Fp8Format::kE4M3><<<grid, kAdamWCastThreads, kSmem, s>>>(
        w, g, m, v, rows, cols, decay, a, ue8m0, q, scale_inv, scale_ld, qt, scale_inv_t, scale_ld_t);
  } else {
    AdamWCast128x128Kernel<Fp8Format::kE5M2><<<grid, kAdamWCastThreads, kSmem, s>>>(
        w, g, m, v, rows, cols, decay, a, ue8m0, q, scale_inv, scale_ld, qt, scale_inv_t, scale_ld_t);
  }
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace fp8::train::cuda
