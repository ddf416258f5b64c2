// SPDX-License-Identifier: Apache-2.0
// Fused causal attention (see sm90_flash_attention.h). Kernels first, launchers at the end.
//
// Every kernel runs 4 warps; a warp owns 16 rows (32 in the wide forward) of the tile its block
// is responsible for (queries in the forward and the dq kernel, keys in the dk/dv kernel), so
// softmax statistics and accumulators never cross warps. Shared-memory tiles are [rows][D] BF16 with their 16-byte
// chunks XOR-swizzled (Swz) so that ldmatrix of 8 rows and the cp.async writes are free of bank
// conflicts. All GEMMs are one of two warp-level shapes:
//   MmaABt: acc[16×N] += A·Bᵀ, A = 16 rows of one tile, B = N rows of another (contract over D)
//   MmaPV:  acc[16×D] += P·B,  P in registers (C fragments reused as A fragments), B = a tile
#include "worker/train/cuda/sm90_flash_attention.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/cuda/sm90_cuda_check.h"

namespace fp8::train::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 64;  // rows of the tile a block owns (16 per warp)
constexpr float kLog2e = 1.4426950408889634f;

struct Params {
  int64_t batch, heads, seq;
  int64_t group;       // query heads per key/value head (heads / kv_heads)
  HeadLayout qkv, yl;  // qkv: q and dq
  HeadLayout kvl;      // k, v, dk, dv
  float scale_log2;  // log2(e)/√hd: scores go through exp2
  float scale;       // 1/√hd, for dq and dk
  const bf16 *q, *k, *v, *y, *dy;
  bf16 *out, *dq, *dk, *dv;
  const float* lse;
  float* lse_out;
  float* delta;
};

// Element offset of (row, col) in a [rows][D] tile, col a multiple of 8. 8 consecutive rows at
// one logical chunk land on 8 distinct 16-byte bank groups.
template <int D>
__device__ __forceinline__ int Swz(int row, int col) {
  const int chunk = col >> 3;
  if constexpr (D >= 64) return row * D + ((chunk ^ (row & 7)) << 3);
  else return row * D + ((chunk ^ ((row >> 1) & 3)) << 3);  // D = 32: two rows per 128 bytes
}

__device__ __forceinline__ unsigned SmemAddr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared; rows past the sequence are zero-filled (src-size 0).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Rows [row0, row0+Rows) of one head (row stride `rs`) into a swizzled tile.
template <int D, int Rows>
__device__ __forceinline__ void LoadTile(bf16* tile, const bf16* g, int64_t rs, int row0, int64_t seq) {
  constexpr int kChunks = D / 8;
  static_assert(Rows * kChunks % kThreads == 0, "whole passes of the block");
#pragma unroll
  for (int pass = 0; pass < Rows * kChunks / kThreads; ++pass) {
    const int i = pass * kThreads + threadIdx.x;
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool ok = row0 + r < seq;
    CpAsync16(tile + Swz<D>(r, c), g + (ok ? (row0 + r) * rs + c : 0), ok);
  }
}

// Double-buffered K/V tiles: starts loading tile j+1 into the other buffer, then waits until
// tile j (loaded one iteration earlier) has landed and every thread sees it.
template <int D, int BK>
__device__ __forceinline__ void PrefetchNextKvAndWait(bf16* sK, bf16* sV, const bf16* k, const bf16* v,
                                                      int64_t rs, int j, int n_kt, int64_t seq) {
  if (j + 1 < n_kt) {
    LoadTile<D, BK>(sK + ((j + 1) & 1) * BK * D, k, rs, (j + 1) * BK, seq);
    LoadTile<D, BK>(sV + ((j + 1) & 1) * BK * D, v, rs, (j + 1) * BK, seq);
    CpAsyncCommit();
    CpAsyncWait<1>();
  } else {
    CpAsyncWait<0>();
  }
  __syncthreads();
}

// Rows of a swizzled tile → global (rows ≥ seq dropped), 16-byte stores.
template <int D, int Rows>
__device__ __forceinline__ void StoreTile(const bf16* tile, bf16* g, int64_t rs, int row0, int64_t seq) {
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int pass = 0; pass < Rows * kChunks / kThreads; ++pass) {
    const int i = pass * kThreads + threadIdx.x;
    const int r = i / kChunks, c = (i % kChunks) * 8;
    if (row0 + r < seq)
      *reinterpret_cast<uint4*>(g + (row0 + r) * rs + c) = *reinterpret_cast<const uint4*>(tile + Swz<D>(r, c));
  }
}

__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// acc[16×N] += A·Bᵀ: A = rows a_row0..+15 of tile a, B = rows 0..N-1 of tile b, both [rows][D].
template <int D, int N>
__device__ __forceinline__ void MmaABt(float (&acc)[N / 8][4], const bf16* a, int a_row0, const bf16* b) {
  const int lane = threadIdx.x & 31, mi = lane >> 3, r8 = lane & 7;
#pragma unroll
  for (int k0 = 0; k0 < D; k0 += 16) {
    uint32_t af[4];
    Ldsm4(af, a + Swz<D>(a_row0 + r8 + (mi & 1) * 8, k0 + (mi >> 1) * 8));
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += 16) {
      uint32_t bf[4];
      Ldsm4(bf, b + Swz<D>(n0 + r8 + (mi >> 1) * 8, k0 + (mi & 1) * 8));
      Mma(acc[n0 / 8], af, bf[0], bf[1]);
      Mma(acc[n0 / 8 + 1], af, bf[2], bf[3]);
    }
  }
}

// acc[16×D] += P·B: P [16×K] as C fragments (rounded to BF16 here), B = rows 0..K-1 of tile b.
// The C fragment of two adjacent n8 tiles is exactly the A fragment of one k16 slice.
template <int D, int K>
__device__ __forceinline__ void MmaPV(float (&acc)[D / 8][4], const float (&p)[K / 8][4], const bf16* b) {
  const int lane = threadIdx.x & 31, mi = lane >> 3, r8 = lane & 7;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    const uint32_t af[4] = {Pack(p[2 * kk][0], p[2 * kk][1]), Pack(p[2 * kk][2], p[2 * kk][3]),
                            Pack(p[2 * kk + 1][0], p[2 * kk + 1][1]), Pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int n0 = 0; n0 < D; n0 += 16) {
      uint32_t bf[4];
      Ldsm4T(bf, b + Swz<D>(kk * 16 + r8 + (mi & 1) * 8, n0 + (mi >> 1) * 8));
      Mma(acc[n0 / 8], af, bf[0], bf[1]);
      Mma(acc[n0 / 8 + 1], af, bf[2], bf[3]);
    }
  }
}

// A warp's 16×D accumulator · factor → its rows of a swizzled tile (for a coalesced store).
template <int D>
__device__ __forceinline__ void AccToTile(const float (&acc)[D / 8][4], float f0, float f1, bf16* tile, int row0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    *reinterpret_cast<uint32_t*>(tile + Swz<D>(row0 + g, dt * 8) + 2 * tq) = Pack(acc[dt][0] * f0, acc[dt][1] * f0);
    *reinterpret_cast<uint32_t*>(tile + Swz<D>(row0 + g + 8, dt * 8) + 2 * tq) = Pack(acc[dt][2] * f1, acc[dt][3] * f1);
  }
}

// Offsets of query head bh = b·heads + h (q, y, lse) and of the key/value head it reads.
struct HeadPtrs {
  int64_t bh, q_off, kv_off, y_off;
};
__device__ __forceinline__ HeadPtrs QueryHead(const Params& p, int64_t bh) {
  const int64_t b = bh / p.heads, h = bh % p.heads;
  return {bh, b * p.qkv.batch_stride + h * p.qkv.head_stride,
          b * p.kvl.batch_stride + (h / p.group) * p.kvl.head_stride, b * p.yl.batch_stride + h * p.yl.head_stride};
}
__device__ __forceinline__ HeadPtrs Head(const Params& p) { return QueryHead(p, blockIdx.y); }

// delta[bh, t] = Σ_d dy·y (the softmax backward's row term), one warp per row.
template <int D>
__global__ void __launch_bounds__(kThreads) FlashDeltaKernel(Params p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= p.batch * p.heads * p.seq) return;
  const int64_t bh = row / p.seq, t = row % p.seq, b = bh / p.heads, h = bh % p.heads;
  const int64_t off = b * p.yl.batch_stride + h * p.yl.head_stride + t * p.yl.row_stride;
  float acc = 0.f;
#pragma unroll
  for (int d = lane * 2; d < D; d += 64) {
    const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p.y + off + d));
    const float2 dy = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p.dy + off + d));
    acc += y.x * dy.x + y.y * dy.y;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) p.delta[row] = acc;
}

// One block: 64 keys of one key/value head (dk, dv); for each query head of its group in turn,
// query tiles of BQ rows from the diagonal to the end (one flattened, double-buffered loop, so
// the group's dk/dv sum stays in registers: no atomics). Each warp computes Sᵀ = K·Qᵀ for its
// 16 keys, so Pᵀ and dSᵀ are ready-made A operands.
template <int D, int BQ>
__global__ void __launch_bounds__(kThreads) FlashBackwardKvKernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + kTile * D;
  bf16* sQ = sV + kTile * D;    // 2 stages
  bf16* sDo = sQ + 2 * BQ * D;  // 2 stages
  const int k0 = blockIdx.x * kTile;  // block 0 has the most query tiles: launched first
  const int64_t kvh = blockIdx.y, b = kvh / (p.heads / p.group), h0 = (kvh % (p.heads / p.group)) * p.group;
  const int64_t kv_off = b * p.kvl.batch_stride + (h0 / p.group) * p.kvl.head_stride;
  const int64_t rs = p.qkv.row_stride, yrs = p.yl.row_stride, krs = p.kvl.row_stride, T = p.seq;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;

  const int i0 = k0 / BQ, n_qt = static_cast<int>((T + BQ - 1) / BQ), per_head = n_qt - i0;
  const int n_it = per_head * static_cast<int>(p.group);
  // Query head gi of the group: its q, dO, lse and delta rows.
  auto q_of = [&](int gi) { return p.q + QueryHead(p, b * p.heads + h0 + gi).q_off; };
  auto dy_of = [&](int gi) { return p.dy + QueryHead(p, b * p.heads + h0 + gi).y_off; };
  LoadTile<D, kTile>(sK, p.k + kv_off, krs, k0, T);
  LoadTile<D, kTile>(sV, p.v + kv_off, krs, k0, T);
  LoadTile<D, BQ>(sQ, q_of(0), rs, i0 * BQ, T);
  LoadTile<D, BQ>(sDo, dy_of(0), yrs, i0 * BQ, T);
  CpAsyncCommit();

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const int key0 = k0 + warp * 16 + g;  // this thread's keys: key0, key0 + 8
  for (int it = 0; it < n_it; ++it) {
    const int st = it & 1, gi = it / per_head, i = i0 + it % per_head;
    const int64_t bh = b * p.heads + h0 + gi;
    const float* lse = p.lse + bh * T;
    const float* delta = p.delta + bh * T;
    if (it + 1 < n_it) {
      const int gn = (it + 1) / per_head, in = i0 + (it + 1) % per_head;
      LoadTile<D, BQ>(sQ + (st ^ 1) * BQ * D, q_of(gn), rs, in * BQ, T);
      LoadTile<D, BQ>(sDo + (st ^ 1) * BQ * D, dy_of(gn), yrs, in * BQ, T);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const bf16* cQ = sQ + st * BQ * D;
    const bf16* cDo = sDo + st * BQ * D;
    float s[BQ / 8][4] = {}, dp[BQ / 8][4] = {};
    MmaABt<D, BQ>(s, sK, warp * 16, cQ);   // Sᵀ = K·Qᵀ
    MmaABt<D, BQ>(dp, sV, warp * 16, cDo);  // dPᵀ = V·dOᵀ
    const bool edge = i * BQ < k0 + kTile || (i + 1) * BQ > T;  // diagonal or past the end
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int qi = i * BQ + nt * 8 + 2 * tq + c;
        const bool in = qi < T;
        const float l = in ? __ldg(lse + qi) : 0.f, dl = in ? __ldg(delta + qi) : 0.f;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int e = r * 2 + c;
          float pv = exp2f(s[nt][e] * p.scale_log2 - l);
          if (edge && (!in || key0 + r * 8 > qi)) pv = 0.f;
          s[nt][e] = pv;
          dp[nt][e] = pv * (dp[nt][e] - dl);  // dSᵀ
        }
      }
    MmaPV<D, BQ>(dv, s, cDo);  // dV += Pᵀ·dO
    MmaPV<D, BQ>(dk, dp, cQ);  // dK += dSᵀ·Q
    __syncthreads();
  }
  AccToTile<D>(dk, p.scale, p.scale, sK, warp * 16);
  AccToTile<D>(dv, 1.f, 1.f, sV, warp * 16);
  __syncthreads();
  StoreTile<D, kTile>(sK, p.dk + kv_off, krs, k0, T);
  StoreTile<D, kTile>(sV, p.dv + kv_off, krs, k0, T);
}

// One block: 64 queries of one head (dq); key tiles of BK rows from 0 to the diagonal.
template <int D, int BK>
__global__ void __launch_bounds__(kThreads) FlashBackwardQKernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sDo = sQ + kTile * D;
  bf16* sK = sDo + kTile * D;  // 2 stages
  bf16* sV = sK + 2 * BK * D;  // 2 stages
  const int qt = gridDim.x - 1 - blockIdx.x;
  const int q0 = qt * kTile;
  const HeadPtrs hp = Head(p);
  const int64_t rs = p.qkv.row_stride, krs = p.kvl.row_stride, T = p.seq;
  const bf16* k = p.k + hp.kv_off;
  const bf16* v = p.v + hp.kv_off;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;

  LoadTile<D, kTile>(sQ, p.q + hp.q_off, rs, q0, T);
  LoadTile<D, kTile>(sDo, p.dy + hp.y_off, p.yl.row_stride, q0, T);
  LoadTile<D, BK>(sK, k, krs, 0, T);
  LoadTile<D, BK>(sV, v, krs, 0, T);
  CpAsyncCommit();

  const int row0 = q0 + warp * 16 + g;
  float l[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool in = row0 + r * 8 < T;
    l[r] = in ? p.lse[hp.bh * T + row0 + r * 8] : 0.f;
    dl[r] = in ? p.delta[hp.bh * T + row0 + r * 8] : 0.f;
  }
  const int n_kt_seq = static_cast<int>((T + BK - 1) / BK), n_kt_causal = (q0 + kTile - 1) / BK + 1;
  const int n_kt = n_kt_seq < n_kt_causal ? n_kt_seq : n_kt_causal;
  float dq[D / 8][4] = {};
  for (int j = 0; j < n_kt; ++j) {
    PrefetchNextKvAndWait<D, BK>(sK, sV, k, v, krs, j, n_kt, T);
    const bf16* cK = sK + (j & 1) * BK * D;
    const bf16* cV = sV + (j & 1) * BK * D;
    float s[BK / 8][4] = {}, dp[BK / 8][4] = {};
    MmaABt<D, BK>(s, sQ, warp * 16, cK);    // S = Q·Kᵀ
    MmaABt<D, BK>(dp, sDo, warp * 16, cV);  // dP = dO·Vᵀ
    const bool edge = (j + 1) * BK > q0 || q0 + kTile > T;
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j * BK + nt * 8 + 2 * tq + (e & 1), row = row0 + (e >> 1) * 8;
        float pv = exp2f(s[nt][e] * p.scale_log2 - l[e >> 1]);
        if (edge && (key > row || row >= T)) pv = 0.f;
        s[nt][e] = pv * (dp[nt][e] - dl[e >> 1]);  // dS
      }
    MmaPV<D, BK>(dq, s, cK);  // dQ += dS·K
    __syncthreads();
  }
  AccToTile<D>(dq, p.scale, p.scale, sQ, warp * 16);
  __syncthreads();
  StoreTile<D, kTile>(sQ, p.dq + hp.q_off, rs, q0, T);
}

// ---------------------------------------------------------------------------------------------
// The forward.
//
// Forward: a warp owns 32 query rows (two m16 fragments), so every K/V fragment it reads from
// shared memory feeds twice the MMAs. Blocks own 128 queries; key tiles wholly after a warp's
// rows are skipped by that warp, the causal mask is applied only on the tiles that cross a
// warp's diagonal, and the score scale is folded into the exp2 argument (one FFMA per score).
// On the H200 this gained only 2–3% over the 64-query blocks: at 254 registers two blocks fit
// per SM, and the exp2 work does not overlap the MMAs of the same warp.
//
// Fragments of rows a_row0..a_row0+16·MR−1 of a [rows][D] tile as MMA A operands, one per k16.
template <int D, int MR>
__device__ __forceinline__ void LoadAFrags(uint32_t (&af)[MR][D / 16][4], const bf16* a, int a_row0) {
  const int lane = threadIdx.x & 31, mi = lane >> 3, r8 = lane & 7;
#pragma unroll
  for (int m = 0; m < MR; ++m)
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      Ldsm4(af[m][kk], a + Swz<D>(a_row0 + m * 16 + r8 + (mi & 1) * 8, kk * 16 + (mi >> 1) * 8));
}

// acc[MR][16×N] += A·Bᵀ, A = MR 16-row fragments (registers, or rows a_row0.. of tile a when
// kARegs is false), B = rows 0..N-1 of tile b. Each B fragment is loaded once for MR MMAs.
template <int D, int N, int MR, bool kARegs>
__device__ __forceinline__ void MmaABtM(float (&acc)[MR][N / 8][4], const uint32_t (&areg)[kARegs ? MR : 1][kARegs ? D / 16 : 1][4],
                                        const bf16* a, int a_row0, const bf16* b) {
  const int lane = threadIdx.x & 31, mi = lane >> 3, r8 = lane & 7;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t af[MR][4];
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      if constexpr (kARegs) {
#pragma unroll
        for (int x = 0; x < 4; ++x) af[m][x] = areg[m][kk][x];
      } else {
        Ldsm4(af[m], a + Swz<D>(a_row0 + m * 16 + r8 + (mi & 1) * 8, kk * 16 + (mi >> 1) * 8));
      }
    }
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += 16) {
      uint32_t bf[4];
      Ldsm4(bf, b + Swz<D>(n0 + r8 + (mi >> 1) * 8, kk * 16 + (mi & 1) * 8));
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        Mma(acc[m][n0 / 8], af[m], bf[0], bf[1]);
        Mma(acc[m][n0 / 8 + 1], af[m], bf[2], bf[3]);
      }
    }
  }
}

// acc[MR][16×D] += P·B, P [MR][16×K] as C fragments (rounded to BF16 here), B = rows 0..K-1.
template <int D, int K, int MR>
__device__ __forceinline__ void MmaPVM(float (&acc)[MR][D / 8][4], const float (&p)[MR][K / 8][4], const bf16* b) {
  const int lane = threadIdx.x & 31, mi = lane >> 3, r8 = lane & 7;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t af[MR][4];
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      af[m][0] = Pack(p[m][2 * kk][0], p[m][2 * kk][1]);
      af[m][1] = Pack(p[m][2 * kk][2], p[m][2 * kk][3]);
      af[m][2] = Pack(p[m][2 * kk + 1][0], p[m][2 * kk + 1][1]);
      af[m][3] = Pack(p[m][2 * kk + 1][2], p[m][2 * kk + 1][3]);
    }
#pragma unroll
    for (int n0 = 0; n0 < D; n0 += 16) {
      uint32_t bf[4];
      Ldsm4T(bf, b + Swz<D>(kk * 16 + r8 + (mi & 1) * 8, n0 + (mi >> 1) * 8));
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        Mma(acc[m][n0 / 8], af[m], bf[0], bf[1]);
        Mma(acc[m][n0 / 8 + 1], af[m], bf[2], bf[3]);
      }
    }
  }
}

constexpr int kFwdRows = 128;  // queries per forward block: 32 per warp
// Keys per forward K/V tile: 32 at D = 128, where a 64-key score tile (64 more registers beside
// the 128 of o) made ptxas spill.
template <int D>
constexpr int kFwdKeys = D == 128 ? 32 : 64;

template <int D, int BK>
__global__ void __launch_bounds__(kThreads) FlashForwardWideKernel(Params p) {
  constexpr int MR = 2;
  constexpr bool kQRegs = D <= 64;  // 32 registers at D = 64; at 128 they would crowd out o and s
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + kFwdRows * D;  // 2 stages
  bf16* sV = sK + 2 * BK * D;    // 2 stages
  const int qt = gridDim.x - 1 - blockIdx.x;  // longest causal rows first
  const int q0 = qt * kFwdRows;
  const HeadPtrs hp = Head(p);
  const int64_t rs = p.qkv.row_stride, krs = p.kvl.row_stride, T = p.seq;
  const bf16* q = p.q + hp.q_off;
  const bf16* k = p.k + hp.kv_off;
  const bf16* v = p.v + hp.kv_off;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int wrow = warp * 16 * MR;  // this warp's first row in the tile

  LoadTile<D, kFwdRows>(sQ, q, rs, q0, T);
  LoadTile<D, BK>(sK, k, krs, 0, T);
  LoadTile<D, BK>(sV, v, krs, 0, T);
  CpAsyncCommit();

  const float sl2 = p.scale_log2;
  float o[MR][D / 8][4] = {};
  float m[MR][2], l[MR][2];
#pragma unroll
  for (int i = 0; i < MR; ++i) m[i][0] = m[i][1] = -INFINITY, l[i][0] = l[i][1] = 0.f;
  uint32_t qf[kQRegs ? MR : 1][kQRegs ? D / 16 : 1][4];
  const int n_kt_seq = static_cast<int>((T + BK - 1) / BK), n_kt_causal = (q0 + kFwdRows - 1) / BK + 1;
  const int n_kt = n_kt_seq < n_kt_causal ? n_kt_seq : n_kt_causal;
  for (int j = 0; j < n_kt; ++j) {
    PrefetchNextKvAndWait<D, BK>(sK, sV, k, v, krs, j, n_kt, T);
    if constexpr (kQRegs) {
      if (j == 0) LoadAFrags<D, MR>(qf, sQ, wrow);
    }
    const int key0 = j * BK;
    if (key0 <= q0 + wrow + 16 * MR - 1) {  // else every key of the tile is after this warp's rows
      const bf16* cK = sK + (j & 1) * BK * D;
      const bf16* cV = sV + (j & 1) * BK * D;
      float s[MR][BK / 8][4] = {};
      MmaABtM<D, BK, MR, kQRegs>(s, qf, sQ, wrow, cK);
      const bool mask = key0 + BK - 1 > q0 + wrow;  // the tile crosses this warp's diagonal (or T)
#pragma unroll
      for (int i = 0; i < MR; ++i) {
        float mx[2] = {m[i][0], m[i][1]};
        const int row = q0 + wrow + i * 16 + g;  // and row + 8
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (mask && key0 + nt * 8 + 2 * tq + (e & 1) > row + (e >> 1) * 8) s[i][nt][e] = -INFINITY;
            mx[e >> 1] = fmaxf(mx[e >> 1], s[i][nt][e]);
          }
        // Raw-score maxima: tile 0 always holds key 0 ≤ every row, so mx is finite from the
        // first tile on and exp2((m − mx)·scale) is 0 there, never NaN.
        float alpha[2], neg_mx[2], sum[2] = {0.f, 0.f};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
          alpha[r] = exp2f((m[i][r] - mx[r]) * sl2);
          m[i][r] = mx[r];
          neg_mx[r] = -mx[r] * sl2;
        }
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[i][nt][e] = exp2f(fmaf(s[i][nt][e], sl2, neg_mx[e >> 1]));
            sum[e >> 1] += s[i][nt][e];
          }
        l[i][0] = l[i][0] * alpha[0] + sum[0];
        l[i][1] = l[i][1] * alpha[1] + sum[1];
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          o[i][dt][0] *= alpha[0], o[i][dt][1] *= alpha[0];
          o[i][dt][2] *= alpha[1], o[i][dt][3] *= alpha[1];
        }
      }
      MmaPVM<D, BK, MR>(o, s, cV);
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }
#pragma unroll
  for (int i = 0; i < MR; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[i][r] += __shfl_xor_sync(0xffffffffu, l[i][r], 1);
      l[i][r] += __shfl_xor_sync(0xffffffffu, l[i][r], 2);
      const int row = q0 + wrow + i * 16 + g + r * 8;
      if (tq == 0 && row < T) p.lse_out[hp.bh * T + row] = m[i][r] * sl2 + log2f(l[i][r]);
    }
    AccToTile<D>(o[i], 1.f / l[i][0], 1.f / l[i][1], sQ, wrow + i * 16);
  }
  __syncthreads();
  StoreTile<D, kFwdRows>(sQ, p.out + hp.y_off, p.yl.row_stride, q0, T);
}

// Query tile of the dk/dv kernel and key tile of the dq kernel: smaller at D = 128 so the two
// D-wide accumulators plus the score fragments stay in registers.
template <int D>
constexpr int kBwdInner = D == 128 ? 32 : 64;

template <typename Kernel>
Status Launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t s, const Params& p) {
  if (smem > 48 * 1024)
    FP8_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, s>>>(p);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

unsigned Blocks(int64_t n, int64_t per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

template <int D>
Status Forward(const Params& p, int64_t batch, cudaStream_t s) {
  constexpr int BK = kFwdKeys<D>;
  return Launch(FlashForwardWideKernel<D, BK>, dim3(Blocks(p.seq, kFwdRows), static_cast<unsigned>(batch * p.heads)),
                sizeof(bf16) * (kFwdRows + 4 * BK) * D, s, p);
}

// The backward's two kernels, one owning a key tile (dk, dv), one a query tile (dq); each the
// wgmma kernel where `choice` allows it and it handles the arguments, else the mma.sync one.
// The wgmma kernels read q and k/v through tensor maps of their own layouts: both must suit TMA
// (the Uses* checks below look at one layout).
bool KvLayoutSuitsTma(const Params& p, int64_t head_dim) {
  const AttentionDims dims{p.batch, p.heads, p.seq, head_dim, p.heads / p.group};
  return internal::FlashAttentionForwardWgmmaHandles(dims, p.kvl, p.q, p.k, p.v);
}
AttentionDims DimsOf(const Params& p, int64_t head_dim) {
  return {p.batch, p.heads, p.seq, head_dim, p.heads / p.group};
}

template <int D>
Status BackwardDkDv(const Params& p, AttentionKernelChoice choice, cudaStream_t s) {
  const AttentionDims dims = DimsOf(p, D);
  if (FlashAttentionBackwardUsesWgmmaDkDv(dims, p.qkv, p.yl, p.q, p.k, p.v, p.dy, choice) && KvLayoutSuitsTma(p, D))
    return internal::FlashAttentionBackwardDkDvWgmma(dims, p.q, p.qkv, p.k, p.v, p.kvl, p.dy, p.yl, p.lse, p.delta, p.dk,
                                                     p.dv, s);
  constexpr int kInner = kBwdInner<D>;
  return Launch(FlashBackwardKvKernel<D, kInner>,
                dim3(Blocks(p.seq, kTile), static_cast<unsigned>(p.batch * (p.heads / p.group))),
                sizeof(bf16) * (2 * kTile + 4 * kInner) * D, s, p);
}
template <int D>
Status BackwardDq(const Params& p, AttentionKernelChoice choice, cudaStream_t s) {
  const AttentionDims dims = DimsOf(p, D);
  if (FlashAttentionBackwardUsesWgmmaDq(dims, p.qkv, p.yl, p.q, p.k, p.v, p.dy, choice) && KvLayoutSuitsTma(p, D))
    return internal::FlashAttentionBackwardDqWgmma(dims, p.q, p.qkv, p.k, p.v, p.kvl, p.dy, p.yl, p.lse, p.delta, p.dq, s);
  constexpr int kInner = kBwdInner<D>;
  return Launch(FlashBackwardQKernel<D, kInner>, dim3(Blocks(p.seq, kTile), static_cast<unsigned>(p.batch * p.heads)),
                sizeof(bf16) * (2 * kTile + 4 * kInner) * D, s, p);
}

template <int D>
Status Backward(const Params& p, int64_t batch, AttentionKernelChoice choice, cudaStream_t s) {
  FP8_RETURN_IF_ERROR(Launch(FlashDeltaKernel<D>, dim3(Blocks(batch * p.heads * p.seq, kWarps)), 0, s, p));
  FP8_RETURN_IF_ERROR(BackwardDkDv<D>(p, choice, s));
  return BackwardDq<D>(p, choice, s);
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

Status Check(const AttentionDims& d, HeadLayout qkv, HeadLayout kvl, HeadLayout yl,
             std::initializer_list<const void*> ptrs) {
  if (d.kv_heads < 0 || KvHeads(d) < 1 || d.heads % KvHeads(d) != 0)
    return InvalidArgumentError("flash attention: kv_heads " + std::to_string(d.kv_heads) + " does not divide heads " +
                                std::to_string(d.heads));
  if (!FlashAttentionSupportsHeadDim(d.head_dim))
    return InvalidArgumentError("flash attention: head_dim " + std::to_string(d.head_dim) + " (want 32, 64 or 128)");
  if (d.batch < 1 || d.heads < 1 || d.seq < 1)
    return InvalidArgumentError("flash attention: batch, heads and seq must be positive");
  if (d.batch * d.heads > 65535 || d.seq > (int64_t{1} << 30))
    return InvalidArgumentError("flash attention: batch·heads " + std::to_string(d.batch * d.heads) + " over 65535 or seq too long");
  for (const HeadLayout& l : {qkv, kvl, yl})
    if (l.batch_stride % 8 || l.head_stride % 8 || l.row_stride % 8 || l.row_stride < d.head_dim)
      return InvalidArgumentError("flash attention: strides must be multiples of 8 elements (16-byte rows) and row_stride ≥ head_dim");
  for (const void* ptr : ptrs)
    if (!Aligned16(ptr)) return InvalidArgumentError("flash attention: a tensor pointer is not 16-byte aligned");
  return OkStatus();
}

Params MakeParams(const AttentionDims& d, HeadLayout qkv, HeadLayout kvl, HeadLayout yl) {
  Params p{};
  p.batch = d.batch;
  p.heads = d.heads;
  p.seq = d.seq;
  p.group = d.heads / KvHeads(d);
  p.qkv = qkv;
  p.kvl = kvl;
  p.yl = yl;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
  p.scale_log2 = p.scale * kLog2e;
  return p;
}

}  // namespace

bool FlashAttentionSupportsHeadDim(int64_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128;
}

int64_t FlashAttentionBackwardScratchFloats(const AttentionDims& dims) {
  return dims.batch * dims.heads * dims.seq;  // rowsum(dy∘y)
}

// Head dims whose wgmma kernels run (where they handle the arguments). Measured on the H200
// (docs/perf-history.md, "Flash attention"): forward 0.183 vs 0.247 ms at hd 64 (B32 H12 T1024),
// 0.284 vs 0.594 ms at hd 128 (B4 H32 T2048); dK/dV alone 0.266 vs 0.517 ms at hd 64 and 0.479
// vs 1.377 ms at hd 128; the dQ kernel took the bf16 step from 62.7 to 61.5 ms (124M) and from
// 181.8 to 178.2 ms (d4096).
static bool WgmmaHeadDim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

bool FlashAttentionForwardUsesWgmma(const AttentionDims& dims, HeadLayout qkv, const void* q, const void* k,
                                    const void* v, AttentionKernelChoice choice) {
  return choice.wgmma_forward && WgmmaHeadDim(dims.head_dim) &&
         internal::FlashAttentionForwardWgmmaHandles(dims, qkv, q, k, v);
}

bool FlashAttentionBackwardUsesWgmmaDq(const AttentionDims& dims, HeadLayout qkv, HeadLayout yl, const void* q,
                                       const void* k, const void* v, const void* dy, AttentionKernelChoice choice) {
  return choice.wgmma_dq && WgmmaHeadDim(dims.head_dim) &&
         internal::FlashAttentionDqWgmmaHandles(dims, qkv, yl, q, k, v, dy);
}

bool FlashAttentionBackwardUsesWgmmaDkDv(const AttentionDims& dims, HeadLayout qkv, HeadLayout yl, const void* q,
                                         const void* k, const void* v, const void* dy, AttentionKernelChoice choice) {
  return choice.wgmma_dkdv && WgmmaHeadDim(dims.head_dim) &&
         internal::FlashAttentionDqWgmmaHandles(dims, qkv, yl, q, k, v, dy);  // the same TMA conditions
}

namespace internal {

Status FlashAttentionBackwardDkDvAlone(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v,
                                       HeadLayout qkv, const bf16* dy, HeadLayout yl, const float* lse,
                                       const float* delta, bf16* dk, bf16* dv, cudaStream_t s,
                                       AttentionKernelChoice choice) {
  FP8_RETURN_IF_ERROR(Check(dims, qkv, qkv, yl, {q, k, v, dy, dk, dv}));
  Params p = MakeParams(dims, qkv, qkv, yl);
  p.q = q, p.k = k, p.v = v, p.dy = dy, p.lse = lse, p.delta = const_cast<float*>(delta), p.dk = dk, p.dv = dv;
  switch (dims.head_dim) {
    case 32: return BackwardDkDv<32>(p, choice, s);
    case 64: return BackwardDkDv<64>(p, choice, s);
    default: return BackwardDkDv<128>(p, choice, s);
  }
}

Status FlashAttentionBackwardDqAlone(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v,
                                     HeadLayout qkv, const bf16* dy, HeadLayout yl, const float* lse, const float* delta,
                                     bf16* dq, cudaStream_t s, AttentionKernelChoice choice) {
  FP8_RETURN_IF_ERROR(Check(dims, qkv, qkv, yl, {q, k, v, dy, dq}));
  Params p = MakeParams(dims, qkv, qkv, yl);
  p.q = q, p.k = k, p.v = v, p.dy = dy, p.lse = lse, p.delta = const_cast<float*>(delta), p.dq = dq;
  switch (dims.head_dim) {
    case 32: return BackwardDq<32>(p, choice, s);
    case 64: return BackwardDq<64>(p, choice, s);
    default: return BackwardDq<128>(p, choice, s);
  }
}

}  // namespace internal

Status FlashAttentionForward(const AttentionDims& dims, const bf16* q, HeadLayout ql, const bf16* k, const bf16* v,
                             HeadLayout kvl, bf16* y, HeadLayout yl, float* lse, cudaStream_t s,
                             AttentionKernelChoice choice) {
  FP8_RETURN_IF_ERROR(Check(dims, ql, kvl, yl, {q, k, v, y}));
  Params p = MakeParams(dims, ql, kvl, yl);
  p.q = q, p.k = k, p.v = v, p.out = y, p.lse_out = lse;
  if (FlashAttentionForwardUsesWgmma(dims, ql, q, k, v, choice) && KvLayoutSuitsTma(p, dims.head_dim))
    return internal::FlashAttentionForwardWgmma(dims, q, ql, k, v, kvl, y, yl, lse, s);
  switch (dims.head_dim) {
    case 32: return Forward<32>(p, dims.batch, s);
    case 64: return Forward<64>(p, dims.batch, s);
    default: return Forward<128>(p, dims.batch, s);
  }
}

Status FlashAttentionForward(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v,
                             HeadLayout qkv, bf16* y, HeadLayout yl, float* lse, cudaStream_t s,
                             AttentionKernelChoice choice) {
  return FlashAttentionForward(dims, q, qkv, k, v, qkv, y, yl, lse, s, choice);
}

Status FlashAttentionBackward(const AttentionDims& dims, const bf16* q, HeadLayout ql, const bf16* k, const bf16* v,
                              HeadLayout kvl, const bf16* y, const bf16* dy, HeadLayout yl, const float* lse,
                              float* scratch, bf16* dq, bf16* dk, bf16* dv, cudaStream_t s,
                              AttentionKernelChoice choice) {
  FP8_RETURN_IF_ERROR(Check(dims, ql, kvl, yl, {q, k, v, y, dy, dq, dk, dv}));
  Params p = MakeParams(dims, ql, kvl, yl);
  p.q = q, p.k = k, p.v = v, p.y = y, p.dy = dy, p.lse = lse, p.delta = scratch;
  p.dq = dq, p.dk = dk, p.dv = dv;
  switch (dims.head_dim) {
    case 32: return Backward<32>(p, dims.batch, choice, s);
    case 64: return Backward<64>(p, dims.batch, choice, s);
    default: return Backward<128>(p, dims.batch, choice, s);
  }
}

Status FlashAttentionBackward(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v,
                              HeadLayout qkv, const bf16* y, const bf16* dy, HeadLayout yl,
                              const float* lse, float* scratch, bf16* dq, bf16* dk, bf16* dv,
                              cudaStream_t s, AttentionKernelChoice choice) {
  return FlashAttentionBackward(dims, q, qkv, k, v, qkv, y, dy, yl, lse, scratch, dq, dk, dv, s, choice);
}

}  // namespace fp8::train::cuda
