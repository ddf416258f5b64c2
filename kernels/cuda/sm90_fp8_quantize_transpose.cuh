// SPDX-License-Identifier: Apache-2.0
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
//
// The launchers run it for fp32 input; bf16 goes to the lean kernels further below.
#pragma once

#include <algorithm>

#include "kernels/cuda/sm90_fp8_common.cuh"
#include "kernels/cuda/sm90_fp8_quantize.h"

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

// ---- the lean bf16 kernels (what the launchers run for bf16) --------------------------------
// Why the kernel above sits near 60% of copy: it is bound by its own instruction stream, not by
// the loads. Measured on an H200 (docs/perf-history.md): moving its loads into shared memory with
// bulk copies, several tiles ahead (persistent CTAs), did not help — a CTA still took ~10 µs per
// tile, whether it had the SM alone or shared it (~17k cycles for ~1.7k instructions per warp):
// long dependent chains of shuffles, divisions and shared-memory round trips, hidden only by
// running more CTAs per SM. Each thread computed 16 scales (its 8 rows' and 8 columns', every
// row and column scale 16 times over the CTA), each an IEEE division plus a reciprocal, after
// 4 shuffles per row, and read 64 column maxima; and it held its 64 values as floats (80
// registers: 3 CTAs per SM). The lean cast:
//   * keeps the raw bf16 words (32 registers) and unpacks twice, so 4 CTAs fit (≤ 64 registers);
//   * takes |x| maxima on packed bf16 pairs (__vmaxu2 on the bits & 0x7FFF7FFF: the order of
//     the bit patterns is the order of AbsBits of the floats, NaN above Inf, as everywhere);
//   * computes each row's scale in 2 of its team's 16 lanes (the 8 rows' maxima are reduced and
//     scattered in 8 shuffles, then 8 shuffles hand the scales back), each column's scale in one
//     thread (through shared memory), and the tile's scale (128x128) once per thread.
// Bytes and scales are the same as the kernel above and the CPU reference (same scale rule, same
// division): only who computes each scale changed.
enum class Sm90TransposedTiles : uint8_t { k1x128, k128x128 };

struct Sm90TransposeCastArgs {
  const __nv_bfloat16* x;
  int64_t rows, cols;
  bool ue8m0;
  uint8_t* q;       // [rows, cols] in 1x128 tiles, or null
  float* s;         // (r, group g) at r * s_row + g * s_grp
  int64_t s_row, s_grp;
  uint8_t* qt;      // [cols, rows]
  float* st;        // 1x128: (column c, tile row i) at c * st_row + i * st_grp;
  int64_t st_row, st_grp;  // 128x128: (tile column j, tile row i) at j * st_row + i * st_grp
  // 128x128 only, may be null: max |x| over X folded in (atomicMax of the float's bits, NaN
  // taken as Inf), for the trainer's cast statistics when X exists only inside the cast.
  unsigned int* amax_bits = nullptr;
};

// Shared memory of one tile's cast (both kernels).
struct Sm90TransposeCastScratch {
  uint8_t tile[128 * 128];         // FP8 bytes of Xᵀ, 16-byte chunks XOR-swizzled by (row/8)%8
  uint32_t col_max[8][64];         // per warp: packed |bf16| maxima of column pairs
  float col_scale[128];
  uint32_t warp_max[8];
};

// Casts tile (ti, tj), held as raw bf16 words: raw[p] = row r_in_tile + p, columns c_in_tile ..
// + 7 (zeros outside X), where thread (rg, cg) = (threadIdx.x / 16, threadIdx.x % 16) holds
// rows rg·8 .. + 7 and columns cg·8 .. + 7.
template <Fp8Format F, Sm90TransposedTiles kTiles>
__device__ __forceinline__ void Sm90TransposeCastTile(const uint4 (&raw)[8], const Sm90TransposeCastArgs& a, uint32_t ti,
                                                      uint32_t tj, Sm90TransposeCastScratch& sm) {
  constexpr int kWarps = kSm90TransposeThreads / 32;
  static_assert(kWarps == 8, "256 threads: 16 row groups of 8 rows, 16 column groups of 8 columns");
  auto swizzled = [](int i, int byte) { return i * 128 + ((((byte >> 4) ^ (i >> 3)) & 7) << 4 | (byte & 15)); };
  const int64_t rows = a.rows, cols = a.cols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int cg = threadIdx.x % 16, rg = threadIdx.x / 16;
  const int c_in_tile = cg * 8, r_in_tile = rg * 8;
  const int64_t row0 = int64_t{ti} * 128, col0 = int64_t{tj} * 128, col = col0 + c_in_tile;

  // |x| maxima on packed pairs: per row (8 values) and per column pair (over the 8 rows).
  uint32_t row_max[8], col_pair_max[4] = {0, 0, 0, 0};
#pragma unroll
  for (int p = 0; p < 8; ++p) {
    const uint32_t w[4] = {raw[p].x & 0x7FFF7FFFu, raw[p].y & 0x7FFF7FFFu, raw[p].z & 0x7FFF7FFFu, raw[p].w & 0x7FFF7FFFu};
#pragma unroll
    for (int i = 0; i < 4; ++i) col_pair_max[i] = __vmaxu2(col_pair_max[i], w[i]);
    const uint32_t m = __vmaxu2(__vmaxu2(w[0], w[1]), __vmaxu2(w[2], w[3]));
    row_max[p] = max(m & 0xFFFFu, m >> 16);
  }

  // Rows of X (1x128 tiles): reduce the 8 rows' maxima over the 16-lane team and scatter them,
  // so that lanes 2p and 2p+1 end with row p's; they compute its scale, the team reads it back.
  if (a.q != nullptr) {
    const bool h1 = cg & 8, h2 = cg & 4, h3 = cg & 2;
    uint32_t r4[4], r2[2];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t keep = h1 ? row_max[4 + j] : row_max[j], give = h1 ? row_max[j] : row_max[4 + j];
      r4[j] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, give, 8));
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint32_t keep = h2 ? r4[2 + j] : r4[j], give = h2 ? r4[j] : r4[2 + j];
      r2[j] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, give, 4));
    }
    uint32_t r1 = max(h3 ? r2[1] : r2[0], __shfl_xor_sync(0xFFFFFFFFu, h3 ? r2[0] : r2[1], 2));
    r1 = max(r1, __shfl_xor_sync(0xFFFFFFFFu, r1, 1));
    const float s_own = ScaleInvFromAmaxBits<F>(r1 << 16, a.ue8m0);  // row r_in_tile + cg/2
    const int64_t r_own = row0 + r_in_tile + cg / 2;
    if (cg % 2 == 0 && r_own < rows && col0 < cols) a.s[r_own * a.s_row + int64_t{tj} * a.s_grp] = s_own;
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const float s = __shfl_sync(0xFFFFFFFFu, s_own, (lane & 16) | (2 * p));
      float v[8];
      InVec<__nv_bfloat16>::Unpack(raw[p], v);
      uint32_t words[2];
      QuantizeToWords<F, 8>(v, MakeScaleDivisor(s), words);
      const int64_t r = row0 + r_in_tile + p;
      if (r < rows && col < cols) *reinterpret_cast<uint2*>(a.q + r * cols + col) = make_uint2(words[0], words[1]);
    }
  }

  // Columns of X = rows of Xᵀ: maxima meet in shared memory.
  if constexpr (kTiles == Sm90TransposedTiles::k1x128) {
#pragma unroll
    for (int i = 0; i < 4; ++i) col_pair_max[i] = __vmaxu2(col_pair_max[i], __shfl_xor_sync(0xFFFFFFFFu, col_pair_max[i], 16));
    if (lane < 16)
      *reinterpret_cast<uint4*>(&sm.col_max[warp][cg * 4]) = make_uint4(col_pair_max[0], col_pair_max[1], col_pair_max[2], col_pair_max[3]);
  } else {
    uint32_t m = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) m = max(m, max(col_pair_max[i] & 0xFFFFu, col_pair_max[i] >> 16));
    m = TeamMaxBits<32>(m);
    if (lane == 0) sm.warp_max[warp] = m;
  }
  __syncthreads();

  ScaleDivisor d_tile{};
  if constexpr (kTiles == Sm90TransposedTiles::k1x128) {
    if (threadIdx.x < 128) {  // column c's scale, once
      const int c = threadIdx.x;
      uint32_t m = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m = __vmaxu2(m, sm.col_max[w][c / 2]);  // per half: a plain max
      // of the packed words would take the low half from the word with the largest high half
      m = c % 2 ? m >> 16 : m & 0xFFFFu;
      const float s = ScaleInvFromAmaxBits<F>(m << 16, a.ue8m0);
      sm.col_scale[c] = s;
      if (col0 + c < cols) a.st[(col0 + c) * a.st_row + int64_t{ti} * a.st_grp] = s;
    }
    __syncthreads();
  } else {
    uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = max(m, sm.warp_max[w]);
    const float s = ScaleInvFromAmaxBits<F>(m << 16, a.ue8m0);
    if (threadIdx.x == 0) {
      a.st[int64_t{tj} * a.st_row + int64_t{ti} * a.st_grp] = s;
      if (a.amax_bits != nullptr) atomicMax(a.amax_bits, min(m, 0x7F80u) << 16);
    }
    d_tile = MakeScaleDivisor(s);
  }
  float col_s[8];
  if constexpr (kTiles == Sm90TransposedTiles::k1x128) {
    const float4 lo = *reinterpret_cast<const float4*>(&sm.col_scale[c_in_tile]);
    const float4 hi = *reinterpret_cast<const float4*>(&sm.col_scale[c_in_tile + 4]);
    col_s[0] = lo.x, col_s[1] = lo.y, col_s[2] = lo.z, col_s[3] = lo.w;
    col_s[4] = hi.x, col_s[5] = hi.y, col_s[6] = hi.z, col_s[7] = hi.w;
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    float column[8];
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const uint32_t w = e < 2 ? raw[p].x : e < 4 ? raw[p].y : e < 6 ? raw[p].z : raw[p].w;
      column[p] = __uint_as_float(e % 2 ? w & 0xFFFF0000u : w << 16);
    }
    uint32_t words[2];
    if constexpr (kTiles == Sm90TransposedTiles::k1x128) {
      QuantizeToWords<F, 8>(column, MakeScaleDivisor(col_s[e]), words);
    } else {
      QuantizeToWords<F, 8>(column, d_tile, words);
    }
    *reinterpret_cast<uint2*>(sm.tile + swizzled(c_in_tile + e, r_in_tile)) = make_uint2(words[0], words[1]);
  }
  __syncthreads();

  // Xᵀ rows: 128 rows of 128 bytes = 1024 16-byte segments, 4 per thread.
#pragma unroll
  for (int i = 0; i < 128 * 8 / kSm90TransposeThreads; ++i) {
    const int seg = i * kSm90TransposeThreads + threadIdx.x;
    const int c = seg / 8, part = seg % 8;
    const int64_t c_out = col0 + c, r_out = row0 + part * 16;
    if (c_out < cols && r_out < rows)
      *reinterpret_cast<uint4*>(a.qt + c_out * rows + r_out) = *reinterpret_cast<const uint4*>(sm.tile + swizzled(c, part * 16));
  }
}

// Where a tile's bf16 words come from: X itself (below), or a stage fused in front of the cast
// that computes them in registers (the trainer's RMSNorm and SwiGLU), so X never goes through
// device memory. Rows(row, col, raw) fills raw[p] with the 8 bf16 values of row row + p, columns
// col .. col + 7, and zeros outside X; the cast is the same code whatever fills the tile.
struct Sm90Bf16TileRows {
  const __nv_bfloat16* x;
  int64_t rows, cols;
  __device__ __forceinline__ void operator()(int64_t row, int64_t col, uint4 (&raw)[8]) const {
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const int64_t r = row + p;
      raw[p] = (r < rows && col < cols) ? LoadStreaming(x + r * cols + col) : make_uint4(0, 0, 0, 0);
    }
  }
};

// One tile per CTA, loads straight into registers. kMinBlocks caps registers so that that many
// CTAs share an SM (4: 64 registers, no spills; 3 and 5 measured slower). A persistent variant
// fed by bulk copies into shared-memory stages measured slower still (49% of copy; the cast's
// instruction chains, not the bytes in flight, were the limit) and was removed.
template <Fp8Format F, Sm90TransposedTiles kTiles, int kMinBlocks = 4, typename TileRows = Sm90Bf16TileRows>
__global__ void __launch_bounds__(kSm90TransposeThreads, kMinBlocks)
    Sm90Fp8TransposeCastKernel(const Sm90TransposeCastArgs a, const TileRows tile_rows) {
  __shared__ __align__(16) Sm90TransposeCastScratch sm;
  const int64_t row0 = int64_t{blockIdx.y} * 128;
  const int64_t col = int64_t{blockIdx.x} * 128 + (threadIdx.x % 16) * 8;
  const int r_in_tile = (threadIdx.x / 16) * 8;
  uint4 raw[8];
  tile_rows(row0 + r_in_tile, col, raw);
  Sm90TransposeCastTile<F, kTiles>(raw, a, blockIdx.y, blockIdx.x, sm);
}

// a.x is read when tile_rows is the default (X from memory); a fused producer passes its own.
template <Fp8Format F, Sm90TransposedTiles kTiles, int kMinBlocks = 4, typename TileRows = Sm90Bf16TileRows>
cudaError_t Sm90LaunchTransposeCast(const Sm90TransposeCastArgs& a, cudaStream_t stream, const TileRows& tile_rows) {
  const dim3 grid(static_cast<unsigned>((a.cols + 127) / 128), static_cast<unsigned>((a.rows + 127) / 128));
  Sm90Fp8TransposeCastKernel<F, kTiles, kMinBlocks, TileRows><<<grid, kSm90TransposeThreads, 0, stream>>>(a, tile_rows);
  return cudaGetLastError();
}
template <Fp8Format F, Sm90TransposedTiles kTiles, int kMinBlocks = 4>
cudaError_t Sm90LaunchTransposeCast(const Sm90TransposeCastArgs& a, cudaStream_t stream) {
  return Sm90LaunchTransposeCast<F, kTiles, kMinBlocks>(a, stream, Sm90Bf16TileRows{a.x, a.rows, a.cols});
}

}  // namespace fp8::kernels::cuda
