// Launchers of fp8_cast_stats.h: one grid-stride pass, a warp reduction, two atomics per warp.
#include "worker/train/cuda/fp8_cast_stats.h"

#include <cmath>

#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

__device__ __forceinline__ float Abs(float x) { return fabsf(x); }
__device__ __forceinline__ float Abs(bf16 x) { return fabsf(__bfloat162float(x)); }

template <typename T>
__global__ void Fp8CastStatsKernel(const T* x, int64_t n, const float* scale_inv, float fp8_max, DeviceFp8CastStats* stats) {
  // The CPU's limit, in the same float arithmetic: |x| beyond it clips to the format's max.
  const float limit = scale_inv ? fp8_max * *scale_inv : INFINITY;
  unsigned long long saturated = 0;
  float amax = 0.0f;
  GRID_STRIDE(i, n) {
    const float a = Abs(x[i]);
    saturated += a > limit;
    amax = fmaxf(amax, a);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    saturated += __shfl_xor_sync(0xffffffffu, saturated, o);
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  }
  if ((threadIdx.x & 31) == 0) {
    if (saturated) atomicAdd(&stats->saturated, saturated);
    atomicMax(&stats->amax_bits, __float_as_uint(amax));
  }
}

template <typename T>
Status Launch(const T* x, int64_t n, const float* scale_inv, float fp8_max, DeviceFp8CastStats* stats, cudaStream_t s) {
  const unsigned blocks = Blocks(n) < 1024u ? Blocks(n) : 1024u;
  Fp8CastStatsKernel<<<blocks, kThreads, 0, s>>>(x, n, scale_inv, fp8_max, stats);
  LAUNCH_CHECK();
}

}  // namespace

Status AccumulateFp8CastStats(const float* x, int64_t n, const float* scale_inv, float fp8_max, DeviceFp8CastStats* stats,
                              cudaStream_t s) {
  return Launch(x, n, scale_inv, fp8_max, stats, s);
}

Status AccumulateFp8CastStats(const bf16* x, int64_t n, const float* scale_inv, float fp8_max, DeviceFp8CastStats* stats,
                              cudaStream_t s) {
  return Launch(x, n, scale_inv, fp8_max, stats, s);
}

}  // namespace fp8::train::cuda
