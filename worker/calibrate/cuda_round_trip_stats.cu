// SPDX-License-Identifier: Apache-2.0
// Round-trip statistics on the GPU (cuda_round_trip_stats.h). One CUDA block per row at a time
// (grid-stride over rows), threads across the columns, so the tile's scale is a shift away and
// no element needs an integer division; each block writes one partial, which the host adds up
// in order.
#include "worker/calibrate/cuda_round_trip_stats.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/sm90_cuda_check.h"

namespace fp8::calibrate {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

__device__ inline float Widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float Widen(float v) { return v; }

__device__ inline float DecodeFp8(uint8_t b, bool e4m3) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(b, e4m3 ? __NV_E4M3 : __NV_E5M2);  // exact
  return __half2float(__half(h));
}

template <typename T>
__device__ inline T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ inline unsigned int WarpMax(unsigned int v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
  return v;
}

template <typename T>
__global__ void RoundTripStatsKernel(const T* __restrict__ x, const uint8_t* __restrict__ q,
                                     const float* __restrict__ scale_inv, int64_t rows, int64_t cols, int64_t ld,
                                     int64_t tiles, bool e4m3, float clip, RoundTripPartial* out) {
  double x2 = 0, e2 = 0;
  unsigned long long sat = 0, fl = 0, nz = 0;
  unsigned int amax = 0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* srow = scale_inv + (r / 128) * tiles;
    const T* xr = x + r * ld;
    const uint8_t* qr = q + r * ld;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = Widen(xr[c]);
      const float s = srow[c >> 7];
      // __fmul_rn / __fsub_rn: no FMA contraction, so x̂ and the error are those of the CPU path.
      const float h = __fmul_rn(DecodeFp8(qr[c], e4m3), s);
      const float e = __fsub_rn(v, h);
      x2 += double(__fmul_rn(v, v));
      e2 += double(__fmul_rn(e, e));
      sat += fabsf(v) >= __fmul_rn(clip, s);
      fl += (v != 0.0f) & (h == 0.0f);
      nz += v != 0.0f;
      amax = max(amax, __float_as_uint(v) & 0x7FFFFFFFu);
    }
  }
  __shared__ double sx[kThreads / 32], se[kThreads / 32];
  __shared__ unsigned long long ss[kThreads / 32], sf[kThreads / 32], sn[kThreads / 32];
  __shared__ unsigned int sm[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  x2 = WarpSum(x2);
  e2 = WarpSum(e2);
  sat = WarpSum(sat);
  fl = WarpSum(fl);
  nz = WarpSum(nz);
  amax = WarpMax(amax);
  if (lane == 0) {
    sx[warp] = x2;
    se[warp] = e2;
    ss[warp] = sat;
    sf[warp] = fl;
    sn[warp] = nz;
    sm[warp] = amax;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    RoundTripPartial p{};
    for (int w = 0; w < kThreads / 32; ++w) {
      p.sum_x2 += sx[w];
      p.sum_e2 += se[w];
      p.saturated += ss[w];
      p.flushed += sf[w];
      p.nonzero += sn[w];
      p.amax_bits = max(p.amax_bits, sm[w]);
    }
    out[blockIdx.x] = p;
  }
}

}  // namespace

int RoundTripPartials(int64_t rows) { return static_cast<int>(std::min<int64_t>(rows, kMaxBlocks)); }

Status RoundTripStats128x128(const void* x, bool bf16, const uint8_t* q, const float* scale_inv, int64_t rows,
                             int64_t cols, int64_t ld, int64_t tiles, kernels::Fp8Format fmt, float clip,
                             RoundTripPartial* partials, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return OkStatus();
  const int blocks = RoundTripPartials(rows);
  const bool e4m3 = fmt == kernels::Fp8Format::kE4M3;
  if (bf16) {
    RoundTripStatsKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), q, scale_inv, rows,
                                                         cols, ld, tiles, e4m3, clip, partials);
  } else {
    RoundTripStatsKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(x), q, scale_inv, rows, cols,
                                                         ld, tiles, e4m3, clip, partials);
  }
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace fp8::calibrate
