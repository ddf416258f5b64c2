// SPDX-License-Identifier: Apache-2.0
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

// The same rotation, 8 pairs per thread with 16-byte accesses (the scalar kernel's 2-byte
// accesses and per-element 64-bit index arithmetic held it far under the memory bandwidth):
// thread (row, head, octet) rotates elements 8·octet .. + 7 against their partners half further.
// blockIdx.y walks the rows, so only the (head, octet) split divides. Same arithmetic per element.
__global__ void Rope8Kernel(bf16* x, int64_t n, int64_t t, int64_t heads, int64_t half, int64_t ld, const float* cos,
                            const float* sin, float sign) {
  const int64_t octets = half / 8, per_row = heads * octets;
  for (int64_t row = blockIdx.y; row < n; row += gridDim.y)
    for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < per_row; k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t h = k / octets, i = (k % octets) * 8;
      const float* ct = cos + (row % t) * half + i;
      const float* st = sin + (row % t) * half + i;
      bf16* a = x + row * ld + h * 2 * half + i;
      float av[8], bv[8], c[8], sn[8];
      Load8(a, av);
      Load8(a + half, bv);
      Load8(ct, c);
      Load8(st, sn);
      float ao[8], bo[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float se = sign * sn[e];
        ao[e] = av[e] * c[e] - bv[e] * se;
        bo[e] = bv[e] * c[e] + av[e] * se;
      }
      Store8(a, ao);
      Store8(a + half, bo);
    }
}

Status Rope(bf16* x, int64_t n, int64_t t, int64_t heads, int64_t head_dim, int64_t ld, const float* cos,
            const float* sin, float sign, cudaStream_t s) {
  if (head_dim % 2 != 0 || t < 1 || heads * head_dim > ld)
    return InvalidArgumentError("rope: head_dim " + std::to_string(head_dim) + " odd, t < 1 or heads·head_dim > ld " +
                                std::to_string(ld) + " (" __FILE__ ")");
  const int64_t half = head_dim / 2;
  if (half % 8 == 0 && ld % 8 == 0 && Vec8(8, {x, cos, sin})) {
    const dim3 grid(Blocks(heads * half / 8), static_cast<unsigned>(n < 65535 ? (n > 0 ? n : 1) : 65535));
    Rope8Kernel<<<grid, kThreads, 0, s>>>(x, n, t, heads, half, ld, cos, sin, sign);
    LAUNCH_CHECK();
  }
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
