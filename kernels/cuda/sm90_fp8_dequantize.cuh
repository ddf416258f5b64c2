// SPDX-License-Identifier: Apache-2.0
// Kernel: FP8 → bf16/fp32 dequantization for every tile shape (sm_90).
// Launchers: sm90_fp8_dequantize.cu; API: sm90_fp8_dequantize.h.
// x = float(q) * scale_inv in fp32 (exactly the CPU reference), then rounded to the output type.
#pragma once

#include "kernels/cuda/sm90_fp8_common.cuh"

namespace fp8::kernels::cuda {

constexpr int kSm90DequantThreads = 256;
constexpr int kSm90DequantUnroll = 4;  // units in flight per thread

// One "unit" = the FP8 bytes that make one 16-byte output store: 8 for bf16, 4 for fp32.
// Consecutive threads take consecutive units, so both the loads and the 16-byte stores of a
// warp are contiguous.
template <typename OutT>
struct DequantUnit;
template <>
struct DequantUnit<__nv_bfloat16> {
  static constexpr int kElems = 8;
  using Load = uint2;
  __device__ static uint4 Pack(const float (&v)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 p = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);  // .x = low half
      w[i] = *reinterpret_cast<const uint32_t*>(&p);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};
template <>
struct DequantUnit<float> {
  static constexpr int kElems = 4;
  using Load = uint32_t;
  __device__ static uint4 Pack(const float (&v)[4]) {
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                      __float_as_uint(v[3]));
  }
};

__device__ __forceinline__ void Words(const uint2& v, uint32_t (&w)[2]) { w[0] = v.x; w[1] = v.y; }
__device__ __forceinline__ void Words(const uint32_t& v, uint32_t (&w)[1]) { w[0] = v; }

// Element (r, c) uses scale_inv[(r >> tile_rows_log2) * s_row + (c / 128) * s_col]; the
// launcher picks them for 1x128 (either layout), 128x128 and per-tensor. All loads (data and
// scale) are issued before any use and the stores are predicated.
template <typename OutT, Fp8Format F>
__global__ void __launch_bounds__(kSm90DequantThreads)
    Sm90Fp8DequantizeKernel(const uint8_t* __restrict__ q, const float* __restrict__ scale_inv,
                            int64_t rows, int64_t cols, int tile_rows_log2, int64_t s_row,
                            int64_t s_col, FastDiv units_per_row, OutT* __restrict__ out) {
  using Unit = DequantUnit<OutT>;
  constexpr int kN = Unit::kElems;
  const int64_t n_units = rows * cols / kN;  // < 2^31 (launcher): FastDiv applies
  typename Unit::Load raw[kSm90DequantUnroll];
  float scale[kSm90DequantUnroll];
  int64_t ui[kSm90DequantUnroll];
#pragma unroll
  for (int u = 0; u < kSm90DequantUnroll; ++u) {
    ui[u] = (static_cast<int64_t>(blockIdx.x) * kSm90DequantUnroll + u) * kSm90DequantThreads +
            threadIdx.x;
    const bool valid = ui[u] < n_units;
    const uint32_t r = units_per_row.Div(static_cast<uint32_t>(ui[u]));
    const int64_t c = (ui[u] - int64_t{r} * units_per_row.d) * kN;
    raw[u] = valid ? __ldcs(reinterpret_cast<const typename Unit::Load*>(q) + ui[u])
                   : typename Unit::Load{};
    scale[u] = valid ? __ldg(scale_inv + (int64_t{r} >> tile_rows_log2) * s_row + (c >> 7) * s_col) : 0.0f;
  }
#pragma unroll
  for (int u = 0; u < kSm90DequantUnroll; ++u) {
    uint32_t w[kN / 4];
    Words(raw[u], w);
    float v[kN];
#pragma unroll
    for (int i = 0; i < kN / 4; ++i) {
      const float2 lo = Fp8PairToFloat2<F>(w[i] & 0xFFFFu);
      const float2 hi = Fp8PairToFloat2<F>(w[i] >> 16);
      v[4 * i] = __fmul_rn(lo.x, scale[u]);
      v[4 * i + 1] = __fmul_rn(lo.y, scale[u]);
      v[4 * i + 2] = __fmul_rn(hi.x, scale[u]);
      v[4 * i + 3] = __fmul_rn(hi.y, scale[u]);
    }
    if (ui[u] < n_units) reinterpret_cast<uint4*>(out)[ui[u]] = Unit::Pack(v);
  }
}

}  // namespace fp8::kernels::cuda
