// SPDX-License-Identifier: Apache-2.0
// The head's fused softmax cross-entropy and the loss sum.
// Launchers of train_kernels.h.
#include "worker/train/cuda/train_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

// One block per row: one read pass with a running max and rescaled sum (16-byte loads when rows
// are 16-byte aligned), then the gradient pass.
__global__ void CrossEntropyKernel(bf16* logits, const int32_t* targets, int64_t v, int64_t ld,
                                   float grad_scale, bool write_grad, bool vec, float* losses) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x;
  bf16* x = logits + row * ld;
  const int64_t v8 = vec ? v / 8 : 0;  // vec: rows 16-byte aligned
  float mx = -FLT_MAX, sum = 0;
  for (int64_t q = threadIdx.x; q < v8; q += blockDim.x) {
    float f[8];
    Load8(x + q * 8, f);
    float lm = f[0];
#pragma unroll
    for (int k = 1; k < 8; ++k) lm = fmaxf(lm, f[k]);
    if (lm > mx) {
      sum *= __expf(mx - lm);
      mx = lm;
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) sum += __expf(f[k] - mx);
  }
  for (int64_t j = v8 * 8 + threadIdx.x; j < v; j += blockDim.x) {
    const float f = __bfloat162float(x[j]);
    if (f > mx) {
      sum *= __expf(mx - f);
      mx = f;
    }
    sum += __expf(f - mx);
  }
  const float gmx = BlockMax(mx, sh);
  sum = BlockSum(sum * __expf(mx - gmx), sh);
  const int32_t tgt = targets[row];
  const float xt = __bfloat162float(x[tgt]);
  __syncthreads();  // everyone has read x[tgt] before it may be overwritten
  if (threadIdx.x == 0) losses[row] = logf(sum) + gmx - xt;
  if (!write_grad) return;
  const float inv = 1.0f / sum;
  for (int64_t q = threadIdx.x; q < v8; q += blockDim.x) {
    float f[8];
    Load8(x + q * 8, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = (__expf(f[k] - gmx) * inv - (q * 8 + k == tgt ? 1.0f : 0.0f)) * grad_scale;
    Store8(x + q * 8, f);
  }
  for (int64_t j = v8 * 8 + threadIdx.x; j < v; j += blockDim.x) {
    const float pj = __expf(__bfloat162float(x[j]) - gmx) * inv;
    x[j] = __float2bfloat16((pj - (j == tgt ? 1.0f : 0.0f)) * grad_scale);
  }
}

__global__ void SumToDoubleKernel(const float* x, int64_t n, double* out) {
  __shared__ double sh[1024];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

}  // namespace

Status CrossEntropy(bf16* logits, const int32_t* targets, int64_t n, int64_t v, int64_t ld,
                    float grad_scale, bool write_grad, float* losses, cudaStream_t s) {
  const bool vec = Vec8(ld, {logits});
  CrossEntropyKernel<<<static_cast<unsigned>(n), 512, 0, s>>>(logits, targets, v, ld, grad_scale, write_grad, vec, losses);
  LAUNCH_CHECK();
}

Status SumToDouble(const float* x, int64_t n, double* out, cudaStream_t s) {
  SumToDoubleKernel<<<1, 1024, 0, s>>>(x, n, out);
  LAUNCH_CHECK();
}

}  // namespace fp8::train::cuda
