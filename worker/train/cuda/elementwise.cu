// SPDX-License-Identifier: Apache-2.0
// Elementwise passes over whole tensors: casts, accumulate, scale, 1-byte transposes (the
// fp8-tensorwise operands) and the benchmarks' initializers.
// Launchers of train_kernels.h.
#include "worker/train/cuda/train_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

__global__ void CastF32ToBf16x8Kernel(const float* x, int64_t n, bf16* y) {
  GRID_STRIDE(q, n / 8) {
    float f[8];
    Load8(x + q * 8, f);
    Store8(y + q * 8, f);
  }
}
__global__ void Accumulate8Kernel(const float* x, int64_t n, float* y) {
  GRID_STRIDE(q, n / 8) {
    float a[8], b[8];
    Load8(x + q * 8, a);
    Load8(y + q * 8, b);
#pragma unroll
    for (int k = 0; k < 8; ++k) b[k] += a[k];
    Store8(y + q * 8, b);
  }
}

__global__ void CastF32ToBf16Kernel(const float* x, int64_t n, bf16* y) {
  GRID_STRIDE(i, n) y[i] = __float2bfloat16(x[i]);
}
__global__ void CastBf16ToF32Kernel(const bf16* x, int64_t n, float* y) {
  GRID_STRIDE(i, n) y[i] = __bfloat162float(x[i]);
}
__global__ void AccumulateKernel(const float* x, int64_t n, float* y) {
  GRID_STRIDE(i, n) y[i] += x[i];
}
__global__ void AccumulateBf16Kernel(const bf16* x, int64_t n, bf16* y) {
  GRID_STRIDE(i, n) y[i] = __float2bfloat16(__bfloat162float(y[i]) + __bfloat162float(x[i]));
}
__global__ void ScaleKernel(float* x, int64_t n, float f) {
  GRID_STRIDE(i, n) x[i] *= f;
}

template <typename T>
__global__ void TransposeKernel(const T* in, int64_t rows, int64_t cols, int64_t ld_in, T* out,
                                int64_t ld_out) {
  __shared__ T tile[32][33];
  const int64_t c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = in[r * ld_in + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out[c * ld_out + r] = tile[threadIdx.x][k];
  }
}

template <typename T>
Status LaunchTranspose(const T* in, int64_t rows, int64_t cols, int64_t ld_in, T* out,
                       int64_t ld_out, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  TransposeKernel<T><<<grid, dim3(32, 8), 0, s>>>(in, rows, cols, ld_in, out, ld_out);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

__device__ __forceinline__ uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__global__ void InitNormalKernel(float* x, int64_t n, uint64_t seed, float sd) {
  GRID_STRIDE(i, n) {
    const uint64_t a = Mix(seed ^ Mix(2 * static_cast<uint64_t>(i))), b = Mix(seed ^ Mix(2 * static_cast<uint64_t>(i) + 1));
    const float u1 = (static_cast<float>(a >> 40) + 0.5f) * 0x1.0p-24f, u2 = (static_cast<float>(b >> 40) + 0.5f) * 0x1.0p-24f;
    x[i] = sd * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}
__global__ void FillKernel(float* x, int64_t n, float v) {
  GRID_STRIDE(i, n) x[i] = v;
}

}  // namespace

Status CastF32ToBf16(const float* x, int64_t n, bf16* y, cudaStream_t s) {
  if (Vec8(n, {x, y})) CastF32ToBf16x8Kernel<<<Blocks(n / 8), kThreads, 0, s>>>(x, n, y);
  else CastF32ToBf16Kernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}
Status CastBf16ToF32(const bf16* x, int64_t n, float* y, cudaStream_t s) {
  CastBf16ToF32Kernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}
Status Accumulate(const float* x, int64_t n, float* y, cudaStream_t s) {
  if (Vec8(n, {x, y})) Accumulate8Kernel<<<Blocks(n / 8), kThreads, 0, s>>>(x, n, y);
  else AccumulateKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}
Status AccumulateBf16(const bf16* x, int64_t n, bf16* y, cudaStream_t s) {
  AccumulateBf16Kernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}

Status Scale(float* x, int64_t n, float factor, cudaStream_t s) {
  ScaleKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, factor);
  LAUNCH_CHECK();
}

Status TransposeU8(const uint8_t* in, int64_t rows, int64_t cols, int64_t ld_in, uint8_t* out,
                   int64_t ld_out, cudaStream_t s) {
  return LaunchTranspose<uint8_t>(in, rows, cols, ld_in, out, ld_out, s);
}

Status InitNormal(float* x, int64_t n, uint64_t seed, float stddev, cudaStream_t s) {
  InitNormalKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, seed, stddev);
  LAUNCH_CHECK();
}
Status Fill(float* x, int64_t n, float value, cudaStream_t s) {
  FillKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, value);
  LAUNCH_CHECK();
}

}  // namespace fp8::train::cuda
