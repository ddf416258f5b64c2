// Kernel: fused 1x128 quantization of X and of Xᵀ in one pass over X (sm_90).
// Launcher: sm90_fp8_quantize_transpose.cu; API: sm90_fp8_quantize_transpose.h.
//
// One CTA per 128x128 tile of X, X read once with 16-byte loads. Thread (rg, cg) holds the
// kElems columns of group cg for kRowsPerThread consecutive rows of row group rg. Rows (the 1x128
// groups of X) are quantized from registers with a team-of-lanes amax. Columns (the 1x128 groups
// of Xᵀ): each thread's column maxima meet across row groups by a shuffle and a 4 KB table, then
// each thread quantizes its own kRowsPerThread values of each column — consecutive bytes of a row
// of Xᵀ — and stores them with one 8/16-byte store into a byte tile (16-byte chunks XOR-swizzled
// by (row/8)%8), which leaves as 16-byte row segments. An earlier version staged the BF16 tile
// in shared memory and read each column back element by element (55% of copy bandwidth).
#pragma once

#include "kernels/cuda/sm90_fp8_common.cuh"

namespace fp8::kernels::cuda {

constexpr int kSm90TransposeThreads = 256;

template <typename T, Fp8Format F>
__global__ void __launch_bounds__(kSm90TransposeThreads)
    Sm90Fp8Quantize1x128TransposeKernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                                        bool ue8m0, uint8_t* __restrict__ q,
                                        float* __restrict__ scale_inv, int64_t s_row_stride,
                                        int64_t s_grp_stride, uint8_t* __restrict__ qt,
                                        float* __restrict__ scale_inv_t, int64_t st_row_stride,
                                        int64_t st_grp_stride) {
  constexpr int kElems = InVec<T>::kElems;                              // 8 (bf16) / 4 (fp32)
  constexpr int kThreadsPerRow = 128 / kElems;                          // a row's team
  constexpr int kRowGroups = kSm90TransposeThreads / kThreadsPerRow;
  constexpr int kRowsPerThread = 128 / kRowGroups;                      // 8 / 16
  constexpr int kWarps = kSm90TransposeThreads / 32;
  static_assert(kRowsPerThread == 8 || kRowsPerThread == 16, "one 8- or 16-byte store per column");
  __shared__ uint32_t col_max[kWarps][128];
  __shared__ __align__(16) uint8_t tile[128 * 128];
  auto swizzled = [](int i, int byte) { return i * 128 + ((((byte >> 4) ^ (i >> 3)) & 7) << 4 | (byte & 15)); };

  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * 128;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * 128;
  const int cg = threadIdx.x % kThreadsPerRow, rg = threadIdx.x / kThreadsPerRow;
  const int c_in_tile = cg * kElems, r_in_tile = rg * kRowsPerThread;
  const int64_t col = col0 + c_in_tile;

  uint4 raw[kRowsPerThread];
#pragma unroll
  for (int p = 0; p < kRowsPerThread; ++p) {
    const int64_t r = row0 + r_in_tile + p;
    raw[p] = (r < rows && col < cols) ? LoadStreaming(x + r * cols + col) : make_uint4(0, 0, 0, 0);
  }
  float v[kRowsPerThread][kElems];
  uint32_t cmax[kElems];
#pragma unroll
  for (int e = 0; e < kElems; ++e) cmax[e] = 0;

  // Rows of X.
#pragma unroll
  for (int p = 0; p < kRowsPerThread; ++p) {
    InVec<T>::Unpack(raw[p], v[p]);
    uint32_t amax = 0;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const uint32_t a = AbsBits(v[p][e]);
      amax = max(amax, a);
      cmax[e] = max(cmax[e], a);
    }
    amax = TeamMaxBits<kThreadsPerRow>(amax);
    const float s = ScaleInvFromAmaxBits<F>(amax, ue8m0);
    uint32_t words[kElems / 4];
    QuantizeToWords<F, kElems>(v[p], s, words);
    const int64_t r = row0 + r_in_tile + p;
    if (r < rows && col < cols) {
      if constexpr (kElems == 8) {
        *reinterpret_cast<uint2*>(q + r * cols + col) = make_uint2(words[0], words[1]);
      } else {
        *reinterpret_cast<uint32_t*>(q + r * cols + col) = words[0];
      }
      if (cg == 0) scale_inv[r * s_row_stride + blockIdx.x * s_grp_stride] = s;
    }
  }

  // Column maxima: the warp's row groups by shuffle, the warps through shared memory.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
#pragma unroll
    for (int off = kThreadsPerRow; off < 32; off *= 2) cmax[e] = max(cmax[e], __shfl_xor_sync(0xFFFFFFFFu, cmax[e], off));
    if (lane < kThreadsPerRow) col_max[warp][c_in_tile + e] = cmax[e];
  }
  __syncthreads();
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
    uint32_t amax = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) amax = max(amax, col_max[w][c_in_tile + e]);
    const float s = ScaleInvFromAmaxBits<F>(amax, ue8m0);
    float column[kRowsPerThread];
#pragma unroll
    for (int p = 0; p < kRowsPerThread; ++p) column[p] = v[p][e];
    uint32_t words[kRowsPerThread / 4];
    QuantizeToWords<F, kRowsPerThread>(column, s, words);
    uint8_t* dst = tile + swizzled(c_in_tile + e, r_in_tile);
    if constexpr (kRowsPerThread == 8) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(words[0], words[1]);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
    }
    if (rg == 0 && col0 + c_in_tile + e < cols)
      scale_inv_t[(col0 + c_in_tile + e) * st_row_stride + blockIdx.y * st_grp_stride] = s;
  }
  __syncthreads();

  // Xᵀ rows: 128 rows of 128 bytes = 1024 16-byte segments, 4 per thread.
#pragma unroll
  for (int i = 0; i < 128 * 8 / kSm90TransposeThreads; ++i) {
    const int seg = i * kSm90TransposeThreads + threadIdx.x;
    const int c = seg / 8, part = seg % 8;
    const int64_t cg_out = col0 + c, rg_out = row0 + part * 16;
    if (cg_out < cols && rg_out < rows)
      *reinterpret_cast<uint4*>(qt + cg_out * rows + rg_out) = *reinterpret_cast<const uint4*>(tile + swizzled(c, part * 16));
  }
}

}  // namespace fp8::kernels::cuda
