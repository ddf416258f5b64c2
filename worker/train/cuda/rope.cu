// Rotary position embedding (transformers' rotate_half layout), in place, forward and backward.
// Launchers of llama_kernels.h. A thread owns one (row, head, i) pair: elements i and i + half of
// the head, rotated by the angle of position row % t and frequency i.
#include "worker/train/cuda/llama_kernels.h"

#include <cstdint>
#include <string>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

// sign +1: (a, b) → (a·cos − b·sin, b·cos + a·sin); sign −1: the inverse rotation (its transpose),
// which is what the gradient goes through.
__global__ void RopeKernel(bf16* x, int64_t n, int64_t t, int64_t heads, int64_t half, int64_t ld, const float* cos,
                           const float* sin, float sign) {
  GRID_STRIDE(idx, n * heads * half) {
    const int64_t i = idx % half, h = (idx / half) % heads, row = idx / (half * heads);
    const int64_t tab = (row % t) * half + i;
    const float c = cos[tab], s = sign * sin[tab];
    bf16* a = x + row * ld + h * 2 * half + i;
    const float av = __bfloat162float(a[0]), bv = __bfloat162float(a[half]);
    a[0] = __float2bfloat16(av * c - bv * s);
    a[half] = __float2bfloat16(bv * c + av * s);
  }
}

Status Rope(bf16* x, int64_t n, int64_t t, int64_t heads, int64_t head_dim, int64_t ld, const float* cos,
            const float* sin, float sign, cudaStream_t s) {
  if (head_dim % 2 != 0 || t < 1 || heads * head_dim > ld)
    return InvalidArgumentError("rope: head_dim " + std::to_string(head_dim) + " odd, t < 1 or heads·head_dim > ld " +
                                std::to_string(ld) + " (" __FILE__ ")");
  const int64_t half = head_dim / 2;
  RopeKernel<<<Blocks(n * heads * half), kThreads, 0, s>>>(x, n, t, heads, half, ld, cos, sin, sign);
  LAUNCH_CHECK();
}

}  // namespace

Status RopeForward(bf16* x, int64_t n, int64_t t, int64_t heads, int64_t head_dim, int64_t ld, const float* cos,
                   const float* sin, cudaStream_t s) {
  return Rope(x, n, t, heads, head_dim, ld, cos, sin, 1.0f, s);
}

Status RopeBackward(bf16* dx, int64_t n, int64_t t, int64_t heads, int64_t head_dim, int64_t ld, const float* cos,
                    const float* sin, cudaStream_t s) {
  return Rope(dx, n, t, heads, head_dim, ld, cos, sin, -1.0f, s);
}

}  // namespace fp8::train::cuda
