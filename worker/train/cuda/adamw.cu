// SPDX-License-Identifier: Apache-2.0
// AdamW over the flat parameters (and one tensor with its BF16 copy), and the gradient norm
// for clipping.
// Launchers of train_kernels.h.
#include "worker/train/cuda/train_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/adamw.cuh"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

__global__ void SumSquaresPartialKernel(const float* x, int64_t n, double* partial) {
  __shared__ double sh[kThreads];
  double s = 0;
  GRID_STRIDE(i, n) s += static_cast<double>(x[i]) * x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void SumDoublesKernel(const double* partial, int n, double* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += partial[i];
    *out = s;
  }
}

// decay[i]: kAdamWNoDecay, kAdamWDecay, or kAdamWSkip (left alone: a fused kernel updates it);
// a null mask means `uniform` for every parameter. `copy` (may be null): the updated values
// rounded to BF16.
__global__ void AdamWKernel(float* p, const float* g, float* m, float* v, const uint8_t* decay, uint8_t uniform,
                            int64_t n, AdamWArgs a, bf16* copy) {
  GRID_STRIDE(i, n) {
    const uint8_t d = decay ? decay[i] : uniform;
    if (d == kAdamWSkip) continue;
    AdamWOne(p[i], g[i], m[i], v[i], d == kAdamWDecay, a);
    if (copy) copy[i] = __float2bfloat16_rn(p[i]);
  }
}
// 4 parameters per thread (float4 / uchar4 accesses); the same arithmetic per element. Four
// skipped parameters cost one 4-byte read of the mask.
__global__ void AdamW4Kernel(float* p, const float* g, float* m, float* v, const uint8_t* decay, uint8_t uniform,
                             int64_t n, AdamWArgs a, bf16* copy) {
  GRID_STRIDE(q, n / 4) {
    const uchar4 dd = decay ? reinterpret_cast<const uchar4*>(decay)[q] : make_uchar4(uniform, uniform, uniform, uniform);
    if (dd.x == kAdamWSkip && dd.y == kAdamWSkip && dd.z == kAdamWSkip && dd.w == kAdamWSkip) continue;
    float4 pp = reinterpret_cast<float4*>(p)[q], mm = reinterpret_cast<float4*>(m)[q], vv = reinterpret_cast<float4*>(v)[q];
    const float4 gg = reinterpret_cast<const float4*>(g)[q];
    if (dd.x != kAdamWSkip) AdamWOne(pp.x, gg.x, mm.x, vv.x, dd.x == kAdamWDecay, a);
    if (dd.y != kAdamWSkip) AdamWOne(pp.y, gg.y, mm.y, vv.y, dd.y == kAdamWDecay, a);
    if (dd.z != kAdamWSkip) AdamWOne(pp.z, gg.z, mm.z, vv.z, dd.z == kAdamWDecay, a);
    if (dd.w != kAdamWSkip) AdamWOne(pp.w, gg.w, mm.w, vv.w, dd.w == kAdamWDecay, a);
    reinterpret_cast<float4*>(p)[q] = pp;
    reinterpret_cast<float4*>(m)[q] = mm;
    reinterpret_cast<float4*>(v)[q] = vv;
    if (copy) {
      __nv_bfloat162* c2 = reinterpret_cast<__nv_bfloat162*>(copy + 4 * q);
      c2[0] = __floats2bfloat162_rn(pp.x, pp.y);
      c2[1] = __floats2bfloat162_rn(pp.z, pp.w);
    }
  }
}

}  // namespace

Status SumSquares(const float* x, int64_t n, double* partial, double* out, cudaStream_t s) {
  const unsigned blocks = std::min<unsigned>(1024, Blocks(n));
  SumSquaresPartialKernel<<<blocks, kThreads, 0, s>>>(x, n, partial);
  FP8_RETURN_IF_LAUNCH_FAILED();
  SumDoublesKernel<<<1, 32, 0, s>>>(partial, static_cast<int>(blocks), out);
  LAUNCH_CHECK();
}

namespace {
Status LaunchAdamW(float* p, const float* g, float* m, float* v, const uint8_t* decay, uint8_t uniform, int64_t n,
                   const AdamWArgs& a, bf16* copy, cudaStream_t s) {
  const bool vec4 = n % 4 == 0 && Vec8(8, {p, g, m, v}) && reinterpret_cast<uintptr_t>(decay) % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(copy) % 8 == 0;
  if (vec4) AdamW4Kernel<<<Blocks(n / 4), kThreads, 0, s>>>(p, g, m, v, decay, uniform, n, a, copy);
  else AdamWKernel<<<Blocks(n), kThreads, 0, s>>>(p, g, m, v, decay, uniform, n, a, copy);
  LAUNCH_CHECK();
}
}  // namespace

Status AdamWStep(float* p, const float* g, float* m, float* v, const uint8_t* decay, int64_t n,
             const AdamWArgs& a, cudaStream_t s) {
  if (decay == nullptr) return InvalidArgumentError("AdamW decay mask is null");
  return LaunchAdamW(p, g, m, v, decay, kAdamWNoDecay, n, a, nullptr, s);
}

Status AdamWStepTensor(float* p, const float* g, float* m, float* v, int64_t n, bool decay, const AdamWArgs& a,
                       bf16* copy, cudaStream_t s) {
  return LaunchAdamW(p, g, m, v, nullptr, decay ? kAdamWDecay : kAdamWNoDecay, n, a, copy, s);
}

}  // namespace fp8::train::cuda
