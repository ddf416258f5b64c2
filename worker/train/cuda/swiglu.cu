// The SwiGLU gate of the Llama MLP, out = silu(gate)·up, and its backward. Launchers of
// llama_kernels.h. Elementwise: 8 elements per thread with 16-byte accesses where sizes and
// pointers allow (Vec8), one per thread elsewhere.
#include "worker/train/cuda/llama_kernels.h"

#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + __expf(-g)); }

// dgate = dout·up·σ·(1 + g·(1 − σ)), dup = dout·g·σ; both from registers, so dgate/dup may be
// the gate/up buffers themselves.
__device__ __forceinline__ void SwiGluGrad(float d, float g, float u, float& dg, float& du) {
  const float sig = Sigmoid(g);
  du = d * g * sig;
  dg = d * u * sig * (1.0f + g * (1.0f - sig));
}

__global__ void SwiGluForwardKernel(const bf16* gate, const bf16* up, int64_t n, bf16* out) {
  GRID_STRIDE(i, n) {
    const float g = __bfloat162float(gate[i]);
    out[i] = __float2bfloat16(g * Sigmoid(g) * __bfloat162float(up[i]));
  }
}

__global__ void SwiGluForward8Kernel(const bf16* gate, const bf16* up, int64_t n8, bf16* out) {
  GRID_STRIDE(i, n8) {
    float g[8], u[8], o[8];
    Load8(gate + i * 8, g);
    Load8(up + i * 8, u);
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = g[k] * Sigmoid(g[k]) * u[k];
    Store8(out + i * 8, o);
  }
}

__global__ void SwiGluBackwardKernel(const bf16* dout, const bf16* gate, const bf16* up, int64_t n, bf16* dgate,
                                     bf16* dup) {
  GRID_STRIDE(i, n) {
    float dg, du;
    SwiGluGrad(__bfloat162float(dout[i]), __bfloat162float(gate[i]), __bfloat162float(up[i]), dg, du);
    dgate[i] = __float2bfloat16(dg);
    dup[i] = __float2bfloat16(du);
  }
}

__global__ void SwiGluBackward8Kernel(const bf16* dout, const bf16* gate, const bf16* up, int64_t n8, bf16* dgate,
                                      bf16* dup) {
  GRID_STRIDE(i, n8) {
    float d[8], g[8], u[8], dg[8], du[8];
    Load8(dout + i * 8, d);
    Load8(gate + i * 8, g);
    Load8(up + i * 8, u);
#pragma unroll
    for (int k = 0; k < 8; ++k) SwiGluGrad(d[k], g[k], u[k], dg[k], du[k]);
    Store8(dgate + i * 8, dg);
    Store8(dup + i * 8, du);
  }
}

}  // namespace

Status SwiGluForward(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t s) {
  if (Vec8(n, {gate, up, out})) {
    SwiGluForward8Kernel<<<Blocks(n / 8), kThreads, 0, s>>>(gate, up, n / 8, out);
    LAUNCH_CHECK();
  }
  SwiGluForwardKernel<<<Blocks(n), kThreads, 0, s>>>(gate, up, n, out);
  LAUNCH_CHECK();
}

Status SwiGluBackward(const bf16* dout, const bf16* gate, const bf16* up, int64_t n, bf16* dgate, bf16* dup,
                      cudaStream_t s) {
  if (Vec8(n, {dout, gate, up, dgate, dup})) {
    SwiGluBackward8Kernel<<<Blocks(n / 8), kThreads, 0, s>>>(dout, gate, up, n / 8, dgate, dup);
    LAUNCH_CHECK();
  }
  SwiGluBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(dout, gate, up, n, dgate, dup);
  LAUNCH_CHECK();
}

}  // namespace fp8::train::cuda
