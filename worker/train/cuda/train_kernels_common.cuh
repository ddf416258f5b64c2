// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the trainer's non-GEMM kernels (embedding.cu, layernorm.cu, bias_gelu.cu,
// elementwise.cu, attention_plain.cu, cross_entropy.cu, adamw.cu, delayed_scaling.cu): launch
// geometry, warp and block reductions, 16-byte loads and stores, and the launch check. They are
// straightforward, bandwidth-bound kernels: the GEMMs (cuBLAS / cuBLASLt) carry the FLOPs; these
// aim at coalesced access and few passes, not peak.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/sm90_cuda_check.h"

namespace fp8::train::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned Blocks(int64_t n, int per_block = kThreads) {
  int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 30) ? (1 << 30) : b));
}

// Warp- and block-wide reductions (blockDim.x a multiple of 32, ≤ 1024; every thread gets the
// result), in a fixed order: the same bits on every run.
struct SumOp {
  static constexpr float kIdentity = 0.0f;
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  static constexpr float kIdentity = -FLT_MAX;
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
template <class Op>
__device__ __forceinline__ float WarpReduce(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <class Op>
__device__ inline float BlockReduce(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = WarpReduce<Op>(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : Op::kIdentity;
  return WarpReduce<Op>(v);
}
__device__ __forceinline__ float WarpSum(float v) { return WarpReduce<SumOp>(v); }
__device__ __forceinline__ float WarpMax(float v) { return WarpReduce<MaxOp>(v); }
__device__ inline float BlockSum(float v, float* sh) { return BlockReduce<SumOp>(v, sh); }
__device__ inline float BlockMax(float v, float* sh) { return BlockReduce<MaxOp>(v, sh); }

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// 16-byte accesses (8 bf16 / 2×4 fp32 per thread) for the elementwise passes: scalar 2-byte
// accesses and a 64-bit modulo per element left them at under half the memory bandwidth
// (bench_trainer_cuda --breakdown). The launchers use them when sizes and pointers allow.
__device__ __forceinline__ void Load8(const bf16* p, float (&f)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 t = __bfloat1622float2(h[k]);
    f[2 * k] = t.x, f[2 * k + 1] = t.y;
  }
}
// 8 floats rounded to bf16 as the 16 bytes Store8 writes (element 0 in the low half of .x).
__device__ __forceinline__ uint4 PackBf16x8(const float (&f)[8]) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
  return u;
}
__device__ __forceinline__ void Store8(bf16* p, const float (&f)[8]) { *reinterpret_cast<uint4*>(p) = PackBf16x8(f); }
__device__ __forceinline__ void Load8(const float* p, float (&f)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void Store8(float* p, const float (&f)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}
inline bool Vec8(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % 8) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  return true;
}

}  // namespace
}  // namespace fp8::train::cuda

// Returns from a launcher: the launch's error, or OK.
#define LAUNCH_CHECK() \
  FP8_RETURN_IF_LAUNCH_FAILED(); \
  return OkStatus()
