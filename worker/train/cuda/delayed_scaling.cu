// SPDX-License-Identifier: Apache-2.0
// Delayed scaling (kernels/scaling.h) on the device: the amax history and scale update, and the
// casts' statistics for progress (one grid-stride pass, run only on the steps that report).
// Launchers of train_kernels.h.
#include "worker/train/cuda/train_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

__global__ void DelayedScalingUpdateKernel(float* state, const float* amax_ptr, DelayedScalingParams p) {
  const float amax = fabsf(*amax_ptr);
  if (!isfinite(amax)) return;
  float* hist = state;
  int count = static_cast<int>(state[p.history_len]);
  if (count < p.history_len) {
    hist[count++] = amax;
  } else {
    for (int i = 1; i < p.history_len; ++i) hist[i - 1] = hist[i];
    hist[p.history_len - 1] = amax;
  }
  state[p.history_len] = static_cast<float>(count);
  float used = hist[count - 1];
  if (!p.most_recent)
    for (int i = 0; i < count; ++i) used = fmaxf(used, hist[i]);
  if (used <= 0.0f) return;
  float a = used;
  if (!(a >= 1e-4f) && !isnan(a)) a = 1e-4f;
  float si = __fdiv_rn(a, p.fp8_max);
  if (p.ue8m0 && isfinite(si)) {
    uint32_t bits = __float_as_uint(si);
    if ((bits & 0x007FFFFFu) != 0) bits = (bits & 0x7F800000u) + 0x00800000u;
    si = __uint_as_float(bits);
  }
  state[p.history_len + 1] = ldexpf(si, p.margin);
}

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
  for (int o = 16; o > 0; o >>= 1) {
    saturated += __shfl_xor_sync(0xffffffffu, saturated, o);
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  }
  if ((threadIdx.x & 31) == 0) {
    if (saturated) atomicAdd(&stats->saturated, saturated);
    // Non-negative floats order as their bits do.
    atomicMax(reinterpret_cast<unsigned int*>(&stats->amax), __float_as_uint(amax));
  }
}

}  // namespace

Status DelayedScalingUpdate(float* state, const float* amax, DelayedScalingParams p, cudaStream_t s) {
  DelayedScalingUpdateKernel<<<1, 1, 0, s>>>(state, amax, p);
  LAUNCH_CHECK();
}

template <typename T>
Status AccumulateFp8CastStats(const T* x, int64_t n, const float* scale_inv, float fp8_max, DeviceFp8CastStats* stats,
                              cudaStream_t s) {
  Fp8CastStatsKernel<<<Blocks(n) < 1024u ? Blocks(n) : 1024u, kThreads, 0, s>>>(x, n, scale_inv, fp8_max, stats);
  LAUNCH_CHECK();
}
template Status AccumulateFp8CastStats(const float*, int64_t, const float*, float, DeviceFp8CastStats*, cudaStream_t);
template Status AccumulateFp8CastStats(const bf16*, int64_t, const float*, float, DeviceFp8CastStats*, cudaStream_t);

}  // namespace fp8::train::cuda
