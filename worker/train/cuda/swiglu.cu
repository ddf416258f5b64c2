// SPDX-License-Identifier: Apache-2.0
// The SwiGLU gate of the Llama MLP, out = silu(gate)·up, and its backward. Launchers of
// llama_kernels.h. Elementwise over rows (the flat forms are one row): 8 elements per thread with
// 16-byte accesses where sizes, pitch and pointers allow (Vec8), one per thread elsewhere.
#include "worker/train/cuda/llama_kernels.h"

#include <cstdint>
#include <string>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/fused_block_cast.cuh"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + __expf(-g)); }
// silu(g)·u: every forward path computes it here, so the fused cast sees SwiGluForward's bits.
__device__ __forceinline__ float SwiGlu(float g, float u) { return g * Sigmoid(g) * u; }

// dgate = dout·up·σ·(1 + g·(1 − σ)), dup = dout·g·σ; both from registers, so dgate/dup may be
// the gate/up buffers themselves.
__device__ __forceinline__ void SwiGluGrad(float d, float g, float u, float& dg, float& du) {
  const float sig = Sigmoid(g);
  du = d * g * sig;
  dg = d * u * sig * (1.0f + g * (1.0f - sig));
}

// Rows of [rows, cols] at pitch ld for gate/up (dgate/dup) and cols for out (dout): blockIdx.y
// walks the rows, x-threads the columns, kVec8 elements each (8: 16-byte accesses, when
// cols, ld and the pointers allow). No per-element division.
template <int kVec>
__global__ void SwiGluForwardRowsKernel(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int64_t ld, bf16* out) {
  const int64_t vecs = cols / kVec;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < vecs; j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t in = r * ld + j * kVec, o = r * cols + j * kVec;
      if constexpr (kVec == 8) {
        float g[8], u[8];
        Load8(gate + in, g);
        Load8(up + in, u);
#pragma unroll
        for (int k = 0; k < 8; ++k) g[k] = SwiGlu(g[k], u[k]);
        Store8(out + o, g);
      } else {
        out[o] = __float2bfloat16(SwiGlu(__bfloat162float(gate[in]), __bfloat162float(up[in])));
      }
    }
}

template <int kVec>
__global__ void SwiGluBackwardRowsKernel(const bf16* dout, const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int64_t ld,
                                         bf16* dgate, bf16* dup) {
  const int64_t vecs = cols / kVec;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < vecs; j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t in = r * ld + j * kVec, o = r * cols + j * kVec;
      if constexpr (kVec == 8) {
        float d[8], g[8], u[8], dg[8], du[8];
        Load8(dout + o, d);
        Load8(gate + in, g);
        Load8(up + in, u);
#pragma unroll
        for (int k = 0; k < 8; ++k) SwiGluGrad(d[k], g[k], u[k], dg[k], du[k]);
        Store8(dgate + in, dg);
        Store8(dup + in, du);
      } else {
        float dg, du;
        SwiGluGrad(__bfloat162float(dout[o]), __bfloat162float(gate[in]), __bfloat162float(up[in]), dg, du);
        dgate[in] = __float2bfloat16(dg);
        dup[in] = __float2bfloat16(du);
      }
    }
}

dim3 RowsGrid(int64_t rows, int64_t vecs) {
  return dim3(Blocks(vecs), static_cast<unsigned>(rows < 65535 ? rows : 65535));
}

// silu(gate)·up of 8 rows × 8 columns as bf16 words, for the fused cast.
struct SwiGluTileRows {
  const bf16* gate;
  const bf16* up;
  int64_t rows, cols, ld;
  __device__ __forceinline__ void operator()(int64_t row, int64_t col, uint4 (&raw)[8]) const {
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const int64_t r = row + p;
      if (r < rows && col < cols) {
        float g[8], u[8];
        Load8(gate + r * ld + col, g);
        Load8(up + r * ld + col, u);
#pragma unroll
        for (int k = 0; k < 8; ++k) g[k] = SwiGlu(g[k], u[k]);
        raw[p] = PackBf16x8(g);
      } else {
        raw[p] = make_uint4(0, 0, 0, 0);
      }
    }
  }
};

Status CheckRows(int64_t rows, int64_t cols, int64_t ld) {
  if (rows < 0 || cols < 0 || ld < cols)
    return InvalidArgumentError("swiglu: rows " + std::to_string(rows) + ", cols " + std::to_string(cols) + ", pitch " + std::to_string(ld) +
                                " (pitch < cols) (" __FILE__ ")");
  return OkStatus();
}

}  // namespace

Status SwiGluForwardRows(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int64_t ld, bf16* out, cudaStream_t s) {
  FP8_RETURN_IF_ERROR(CheckRows(rows, cols, ld));
  if (rows == 0 || cols == 0) return OkStatus();
  if (cols % 8 == 0 && ld % 8 == 0 && Vec8(8, {gate, up, out})) {
    SwiGluForwardRowsKernel<8><<<RowsGrid(rows, cols / 8), kThreads, 0, s>>>(gate, up, rows, cols, ld, out);
    LAUNCH_CHECK();
  }
  SwiGluForwardRowsKernel<1><<<RowsGrid(rows, cols), kThreads, 0, s>>>(gate, up, rows, cols, ld, out);
  LAUNCH_CHECK();
}

Status SwiGluBackwardRows(const bf16* dout, const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int64_t ld, bf16* dgate,
                          bf16* dup, cudaStream_t s) {
  FP8_RETURN_IF_ERROR(CheckRows(rows, cols, ld));
  if (rows == 0 || cols == 0) return OkStatus();
  if (cols % 8 == 0 && ld % 8 == 0 && Vec8(8, {dout, gate, up, dgate, dup})) {
    SwiGluBackwardRowsKernel<8><<<RowsGrid(rows, cols / 8), kThreads, 0, s>>>(dout, gate, up, rows, cols, ld, dgate, dup);
    LAUNCH_CHECK();
  }
  SwiGluBackwardRowsKernel<1><<<RowsGrid(rows, cols), kThreads, 0, s>>>(dout, gate, up, rows, cols, ld, dgate, dup);
  LAUNCH_CHECK();
}

Status SwiGluForward(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t s) {
  return SwiGluForwardRows(gate, up, 1, n, n, out, s);
}

Status SwiGluBackward(const bf16* dout, const bf16* gate, const bf16* up, int64_t n, bf16* dgate, bf16* dup, cudaStream_t s) {
  return SwiGluBackwardRows(dout, gate, up, 1, n, n, dgate, dup, s);
}

Status SwiGluCastBlockwise(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int64_t ld, kernels::ScaleFormat sf,
                           const Fp8BlockOperand& op, unsigned int* amax_bits, cudaStream_t s) {
  FP8_RETURN_IF_ERROR(CheckRows(rows, cols, ld));
  if (reinterpret_cast<uintptr_t>(gate) % 16 != 0 || reinterpret_cast<uintptr_t>(up) % 16 != 0 || ld % 8 != 0)
    return InvalidArgumentError("SwiGluCastBlockwise: gate and up must be 16-byte aligned, their pitch a multiple of 8");
  return LaunchFusedBlockCast(rows, cols, sf, op, amax_bits, SwiGluTileRows{gate, up, rows, cols, ld}, s);
}

}  // namespace fp8::train::cuda
