// SPDX-License-Identifier: Apache-2.0
// The plain attention path (head dims the fused kernels do not take): head permutes and the
// causal softmax over materialized T×T scores.
// Launchers of train_kernels.h.
#include "worker/train/cuda/train_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

// dir 0: qkv [B,T,3,H,hd] → q/k/v [B,H,T,hd]; dir 1: the reverse.
template <int kDir>
__global__ void QkvPermuteKernel(bf16* qkv, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* q,
                                 bf16* k, bf16* v) {
  const int64_t c = h * hd;
  GRID_STRIDE(idx, b * t * 3 * c) {
    const int64_t bt = idx / (3 * c), rem = idx % (3 * c);
    const int64_t which = rem / c, hh = (rem % c) / hd, d = rem % hd;
    const int64_t bb = bt / t, tt = bt % t;
    bf16* dst = which == 0 ? q : (which == 1 ? k : v);
    const int64_t o = ((bb * h + hh) * t + tt) * hd + d;
    if (kDir == 0) dst[o] = qkv[idx];
    else qkv[idx] = dst[o];
  }
}

// dir 0: heads [B,H,T,hd] → rows [B,T,H·hd]; dir 1: the reverse.
template <int kDir>
__global__ void HeadsPermuteKernel(const bf16* in, int64_t b, int64_t t, int64_t h, int64_t hd,
                                   bf16* out) {
  const int64_t c = h * hd;
  GRID_STRIDE(idx, b * t * c) {
    const int64_t bt = idx / c, hh = (idx % c) / hd, d = idx % hd;
    const int64_t bb = bt / t, tt = bt % t;
    const int64_t o = ((bb * h + hh) * t + tt) * hd + d;
    if (kDir == 0) out[idx] = in[o];
    else out[o] = in[idx];
  }
}

// One warp per row of scores.
__global__ void CausalSoftmaxForwardKernel(const float* s, int64_t rows, int64_t t, bf16* p) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t i = row % t;
  const float* sr = s + row * t;
  bf16* pr = p + row * t;
  float mx = -FLT_MAX;
  for (int64_t j = lane; j <= i; j += 32) mx = fmaxf(mx, sr[j]);
  mx = WarpMax(mx);
  float sum = 0;
  for (int64_t j = lane; j <= i; j += 32) sum += __expf(sr[j] - mx);
  const float inv = 1.0f / WarpSum(sum);
  for (int64_t j = lane; j < t; j += 32)
    pr[j] = __float2bfloat16(j <= i ? __expf(sr[j] - mx) * inv : 0.0f);
}

__global__ void CausalSoftmaxBackwardKernel(const bf16* p, const bf16* dp, int64_t rows, int64_t t,
                                            bf16* ds) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t i = row % t;
  const bf16* pr = p + row * t;
  const bf16* dr = dp + row * t;
  float dot = 0;
  for (int64_t j = lane; j <= i; j += 32) dot += __bfloat162float(pr[j]) * __bfloat162float(dr[j]);
  dot = WarpSum(dot);
  bf16* o = ds + row * t;
  for (int64_t j = lane; j < t; j += 32)
    o[j] = __float2bfloat16(j <= i ? __bfloat162float(pr[j]) * (__bfloat162float(dr[j]) - dot) : 0.0f);
}

}  // namespace

Status SplitHeads(const bf16* qkv, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* q, bf16* k,
                  bf16* v, cudaStream_t s) {
  QkvPermuteKernel<0><<<Blocks(b * t * 3 * h * hd), kThreads, 0, s>>>(const_cast<bf16*>(qkv), b, t, h, hd, q, k, v);
  LAUNCH_CHECK();
}
Status MergeQkv(const bf16* dq, const bf16* dk, const bf16* dv, int64_t b, int64_t t, int64_t h,
                int64_t hd, bf16* dqkv, cudaStream_t s) {
  QkvPermuteKernel<1><<<Blocks(b * t * 3 * h * hd), kThreads, 0, s>>>(dqkv, b, t, h, hd, const_cast<bf16*>(dq),
                                                                     const_cast<bf16*>(dk), const_cast<bf16*>(dv));
  LAUNCH_CHECK();
}
Status HeadsToRows(const bf16* y, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* out,
                   cudaStream_t s) {
  HeadsPermuteKernel<0><<<Blocks(b * t * h * hd), kThreads, 0, s>>>(y, b, t, h, hd, out);
  LAUNCH_CHECK();
}
Status RowsToHeads(const bf16* x, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* out,
                   cudaStream_t s) {
  HeadsPermuteKernel<1><<<Blocks(b * t * h * hd), kThreads, 0, s>>>(x, b, t, h, hd, out);
  LAUNCH_CHECK();
}

Status CausalSoftmaxForward(const float* scores, int64_t rows, int64_t t, bf16* probs,
                            cudaStream_t s) {
  CausalSoftmaxForwardKernel<<<Blocks(rows * 32), kThreads, 0, s>>>(scores, rows, t, probs);
  LAUNCH_CHECK();
}
Status CausalSoftmaxBackward(const bf16* probs, const bf16* dprobs, int64_t rows, int64_t t,
                             bf16* ds, cudaStream_t s) {
  CausalSoftmaxBackwardKernel<<<Blocks(rows * 32), kThreads, 0, s>>>(probs, dprobs, rows, t, ds);
  LAUNCH_CHECK();
}

}  // namespace fp8::train::cuda
