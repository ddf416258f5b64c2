// SPDX-License-Identifier: Apache-2.0
// Token and position embeddings: the forward gathers (GPT-2's with positions, the Llama
// family's without) and the position gradient (the token gradient is token_groups.cu).
// Launchers of train_kernels.h.
#include "worker/train/cuda/train_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

__global__ void EmbeddingForwardKernel(const int32_t* tok, const float* wte, const float* wpe,
                                       int64_t n, int64_t t, int64_t c, float* out) {
  GRID_STRIDE(idx, n * c) {
    const int64_t i = idx / c, j = idx % c;
    out[idx] = wte[static_cast<int64_t>(tok[i]) * c + j] + wpe[(i % t) * c + j];
  }
}

__global__ void TokenEmbeddingForwardKernel(const int32_t* tok, const float* wte, int64_t n, int64_t c, float* out) {
  GRID_STRIDE(idx, n * c) {
    const int64_t i = idx / c, j = idx % c;
    out[idx] = wte[static_cast<int64_t>(tok[i]) * c + j];
  }
}

__global__ void EmbeddingWpeBackwardKernel(const float* dout, int64_t n, int64_t t, int64_t c,
                                           float* dwpe) {
  GRID_STRIDE(idx, t * c) {
    const int64_t p = idx / c, j = idx % c;
    float s = 0;
    for (int64_t r = p; r < n; r += t) s += dout[r * c + j];
    dwpe[idx] += s;
  }
}

}  // namespace

Status EmbeddingForward(const int32_t* tokens, const float* wte, const float* wpe, int64_t n,
                        int64_t t, int64_t c, float* out, cudaStream_t s) {
  EmbeddingForwardKernel<<<Blocks(n * c), kThreads, 0, s>>>(tokens, wte, wpe, n, t, c, out);
  LAUNCH_CHECK();
}

Status TokenEmbeddingForward(const int32_t* tokens, const float* wte, int64_t n, int64_t c, float* out,
                             cudaStream_t s) {
  TokenEmbeddingForwardKernel<<<Blocks(n * c), kThreads, 0, s>>>(tokens, wte, n, c, out);
  LAUNCH_CHECK();
}

Status EmbeddingWpeBackward(const float* dout, int64_t n, int64_t t, int64_t c, float* dwpe, cudaStream_t s) {
  EmbeddingWpeBackwardKernel<<<Blocks(t * c), kThreads, 0, s>>>(dout, n, t, c, dwpe);
  LAUNCH_CHECK();
}

}  // namespace fp8::train::cuda
