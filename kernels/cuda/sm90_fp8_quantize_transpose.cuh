// Kernel: fused 1x128 quantization of X and of Xᵀ in one pass over X (sm_90).
// Launcher: sm90_fp8_quantize_transpose.cu; API: sm90_fp8_quantize_transpose.h.
//
// One CTA per 128x128 tile of X. X is read once (16-byte loads); rows are quantized straight
// from registers (a tile row is exactly one 1x128 group of X), the tile is staged in shared
// memory for the column groups (= 1x128 groups of Xᵀ), and the transposed FP8 tile is staged
// again so Xᵀ is written with 16-byte coalesced stores.
#pragma once

#include "kernels/cuda/sm90_fp8_common.cuh"

namespace fp8::kernels::cuda {

constexpr int kSm90TransposeThreads = 256;

template <typename T>
struct TransposeSmem {
  // Row pitch of the staged X tile, in elements (65 / 129 words: an odd pitch keeps the 4-byte
  // staging stores of a warp, which span two or four rows, off each other's banks).
  static constexpr int kPitch = sizeof(T) == 2 ? 130 : 129;
  static constexpr int kQtPitch = 144;  // bytes per staged Xᵀ row: 16-byte aligned
  static constexpr size_t kTileBytes = sizeof(T) * 128 * kPitch;
  static constexpr size_t kBytes = kTileBytes + 128 * kQtPitch;
};

template <typename T, Fp8Format F>
__global__ void __launch_bounds__(kSm90TransposeThreads)
    Sm90Fp8Quantize1x128TransposeKernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                                        bool ue8m0, uint8_t* __restrict__ q,
                                        float* __restrict__ scale_inv, int64_t s_row_stride,
                                        int64_t s_grp_stride, uint8_t* __restrict__ qt,
                                        float* __restrict__ scale_inv_t, int64_t st_row_stride,
                                        int64_t st_grp_stride) {
  using Smem = TransposeSmem<T>;
  constexpr int kElems = InVec<T>::kElems;
  constexpr int kThreadsPerRow = 128 / kElems;
  constexpr int kRowsPerPass = kSm90TransposeThreads / kThreadsPerRow;
  constexpr int kPasses = 128 / kRowsPerPass;
  extern __shared__ __align__(16) unsigned char smem[];
  T* tile = reinterpret_cast<T*>(smem);
  uint8_t* qt_tile = smem + Smem::kTileBytes;

  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * 128;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * 128;
  const int c_in_tile = (threadIdx.x % kThreadsPerRow) * kElems;
  const int64_t col = col0 + c_in_tile;
  const int row_in_pass = threadIdx.x / kThreadsPerRow;

  uint4 raw[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int64_t r = row0 + p * kRowsPerPass + row_in_pass;
    raw[p] = (r < rows && col < cols) ? LoadStreaming(x + r * cols + col) : make_uint4(0, 0, 0, 0);
  }

  // Rows: stage into shared memory (4-byte stores; rows of the padded tile are only 4-byte
  // aligned), then quantize from registers.
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r_in_tile = p * kRowsPerPass + row_in_pass;
    uint32_t* dst = reinterpret_cast<uint32_t*>(tile + r_in_tile * Smem::kPitch + c_in_tile);
    dst[0] = raw[p].x;
    dst[1] = raw[p].y;
    dst[2] = raw[p].z;
    dst[3] = raw[p].w;

    float v[kElems];
    InVec<T>::Unpack(raw[p], v);
    uint32_t amax = 0;
#pragma unroll
    for (int i = 0; i < kElems; ++i) amax = max(amax, AbsBits(v[i]));
    amax = TeamMaxBits<kThreadsPerRow>(amax);
    const float s = ScaleInvFromAmaxBits<F>(amax, ue8m0);
    uint32_t words[kElems / 4];
    QuantizeToWords<F, kElems>(v, s, words);
    const int64_t r = row0 + r_in_tile;
    if (r < rows && col < cols) {
      if constexpr (kElems == 8) {
        *reinterpret_cast<uint2*>(q + r * cols + col) = make_uint2(words[0], words[1]);
      } else {
        *reinterpret_cast<uint32_t*>(q + r * cols + col) = words[0];
      }
      if (threadIdx.x % kThreadsPerRow == 0)
        scale_inv[r * s_row_stride + blockIdx.x * s_grp_stride] = s;
    }
  }
  __syncthreads();

  // Columns (= rows of Xᵀ): thread t takes column t % 128, rows [64h, 64h + 64) with h = t / 128.
  // A warp reads 32 consecutive columns of one staged row (conflict-free), the two halves'
  // amax meet in shared memory, and each thread writes its 64 FP8 bytes as four 16-byte stores.
  __shared__ uint32_t col_amax[2][128];
  const int c = threadIdx.x % 128;
  const int h = threadIdx.x / 128;
  const T* column = tile + (h * 64) * Smem::kPitch + c;
  uint32_t amax = 0;
#pragma unroll 16
  for (int i = 0; i < 64; ++i) amax = max(amax, AbsBits(static_cast<float>(column[i * Smem::kPitch])));
  col_amax[h][c] = amax;
  __syncthreads();
  amax = max(col_amax[0][c], col_amax[1][c]);
  const float s = ScaleInvFromAmaxBits<F>(amax, ue8m0);
  const ScaleDivisor d = MakeScaleDivisor(s);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(column[(16 * j + i) * Smem::kPitch]);
    uint32_t words[4];
    QuantizeToWords<F, 16>(v, d, words);
    *reinterpret_cast<uint4*>(qt_tile + c * Smem::kQtPitch + h * 64 + 16 * j) =
        make_uint4(words[0], words[1], words[2], words[3]);
  }
  if (h == 0 && col0 + c < cols) scale_inv_t[(col0 + c) * st_row_stride + blockIdx.y * st_grp_stride] = s;
  __syncthreads();

  // Xᵀ rows: 128 rows of 128 bytes = 1024 16-byte chunks, 4 per thread.
#pragma unroll
  for (int i = 0; i < 128 * 8 / kSm90TransposeThreads; ++i) {
    const int chunk = i * kSm90TransposeThreads + threadIdx.x;
    const int c = chunk / 8;
    const int r_off = (chunk % 8) * 16;
    const int64_t cg = col0 + c;
    const int64_t rg = row0 + r_off;
    if (cg < cols && rg < rows) {
      *reinterpret_cast<uint4*>(qt + cg * rows + rg) =
          *reinterpret_cast<const uint4*>(qt_tile + c * Smem::kQtPitch + r_off);
    }
  }
}

}  // namespace fp8::kernels::cuda
