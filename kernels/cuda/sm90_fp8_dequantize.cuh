// Kernel: FP8 → bf16/fp32 dequantization for every tile shape (sm_90).
// Launchers: sm90_fp8_dequantize.cu; API: sm90_fp8_dequantize.h.
// x = float(q) * scale_inv in fp32 (exactly the CPU reference), then rounded to the output type.
#pragma once

#include "kernels/cuda/sm90_fp8_common.cuh"

namespace fp8::kernels::cuda {

constexpr int kSm90DequantThreads = 256;
constexpr int kSm90DequantUnroll = 2;

template <typename OutT>
__device__ __forceinline__ void Store16(OutT* dst, const float (&v)[16]);

template <>
__device__ __forceinline__ void Store16<float>(float* dst, const float (&v)[16]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    reinterpret_cast<float4*>(dst)[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
}

template <>
__device__ __forceinline__ void Store16<__nv_bfloat16>(__nv_bfloat16* dst, const float (&v)[16]) {
  uint32_t w[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);  // .x = low half
    w[i] = *reinterpret_cast<const uint32_t*>(&p);
  }
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(w[0], w[1], w[2], w[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

// Each thread turns 16 FP8 bytes (one 16-byte load, never crossing a row: cols % 16 == 0) into
// 16 outputs. Element (r, c) uses scale_inv[(r / tile_rows) * s_row + (c / 128) * s_col]; the
// launcher picks tile_rows/s_row/s_col for 1x128 (either layout), 128x128 and per-tensor.
template <typename OutT, Fp8Format F>
__global__ void __launch_bounds__(kSm90DequantThreads)
    Sm90Fp8DequantizeKernel(const uint8_t* __restrict__ q, const float* __restrict__ scale_inv,
                            int64_t rows, int64_t cols, int64_t tile_rows, int64_t s_row,
                            int64_t s_col, OutT* __restrict__ out) {
  const int64_t n_vec = rows * cols / 16;
  uint4 raw[kSm90DequantUnroll];
  int64_t vi[kSm90DequantUnroll];
#pragma unroll
  for (int u = 0; u < kSm90DequantUnroll; ++u) {
    vi[u] = (static_cast<int64_t>(blockIdx.x) * kSm90DequantUnroll + u) * kSm90DequantThreads +
            threadIdx.x;
    raw[u] = vi[u] < n_vec ? LoadStreaming(q + vi[u] * 16) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int u = 0; u < kSm90DequantUnroll; ++u) {
    if (vi[u] >= n_vec) continue;
    const int64_t e = vi[u] * 16;
    const int64_t r = e / cols;
    const int64_t c = e - r * cols;
    const float s = __ldg(scale_inv + (r / tile_rows) * s_row + (c / 128) * s_col);
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    float v[16];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 lo = Fp8PairToFloat2<F>(w[i] & 0xFFFFu);
      const float2 hi = Fp8PairToFloat2<F>(w[i] >> 16);
      v[4 * i] = __fmul_rn(lo.x, s);
      v[4 * i + 1] = __fmul_rn(lo.y, s);
      v[4 * i + 2] = __fmul_rn(hi.x, s);
      v[4 * i + 3] = __fmul_rn(hi.y, s);
    }
    Store16<OutT>(out + e, v);
  }
}

}  // namespace fp8::kernels::cuda
