// SPDX-License-Identifier: Apache-2.0
// The linear layers' elementwise passes where no cuBLASLt epilogue does them: bias add, the
// residual add of a projection, GELU forward (also fused with the bias) and backward.
// Launchers of train_kernels.h.
#include "worker/train/cuda/train_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

__global__ void AddBiasKernel(bf16* y, const float* b, int64_t m, int64_t n) {
  GRID_STRIDE(idx, m * n) y[idx] = __float2bfloat16(__bfloat162float(y[idx]) + b[idx % n]);
}

__global__ void ResidualAddKernel(const float* res, const bf16* y, const float* b, int64_t m,
                                  int64_t n, float* out) {
  GRID_STRIDE(idx, m * n) out[idx] = res[idx] + __bfloat162float(y[idx]) + b[idx % n];
}

constexpr float kGeluS = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;

__global__ void GeluForwardKernel(const bf16* x, int64_t n, bf16* y) {
  GRID_STRIDE(i, n) {
    const float v = __bfloat162float(x[i]);
    y[i] = __float2bfloat16(0.5f * v * (1.0f + tanhf(kGeluS * (v + kGeluC * v * v * v))));
  }
}

__global__ void GeluBackwardKernel(const bf16* dy, const bf16* x, int64_t n, bf16* dx) {
  GRID_STRIDE(i, n) {
    const float v = __bfloat162float(x[i]);
    const float th = tanhf(kGeluS * (v + kGeluC * v * v * v));
    const float g = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluS * (1.0f + 3.0f * kGeluC * v * v);
    dx[i] = __float2bfloat16(__bfloat162float(dy[i]) * g);
  }
}

__device__ __forceinline__ float Gelu(float v) {
  return 0.5f * v * (1.0f + tanhf(kGeluS * (v + kGeluC * v * v * v)));
}

// Vector twins of the kernels above (n, the row length and every pointer 8-aligned).
__global__ void AddBias8Kernel(bf16* y, const float* b, int64_t m, int64_t n) {
  GRID_STRIDE(q, m * n / 8) {
    float f[8], bb[8];
    Load8(y + q * 8, f);
    Load8(b + (q * 8) % n, bb);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] += bb[k];
    Store8(y + q * 8, f);
  }
}
__global__ void ResidualAdd8Kernel(const float* res, const bf16* y, const float* b, int64_t m,
                                   int64_t n, float* out) {
  GRID_STRIDE(q, m * n / 8) {
    float r[8], f[8], bb[8];
    Load8(res + q * 8, r);
    Load8(y + q * 8, f);
    Load8(b + (q * 8) % n, bb);
#pragma unroll
    for (int k = 0; k < 8; ++k) r[k] = r[k] + f[k] + bb[k];
    Store8(out + q * 8, r);
  }
}
// pre = y + b (rounded to bf16, kept for backward), out = gelu(pre): AddBias then GeluForward
// in one pass, same roundings.
__global__ void BiasGelu8Kernel(bf16* pre, const float* b, int64_t m, int64_t n, bf16* out) {
  GRID_STRIDE(q, m * n / 8) {
    float f[8], bb[8];
    Load8(pre + q * 8, f);
    Load8(b + (q * 8) % n, bb);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = __bfloat162float(__float2bfloat16(f[k] + bb[k]));
    Store8(pre + q * 8, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = Gelu(f[k]);
    Store8(out + q * 8, f);
  }
}
__global__ void GeluForward8Kernel(const bf16* x, int64_t n, bf16* y) {
  GRID_STRIDE(q, n / 8) {
    float f[8];
    Load8(x + q * 8, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = Gelu(f[k]);
    Store8(y + q * 8, f);
  }
}
__global__ void GeluBackward8Kernel(const bf16* dy, const bf16* x, int64_t n, bf16* dx) {
  GRID_STRIDE(q, n / 8) {
    float d[8], v[8];
    Load8(dy + q * 8, d);
    Load8(x + q * 8, v);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float th = tanhf(kGeluS * (v[k] + kGeluC * v[k] * v[k] * v[k]));
      d[k] *= 0.5f * (1.0f + th) + 0.5f * v[k] * (1.0f - th * th) * kGeluS * (1.0f + 3.0f * kGeluC * v[k] * v[k]);
    }
    Store8(dx + q * 8, d);
  }
}

}  // namespace

Status AddBias(bf16* y, const float* b, int64_t m, int64_t n, cudaStream_t s) {
  if (Vec8(n, {y, b})) AddBias8Kernel<<<Blocks(m * n / 8), kThreads, 0, s>>>(y, b, m, n);
  else AddBiasKernel<<<Blocks(m * n), kThreads, 0, s>>>(y, b, m, n);
  LAUNCH_CHECK();
}

Status ResidualAdd(const float* res, const bf16* y, const float* b, int64_t m, int64_t n,
                   float* out, cudaStream_t s) {
  if (Vec8(n, {res, y, b, out})) ResidualAdd8Kernel<<<Blocks(m * n / 8), kThreads, 0, s>>>(res, y, b, m, n, out);
  else ResidualAddKernel<<<Blocks(m * n), kThreads, 0, s>>>(res, y, b, m, n, out);
  LAUNCH_CHECK();
}

Status GeluForward(const bf16* x, int64_t n, bf16* y, cudaStream_t s) {
  if (Vec8(n, {x, y})) GeluForward8Kernel<<<Blocks(n / 8), kThreads, 0, s>>>(x, n, y);
  else GeluForwardKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}

Status BiasGeluForward(bf16* pre, const float* b, int64_t m, int64_t n, bf16* out, cudaStream_t s) {
  if (!Vec8(n, {pre, b, out})) {
    FP8_RETURN_IF_ERROR(AddBias(pre, b, m, n, s));
    return GeluForward(pre, m * n, out, s);
  }
  BiasGelu8Kernel<<<Blocks(m * n / 8), kThreads, 0, s>>>(pre, b, m, n, out);
  LAUNCH_CHECK();
}

Status GeluBackward(const bf16* dy, const bf16* x, int64_t n, bf16* dx, cudaStream_t s) {
  if (Vec8(n, {dy, x, dx})) GeluBackward8Kernel<<<Blocks(n / 8), kThreads, 0, s>>>(dy, x, n, dx);
  else GeluBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(dy, x, n, dx);
  LAUNCH_CHECK();
}

}  // namespace fp8::train::cuda
