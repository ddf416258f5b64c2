// SPDX-License-Identifier: Apache-2.0
// Kernels: 1x128 (activations) and 128x128 (weights) FP8 quantization on sm_90.
// Launchers: sm90_fp8_quantize.cu; public API: sm90_fp8_quantize.h.
//
// Both kernels are memory-bound (3 bytes moved per bf16 element, ~0.1 flop per byte), so they
// are built for bandwidth: every thread issues 16-byte streaming loads, several tiles' loads are
// in flight before the first one is used, and stores are 4/8-byte wide and coalesced.
#pragma once

#include "kernels/cuda/sm90_fp8_common.cuh"

namespace fp8::kernels::cuda {

constexpr int kSm90QuantThreads = 256;

// ---- 1x128 ----------------------------------------------------------------------------------
// A "team" of 128/(kVecs·kElems) consecutive lanes owns one 1x128 group; each lane loads kVecs
// 16-byte vectors of it (lane l takes vectors l, l+team, ...: every load instruction still
// reads whole 32-byte sectors), so the per-group work — the amax shuffles, the scale and its
// reciprocal, the range check — is spread over kVecs·kElems elements per thread. Each thread
// handles kUnroll groups, all loads issued first.
//
// Two kernels share that per-group work. The launcher's: 2-D tiles of 8 rows x 8 groups per
// CTA with the scales written through shared memory (Sm90Fp8Quantize1x128TileKernel, below).
// The memory-order kernel (one long contiguous range per CTA) stays for
// tensors with more row tiles than a grid's y dimension, and as the benchmark's baseline;
// mn_order walks down the rows instead, mn_major only chooses where scale_inv is stored.
template <typename T, int kVecs>
struct Team1x128 {
  static constexpr int kElems = InVec<T>::kElems;
  static constexpr int kPerThread = kVecs * kElems;
  static constexpr int kSize = 128 / kPerThread;
  static constexpr int kPerBlock = kSm90QuantThreads / kSize;
};

// One team's 1x128 group from the lane's kVecs raw vectors: its FP8 words (in the lane's
// element order) and the group's scale_inv. Every lane of the team must call it (shuffles).
template <typename T, Fp8Format F, int kVecs>
__device__ __forceinline__ float Sm90Cast1x128Group(const uint4 (&raw)[kVecs], bool ue8m0,
                                                    uint32_t (&words)[Team1x128<T, kVecs>::kPerThread / 4]) {
  using Team = Team1x128<T, kVecs>;
  constexpr int kElems = Team::kElems;
  float vals[Team::kPerThread];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    float part[kElems];
    InVec<T>::Unpack(raw[v], part);
#pragma unroll
    for (int i = 0; i < kElems; ++i) vals[v * kElems + i] = part[i];
  }
  uint32_t amax = 0;
#pragma unroll
  for (int i = 0; i < Team::kPerThread; ++i) amax = max(amax, AbsBits(vals[i]));
  amax = TeamMaxBits<Team::kSize>(amax);
  const float s = ScaleInvFromAmaxBits<F>(amax, ue8m0);
  QuantizeToWords<F, Team::kPerThread>(vals, s, words);
  return s;
}

// The lane's words of group column gc into the row starting at q_row (columns past cols skipped).
template <typename T, int kVecs, bool kStreamStores = false>
__device__ __forceinline__ void Sm90Store1x128Words(uint8_t* __restrict__ q_row, int64_t cols, uint32_t gc,
                                                    int lane_in_team,
                                                    const uint32_t (&words)[Team1x128<T, kVecs>::kPerThread / 4]) {
  using Team = Team1x128<T, kVecs>;
  constexpr int kElems = Team::kElems;
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const int64_t col = static_cast<int64_t>(gc) * 128 + (lane_in_team + v * Team::kSize) * kElems;
    if (col >= cols) continue;
    uint8_t* dst = q_row + col;
    if constexpr (kElems == 8) {
      const uint2 w = make_uint2(words[2 * v], words[2 * v + 1]);
      if constexpr (kStreamStores) __stcs(reinterpret_cast<uint2*>(dst), w);
      else *reinterpret_cast<uint2*>(dst) = w;
    } else {
      if constexpr (kStreamStores) __stcs(reinterpret_cast<unsigned int*>(dst), words[v]);
      else *reinterpret_cast<uint32_t*>(dst) = words[v];
    }
  }
}

// kMinBlocks > 1 caps registers so that that many CTAs fit on an SM (more loads in flight).
template <typename T, Fp8Format F, int kVecs, int kUnroll, int kMinBlocks = 1,
          bool kStreamStores = false>
__global__ void __launch_bounds__(kSm90QuantThreads, kMinBlocks)
    Sm90Fp8Quantize1x128Kernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                               uint32_t groups_per_row, uint32_t num_groups, FastDiv outer,
                               bool mn_order, bool mn_major, bool ue8m0,
                               uint8_t* __restrict__ q, float* __restrict__ scale_inv) {
  using Team = Team1x128<T, kVecs>;
  constexpr int kElems = Team::kElems;
  const int lane_in_team = threadIdx.x % Team::kSize;
  const uint32_t first = blockIdx.x * (kUnroll * Team::kPerBlock) + threadIdx.x / Team::kSize;

  // Group g → (row, group column); `outer` divides by the slower-varying dimension
  // (groups_per_row in memory order, rows in mn_order).
  auto locate = [&](uint32_t g, uint32_t& r, uint32_t& gc) {
    const uint32_t hi = outer.Div(g), lo = g - hi * outer.d;
    r = mn_order ? lo : hi;
    gc = mn_order ? hi : lo;
  };

  uint4 raw[kUnroll][kVecs];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t g = first + u * Team::kPerBlock;
    uint32_t r, gc;
    locate(g, r, gc);
    const int64_t row_off = static_cast<int64_t>(r) * cols;
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      const int64_t col = static_cast<int64_t>(gc) * 128 + (lane_in_team + v * Team::kSize) * kElems;
      raw[u][v] = (g < num_groups && col < cols) ? LoadStreaming(x + row_off + col) : make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t g = first + u * Team::kPerBlock;
    uint32_t words[Team::kPerThread / 4];
    const float s = Sm90Cast1x128Group<T, F, kVecs>(raw[u], ue8m0, words);
    uint32_t r, gc;
    locate(g, r, gc);
    if (g < num_groups) {
      Sm90Store1x128Words<T, kVecs, kStreamStores>(q + static_cast<int64_t>(r) * cols, cols, gc, lane_in_team, words);
    }
    if (lane_in_team == 0 && g < num_groups) {
      scale_inv[mn_major ? static_cast<int64_t>(gc) * rows + r
                         : static_cast<int64_t>(r) * groups_per_row + gc] = s;
    }
  }
}

// 2-D tiles: a CTA takes kRows consecutive rows x kCols group columns, 64 groups per pass (its
// 32 teams, 2 groups each: 64 / kCols rows of kCols groups, each row's kCols groups contiguous
// in memory), keeps the tile's scales in shared memory and writes them as whole 32-byte
// sectors in either layout: kRows contiguous scales per group column MN-major, kCols per row
// row-major. The memory-order kernel above stores each MN-major scale 4 bytes at a time, `rows`
// floats away from the previous group's: one sector per scale. On the H200, 16384 x 7168 bf16:
// 8 x 8 tiles 94% of copy with MN-major scales, against 87% in memory order (90% with
// row-major scales); wider or taller tiles were slower (docs/perf-history.md). Bit for bit the
// same bytes and scales as the memory-order kernel.
template <typename T, Fp8Format F, int kVecs, int kRows, int kCols>
__global__ void __launch_bounds__(kSm90QuantThreads)
    Sm90Fp8Quantize1x128TileKernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                                   uint32_t groups_per_row, bool mn_major, bool ue8m0,
                                   uint8_t* __restrict__ q, float* __restrict__ scale_inv) {
  using Team = Team1x128<T, kVecs>;
  constexpr int kElems = Team::kElems;
  constexpr int kTeams = Team::kPerBlock;
  constexpr int kSlots = 2 * kTeams;  // groups per pass
  static_assert(kSlots % kCols == 0 && kRows % (kSlots / kCols) == 0, "whole passes per tile");
  constexpr int kRowsPerPass = kSlots / kCols;
  __shared__ float tile_scales[kCols][kRows];
  const int team = threadIdx.x / Team::kSize, lane_in_team = threadIdx.x % Team::kSize;
  const uint32_t gc0 = blockIdx.x * kCols;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRows;

#pragma unroll 1
  for (int pass_row = 0; pass_row < kRows; pass_row += kRowsPerPass) {
    uint4 raw[2][kVecs];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int slot = u * kTeams + team;
      const int64_t r = r0 + pass_row + slot / kCols;
      const uint32_t gc = gc0 + slot % kCols;
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        const int64_t col = static_cast<int64_t>(gc) * 128 + (lane_in_team + v * Team::kSize) * kElems;
        raw[u][v] = (r < rows && gc < groups_per_row && col < cols) ? LoadStreaming(x + r * cols + col)
                                                                    : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int slot = u * kTeams + team;
      const int row_in_tile = pass_row + slot / kCols;
      const int64_t r = r0 + row_in_tile;
      const uint32_t gc = gc0 + slot % kCols;
      uint32_t words[Team::kPerThread / 4];
      const float s = Sm90Cast1x128Group<T, F, kVecs>(raw[u], ue8m0, words);
      if (r < rows && gc < groups_per_row) {
        Sm90Store1x128Words<T, kVecs>(q + r * cols, cols, gc, lane_in_team, words);
        if (lane_in_team == 0) tile_scales[slot % kCols][row_in_tile] = s;
      }
    }
  }
  __syncthreads();
  // Consecutive threads take consecutive scales of scale_inv: a group column's rows (MN-major)
  // or a row's group columns (row-major).
  for (int i = threadIdx.x; i < kCols * kRows; i += kSm90QuantThreads) {
    const int g = mn_major ? i / kRows : i % kCols, rr = mn_major ? i % kRows : i / kCols;
    const uint32_t gc = gc0 + g;
    const int64_t r = r0 + rr;
    if (gc < groups_per_row && r < rows) {
      scale_inv[mn_major ? static_cast<int64_t>(gc) * rows + r : r * groups_per_row + gc] = tile_scales[g][rr];
    }
  }
}

// ---- 128x128 --------------------------------------------------------------------------------
// One CTA per 128x128 block: 256 threads load the whole block into registers (128 bytes each,
// all loads in flight at once), reduce amax across the CTA, then cast from registers. q (if not
// null) gets the block in place. qt (if not null) gets it transposed, [cols, rows]: the bytes go
// through a shared-memory tile (16-byte chunks of a row XOR-swizzled by (row/8)%8, so the byte
// stores of a warp spread over the banks) and leave as 16-byte row segments. A block's amax, scale and
// bytes do not depend on its orientation, so qt is bit for bit the 128x128 quantization of xᵀ
// (the wgrad operand) without a transpose pass over x. qt needs rows % 16 == 0. q1 (if not null)
// also gets x in 1x128 tiles (a block row is one tile), scales MN-major [ceil(cols/128), rows]:
// the forward GEMM's operand and the backward's xᵀ from one read of x.
//
// The load and the cast are split so that a producer of the values other than a plain load
// (the trainer's AdamW step, which casts the weights it has just updated) runs the same cast.

// Which elements of the CTA's 128x128 block thread threadIdx.x (of kThreads) holds: pass p,
// vector element e is (row0 + p·kRowsPerPass + RowInPass(), col0 + ColInBlock() + e).
template <typename T, int kThreadsPerCta = kSm90QuantThreads>
struct Sm90Block128x128 {
  static constexpr int kThreads = kThreadsPerCta;
  static constexpr int kElems = InVec<T>::kElems;
  static constexpr int kThreadsPerRow = 128 / kElems;
  static constexpr int kRowsPerPass = kThreads / kThreadsPerRow;
  static constexpr int kPasses = 128 / kRowsPerPass;
  // Dynamic shared memory the cast needs: the transposed byte tile, only when qt is wanted
  // (a static 16 KB cost the plain cast 8%: fewer CTAs per SM).
  static constexpr int kTransposeSmemBytes = 128 * 128;
  __device__ static int ColInBlock() { return (threadIdx.x % kThreadsPerRow) * kElems; }
  __device__ static int RowInPass() { return threadIdx.x / kThreadsPerRow; }
};

// Casts the block held in `raw` (T elements as Sm90Block128x128<T, kThreads> lays them out; zeros
// outside the tensor) to the outputs named above. Called by every thread of the CTA, after the
// values are in registers; the CTA is at blockIdx (column block, row block).
template <typename T, Fp8Format F, int kThreads = kSm90QuantThreads>
__device__ __forceinline__ void Sm90Fp8Cast128x128Block(const uint4 (&raw)[Sm90Block128x128<T, kThreads>::kPasses], int64_t rows,
                                                        int64_t cols, bool ue8m0, uint8_t* __restrict__ q,
                                                        float* __restrict__ scale_inv, int64_t scale_ld,
                                                        uint8_t* __restrict__ qt, float* __restrict__ scale_inv_t,
                                                        int64_t scale_ld_t, uint8_t* __restrict__ q1,
                                                        float* __restrict__ scale1) {
  using B = Sm90Block128x128<T, kThreads>;
  constexpr int kElems = B::kElems;
  constexpr int kThreadsPerRow = B::kThreadsPerRow;
  __shared__ uint32_t warp_max[kThreads / 32];
  extern __shared__ __align__(16) uint8_t tile[];
  auto swizzled = [](int i, int byte) { return i * 128 + ((((byte >> 4) ^ (i >> 3)) & 7) << 4 | (byte & 15)); };

  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * 128;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * 128;
  const int col_in_block = B::ColInBlock();
  const int64_t col = col0 + col_in_block;
  const int row_in_pass = B::RowInPass();

  uint32_t amax = 0;
#pragma unroll
  for (int p = 0; p < B::kPasses; ++p) {
    float v[kElems];
    InVec<T>::Unpack(raw[p], v);
#pragma unroll
    for (int i = 0; i < kElems; ++i) amax = max(amax, AbsBits(v[i]));
  }
  amax = TeamMaxBits<32>(amax);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) amax = max(amax, warp_max[w]);
  const float s = ScaleInvFromAmaxBits<F>(amax, ue8m0);
  if (threadIdx.x == 0) {
    if (q) scale_inv[static_cast<int64_t>(blockIdx.y) * scale_ld + blockIdx.x] = s;
    if (qt) scale_inv_t[static_cast<int64_t>(blockIdx.x) * scale_ld_t + blockIdx.y] = s;
  }

#pragma unroll
  for (int p = 0; p < B::kPasses; ++p) {
    const int row_in_block = p * B::kRowsPerPass + row_in_pass;
    const int64_t r = row0 + row_in_block;
    float v[kElems];
    InVec<T>::Unpack(raw[p], v);
    uint32_t words[kElems / 4];
    QuantizeToWords<F, kElems>(v, s, words);
    if (q && r < rows && col < cols) {
      if constexpr (kElems == 8) {
        *reinterpret_cast<uint2*>(q + r * cols + col) = make_uint2(words[0], words[1]);
      } else {
        *reinterpret_cast<uint32_t*>(q + r * cols + col) = words[0];
      }
    }
    if (q1) {  // this row's 1x128 tile: amax over the kThreadsPerRow lanes that hold it
      uint32_t ra = 0;
#pragma unroll
      for (int i = 0; i < kElems; ++i) ra = max(ra, AbsBits(v[i]));
      ra = TeamMaxBits<kThreadsPerRow>(ra);
      const float s1 = ScaleInvFromAmaxBits<F>(ra, ue8m0);
      uint32_t w1[kElems / 4];
      QuantizeToWords<F, kElems>(v, s1, w1);
      if (r < rows && col < cols) {
        if constexpr (kElems == 8) {
          *reinterpret_cast<uint2*>(q1 + r * cols + col) = make_uint2(w1[0], w1[1]);
        } else {
          *reinterpret_cast<uint32_t*>(q1 + r * cols + col) = w1[0];
        }
      }
      if (r < rows && threadIdx.x % kThreadsPerRow == 0) scale1[static_cast<int64_t>(blockIdx.x) * rows + r] = s1;
    }
    if (qt) {
#pragma unroll
      for (int e = 0; e < kElems; ++e)
        tile[swizzled(col_in_block + e, row_in_block)] = static_cast<uint8_t>(words[e / 4] >> (8 * (e % 4)));
    }
  }
  if (!qt) return;
  __syncthreads();
  // Transposed row i (column col0 + i of x) is 128 bytes: 8 segments of 16; 1024 segments per block.
  for (int seg = threadIdx.x; seg < 128 * 8; seg += kThreads) {
    const int i = seg / 8, part = seg % 8;
    const int64_t c = col0 + i, r = row0 + part * 16;
    if (c < cols && r < rows)
      *reinterpret_cast<uint4*>(qt + c * rows + r) = *reinterpret_cast<const uint4*>(tile + swizzled(i, part * 16));
  }
}

// kOnlyQ: the plain weight cast (q and scale_inv only; qt and q1 ignored). Its own instance
// because the code for the optional outputs, though skipped at run time, took the kernel from
// 4 to 3 CTAs per SM by its registers (bf16: 71) and the cast from 92 to 100 us (H200,
// docs/perf-history.md).
template <typename T, Fp8Format F, bool kOnlyQ = false>
__global__ void __launch_bounds__(kSm90QuantThreads)
    Sm90Fp8Quantize128x128Kernel(const T* __restrict__ x, int64_t rows, int64_t cols, bool ue8m0,
                                 uint8_t* __restrict__ q, float* __restrict__ scale_inv,
                                 int64_t scale_ld, uint8_t* __restrict__ qt,
                                 float* __restrict__ scale_inv_t, int64_t scale_ld_t,
                                 uint8_t* __restrict__ q1, float* __restrict__ scale1) {
  if constexpr (kOnlyQ) {
    qt = nullptr;
    q1 = nullptr;
  }
  using B = Sm90Block128x128<T>;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * 128;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 128 + B::ColInBlock();
  uint4 raw[B::kPasses];
#pragma unroll
  for (int p = 0; p < B::kPasses; ++p) {
    const int64_t r = row0 + p * B::kRowsPerPass + B::RowInPass();
    raw[p] = (r < rows && col < cols) ? LoadStreaming(x + r * cols + col) : make_uint4(0, 0, 0, 0);
  }
  Sm90Fp8Cast128x128Block<T, F>(raw, rows, cols, ue8m0, q, scale_inv, scale_ld, qt, scale_inv_t, scale_ld_t, q1, scale1);
}

}  // namespace fp8::kernels::cuda
