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
  HeadLayout qkv, yl;
  float scale_log2;  // log2(e)/√hd: scores go through exp2
  float scale;       // 1/√hd, for dq and dk
  const bf16 *q, *k, *v, *y, *dy;
  bf16 *out, *dq, *dk, *dv;
  const float* lse;
  float* lse_out;
  float* delta;
  float* dq_acc;  // fused backward: FP32 dq, dense [B·H][T][D], unscaled
  int* turns;     // fused backward: per (head, query tile), how many key blocks have added to dq_acc
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

struct HeadPtrs {
  int64_t bh, qkv_off, y_off;
};
__device__ __forceinline__ HeadPtrs Head(const Params& p) {
  const int64_t bh = blockIdx.y, b = bh / p.heads, h = bh % p.heads;
  return {bh, b * p.qkv.batch_stride + h * p.qkv.head_stride, b * p.yl.batch_stride + h * p.yl.head_stride};
}

// One block: 64 queries of one head; key tiles 0..diagonal, double-buffered.
template <int D>
__global__ void __launch_bounds__(kThreads) FlashForwardKernel(Params p) {
  constexpr int BK = kTile;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + kTile * D;  // 2 stages
  bf16* sV = sK + 2 * BK * D;  // 2 stages
  const int qt = gridDim.x - 1 - blockIdx.x;  // heaviest (longest causal row) blocks first
  const int q0 = qt * kTile;
  const HeadPtrs hp = Head(p);
  const int64_t rs = p.qkv.row_stride, T = p.seq;
  const bf16* q = p.q + hp.qkv_off;
  const bf16* k = p.k + hp.qkv_off;
  const bf16* v = p.v + hp.qkv_off;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;

  LoadTile<D, kTile>(sQ, q, rs, q0, T);
  LoadTile<D, BK>(sK, k, rs, 0, T);
  LoadTile<D, BK>(sV, v, rs, 0, T);
  CpAsyncCommit();

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int row0 = q0 + warp * 16 + g;  // this thread's rows: row0, row0 + 8
  const int n_kt = qt + 1;
  for (int j = 0; j < n_kt; ++j) {
    PrefetchNextKvAndWait<D, BK>(sK, sV, k, v, rs, j, n_kt, T);
    const bf16* cK = sK + (j & 1) * BK * D;
    const bf16* cV = sV + (j & 1) * BK * D;
    float s[BK / 8][4] = {};
    MmaABt<D, BK>(s, sQ, warp * 16, cK);
    const bool diagonal = j == n_kt - 1;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * p.scale_log2;
        if (diagonal && j * BK + nt * 8 + 2 * tq + (e & 1) > row0 + (e >> 1) * 8) x = -INFINITY;
        s[nt][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    // Every visited tile holds a key ≤ each row (key tile j starts at or before the row), so
    // mx is finite and exp2(m − mx) is 0 on the first tile, never NaN.
    float alpha[2], sum[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      alpha[r] = exp2f(m[r] - mx[r]);
      m[r] = mx[r];
    }
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - mx[e >> 1]);
        sum[e >> 1] += s[nt][e];
      }
    // l stays a per-thread partial sum (the 4 threads of a row share alpha): reduced once at the end.
    l[0] = l[0] * alpha[0] + sum[0];
    l[1] = l[1] * alpha[1] + sum[1];
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= alpha[0], o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1], o[dt][3] *= alpha[1];
    }
    MmaPV<D, BK>(o, s, cV);
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  if (tq == 0) {
    if (row0 < T) p.lse_out[hp.bh * T + row0] = m[0] + log2f(l[0]);
    if (row0 + 8 < T) p.lse_out[hp.bh * T + row0 + 8] = m[1] + log2f(l[1]);
  }
  AccToTile<D>(o, 1.f / l[0], 1.f / l[1], sQ, warp * 16);
  __syncthreads();
  StoreTile<D, kTile>(sQ, p.out + hp.y_off, p.yl.row_stride, q0, T);
}

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

// One block: 64 keys of one head (dk, dv); query tiles of BQ rows from the diagonal to the end.
// Each warp computes Sᵀ = K·Qᵀ for its 16 keys, so Pᵀ and dSᵀ are ready-made A operands.
template <int D, int BQ>
__global__ void __launch_bounds__(kThreads) FlashBackwardKvKernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + kTile * D;
  bf16* sQ = sV + kTile * D;    // 2 stages
  bf16* sDo = sQ + 2 * BQ * D;  // 2 stages
  const int k0 = blockIdx.x * kTile;  // block 0 has the most query tiles: launched first
  const HeadPtrs hp = Head(p);
  const int64_t rs = p.qkv.row_stride, yrs = p.yl.row_stride, T = p.seq;
  const bf16* q = p.q + hp.qkv_off;
  const bf16* dy = p.dy + hp.y_off;
  const float* lse = p.lse + hp.bh * T;
  const float* delta = p.delta + hp.bh * T;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;

  const int i0 = k0 / BQ, n_qt = static_cast<int>((T + BQ - 1) / BQ);
  LoadTile<D, kTile>(sK, p.k + hp.qkv_off, rs, k0, T);
  LoadTile<D, kTile>(sV, p.v + hp.qkv_off, rs, k0, T);
  LoadTile<D, BQ>(sQ, q, rs, i0 * BQ, T);
  LoadTile<D, BQ>(sDo, dy, yrs, i0 * BQ, T);
  CpAsyncCommit();

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const int key0 = k0 + warp * 16 + g;  // this thread's keys: key0, key0 + 8
  for (int i = i0; i < n_qt; ++i) {
    const int st = (i - i0) & 1;
    if (i + 1 < n_qt) {
      LoadTile<D, BQ>(sQ + (st ^ 1) * BQ * D, q, rs, (i + 1) * BQ, T);
      LoadTile<D, BQ>(sDo + (st ^ 1) * BQ * D, dy, yrs, (i + 1) * BQ, T);
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
  StoreTile<D, kTile>(sK, p.dk + hp.qkv_off, rs, k0, T);
  StoreTile<D, kTile>(sV, p.dv + hp.qkv_off, rs, k0, T);
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
  const int64_t rs = p.qkv.row_stride, T = p.seq;
  const bf16* k = p.k + hp.qkv_off;
  const bf16* v = p.v + hp.qkv_off;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;

  LoadTile<D, kTile>(sQ, p.q + hp.qkv_off, rs, q0, T);
  LoadTile<D, kTile>(sDo, p.dy + hp.y_off, p.yl.row_stride, q0, T);
  LoadTile<D, BK>(sK, k, rs, 0, T);
  LoadTile<D, BK>(sV, v, rs, 0, T);
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
    PrefetchNextKvAndWait<D, BK>(sK, sV, k, v, rs, j, n_kt, T);
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
  StoreTile<D, kTile>(sQ, p.dq + hp.qkv_off, rs, q0, T);
}

// ---------------------------------------------------------------------------------------------
// The wide forward (default; FP8_CUDA_FLASH_OLD=1 brings back the 64-query one above) and the
// one-pass backward (opt-in: FP8_CUDA_FLASH_BWD_FUSED=1; measured slower than the two kernels
// above on the H200, docs/performance.md "Flash attention").
//
// Forward: a warp owns 32 query rows (two m16 fragments), so every K/V fragment it reads from
// shared memory feeds twice the MMAs. Blocks own 128 queries; key tiles wholly after a warp's
// rows are skipped by that warp, the causal mask is applied only on the tiles that cross a
// warp's diagonal, and the score scale is folded into the exp2 argument (one FFMA per score).
// On the H200 this gained only 2–3% over the 64-query blocks: at 254 registers two blocks fit
// per SM, and the exp2 work does not overlap the MMAs of the same warp.
//
// Backward (fused): one pass per 64-key block. Sᵀ and dPᵀ are computed once per query tile; dK and dV
// accumulate in registers as before, and dS goes through shared memory to a dQ partial (dS·K)
// that is added into an FP32 accumulator. Those adds are ordered: for each (head, query tile)
// the key blocks add in descending key order (a per-tile turn counter, acquire/release), so the
// float sums, and therefore dq, are bitwise the same on every run. Descending order means a
// block's first query tile (its diagonal) never waits, and key block j's tile i waits only on
// block j+1's tile i, which that block reached one iteration earlier. Blocks of a head are
// launched highest key block first, so a block only ever waits on blocks dispatched before it.

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
  const int64_t rs = p.qkv.row_stride, T = p.seq;
  const bf16* q = p.q + hp.qkv_off;
  const bf16* k = p.k + hp.qkv_off;
  const bf16* v = p.v + hp.qkv_off;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int wrow = warp * 16 * MR;  // this warp's first row in the tile

  LoadTile<D, kFwdRows>(sQ, q, rs, q0, T);
  LoadTile<D, BK>(sK, k, rs, 0, T);
  LoadTile<D, BK>(sV, v, rs, 0, T);
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
    PrefetchNextKvAndWait<D, BK>(sK, sV, k, v, rs, j, n_kt, T);
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

// lse and delta of query rows q0..q0+BQ-1 (BQ ≤ 64) into shared memory with the Q/dO stage they
// belong to, so the softmax recompute reads them there instead of waiting on global loads in the
// middle of every iteration. Rows ≥ T read as 0.
template <int BQ>
__device__ __forceinline__ void LoadRowStats(float* s_lse, float* s_delta, const float* lse, const float* delta,
                                             int q0, int64_t T) {
  static_assert(BQ <= kThreads / 2, "one thread per row and statistic");
  const int t = threadIdx.x % (kThreads / 2);
  if (t >= BQ) return;
  const bool is_delta = threadIdx.x >= kThreads / 2, ok = q0 + t < T;
  const float* src = (is_delta ? delta : lse) + (ok ? q0 + t : 0);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SmemAddr((is_delta ? s_delta : s_lse) + t)), "l"(src),
               "r"(ok ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ int LoadAcquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void StoreRelease(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// MR: 16-key fragments per warp (BK = 64·MR keys per block); MR = 2 halves the shared-memory
// reads of the Q and dO tiles per MMA, at twice the dK/dV registers. kLazy: a tile's turn is
// passed on one iteration later, just before the block waits for its next turn, so the fence
// that publishes the adds finds them long completed instead of stalling the block on them.
template <int D, int BQ, int MR, bool kLazy>
__global__ void __launch_bounds__(kThreads) FlashBackwardFusedKernel(Params p) {
  constexpr int BK = 16 * MR * kWarps;
  constexpr bool kKvRegs = D <= 64 && MR == 1;  // K and V as A fragments in registers (32 of them at D = 64)
  // The dQ partial [BQ × D]: warps split its rows in 16s, and its columns when BQ < 64.
  constexpr int kRowGroups = BQ / 16, kColSplit = kWarps / kRowGroups, DC = D / kColSplit;
  static_assert(kRowGroups * kColSplit == kWarps && DC % 16 == 0, "dQ partial split");
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + BK * D;
  bf16* sQ = sV + BK * D;       // 2 stages
  bf16* sDo = sQ + 2 * BQ * D;  // 2 stages
  bf16* sDs = sDo + 2 * BQ * D;  // dSᵀ: [BK keys][BQ queries]
  float* sLse = reinterpret_cast<float*>(sDs + BK * BQ);  // 2 stages
  float* sDelta = sLse + 2 * BQ;                           // 2 stages
  const int n_kb = gridDim.x, kb = n_kb - 1 - blockIdx.x;  // highest keys first (see above)
  const int k0 = kb * BK;
  const HeadPtrs hp = Head(p);
  const int64_t rs = p.qkv.row_stride, yrs = p.yl.row_stride, T = p.seq;
  const int n_qt = static_cast<int>((T + BQ - 1) / BQ);
  const bf16* q = p.q + hp.qkv_off;
  const bf16* dy = p.dy + hp.y_off;
  const float* lse = p.lse + hp.bh * T;
  const float* delta = p.delta + hp.bh * T;
  float* dq_acc = p.dq_acc + hp.bh * T * D;
  int* turns = p.turns + hp.bh * n_qt;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int mi = lane >> 3, r8 = lane & 7;

  const int i0 = k0 / BQ;
  LoadTile<D, BK>(sK, p.k + hp.qkv_off, rs, k0, T);
  LoadTile<D, BK>(sV, p.v + hp.qkv_off, rs, k0, T);
  LoadTile<D, BQ>(sQ, q, rs, i0 * BQ, T);
  LoadTile<D, BQ>(sDo, dy, yrs, i0 * BQ, T);
  LoadRowStats<BQ>(sLse, sDelta, lse, delta, i0 * BQ, T);
  CpAsyncCommit();

  uint32_t kf[kKvRegs ? MR : 1][kKvRegs ? D / 16 : 1][4], vf[kKvRegs ? MR : 1][kKvRegs ? D / 16 : 1][4];
  float dk[MR][D / 8][4] = {}, dv[MR][D / 8][4] = {};
  const int wkey = warp * 16 * MR;        // this warp's first key row in the block
  const int key0 = k0 + wkey + g;         // this thread's keys: key0 + 16·m (+ 8)
  const int wr = warp % kRowGroups, wc = warp / kRowGroups;
  int prev_turn = 0;
  for (int i = i0; i < n_qt; ++i) {
    const int st = (i - i0) & 1;
    if (i + 1 < n_qt) {
      LoadTile<D, BQ>(sQ + (st ^ 1) * BQ * D, q, rs, (i + 1) * BQ, T);
      LoadTile<D, BQ>(sDo + (st ^ 1) * BQ * D, dy, yrs, (i + 1) * BQ, T);
      LoadRowStats<BQ>(sLse + (st ^ 1) * BQ, sDelta + (st ^ 1) * BQ, lse, delta, (i + 1) * BQ, T);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    if constexpr (kKvRegs) {
      if (i == i0) {
        LoadAFrags<D, MR>(kf, sK, wkey);
        LoadAFrags<D, MR>(vf, sV, wkey);
      }
    }
    const bf16* cQ = sQ + st * BQ * D;
    const bf16* cDo = sDo + st * BQ * D;
    float s[MR][BQ / 8][4] = {}, dp[MR][BQ / 8][4] = {};
    MmaABtM<D, BQ, MR, kKvRegs>(s, kf, sK, wkey, cQ);    // Sᵀ = K·Qᵀ
    MmaABtM<D, BQ, MR, kKvRegs>(dp, vf, sV, wkey, cDo);  // dPᵀ = V·dOᵀ
    const bool edge = i * BQ < k0 + BK || (i + 1) * BQ > T;  // diagonal or past the end
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int qi = i * BQ + nt * 8 + 2 * tq + c;
        const bool in = qi < T;
        const float lq = sLse[st * BQ + nt * 8 + 2 * tq + c], dl = sDelta[st * BQ + nt * 8 + 2 * tq + c];
#pragma unroll
        for (int m = 0; m < MR; ++m)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int e = r * 2 + c;
            float pv = exp2f(fmaf(s[m][nt][e], p.scale_log2, -lq));
            if (edge && (!in || key0 + m * 16 + r * 8 > qi)) pv = 0.f;
            s[m][nt][e] = pv;
            dp[m][nt][e] = pv * (dp[m][nt][e] - dl);  // dSᵀ
          }
      }
    // dSᵀ rows (keys) → shared memory, rounded to BF16 exactly as the dK GEMM below rounds it.
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<uint32_t*>(sDs + Swz<BQ>(wkey + m * 16 + g + r * 8, nt * 8) + 2 * tq) =
              Pack(dp[m][nt][2 * r], dp[m][nt][2 * r + 1]);
    MmaPVM<D, BQ, MR>(dv, s, cDo);  // dV += Pᵀ·dO
    MmaPVM<D, BQ, MR>(dk, dp, cQ);  // dK += dSᵀ·Q
    __syncthreads();  // sDs complete

    // dQ partial (rows wr·16.., columns wc·DC..) = dS·K: A = dS read transposed out of sDsᵀ.
    float dqp[DC / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t af[4];
      Ldsm4T(af, sDs + Swz<BQ>(kk * 16 + (mi >> 1) * 8 + r8, wr * 16 + (mi & 1) * 8));
#pragma unroll
      for (int n0 = 0; n0 < DC; n0 += 16) {
        uint32_t bf[4];
        Ldsm4T(bf, sK + Swz<D>(kk * 16 + r8 + (mi & 1) * 8, wc * DC + n0 + (mi >> 1) * 8));
        Mma(dqp[n0 / 8], af, bf[0], bf[1]);
        Mma(dqp[n0 / 8 + 1], af, bf[2], bf[3]);
      }
    }
    // Our turn on this query tile: after every key block above ours that reaches it.
    const int last_kb = min((i * BQ + BQ - 1) / BK, n_kb - 1);
    const int turn = last_kb - kb;
    if (threadIdx.x == 0) {
      if (kLazy && i > i0) {  // the previous tile's adds were ordered before us by a barrier
        __threadfence();
        StoreRelease(turns + i - 1, prev_turn + 1);
      }
      while (LoadAcquire(turns + i) != turn) __nanosleep(32);
    }
    prev_turn = turn;
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = static_cast<int64_t>(i) * BQ + wr * 16 + g + r * 8;
      if (row >= T) continue;
      float* dst = dq_acc + row * D + wc * DC + 2 * tq;
#pragma unroll
      for (int dt = 0; dt < DC / 8; ++dt) {
        const float2 val = make_float2(dqp[dt][2 * r], dqp[dt][2 * r + 1]);
        if (turn == 0) *reinterpret_cast<float2*>(dst + dt * 8) = val;  // first: no zeroing pass
        else atomicAdd(reinterpret_cast<float2*>(dst + dt * 8), val);   // serialised by the turn
      }
    }
    // Release (as CUTLASS's semaphores do): the barrier orders every thread's adds before thread
    // 0's fence, whose cumulativity publishes them with the counter. The barrier also keeps sDs
    // and this stage from being rewritten while a warp still reads them.
    __syncthreads();
    if (threadIdx.x == 0 && (!kLazy || i == n_qt - 1)) {
      __threadfence();
      StoreRelease(turns + i, turn + 1);
    }
  }
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    AccToTile<D>(dk[m], p.scale, p.scale, sK, wkey + m * 16);
    AccToTile<D>(dv[m], 1.f, 1.f, sV, wkey + m * 16);
  }
  __syncthreads();
  StoreTile<D, BK>(sK, p.dk + hp.qkv_off, rs, k0, T);
  StoreTile<D, BK>(sV, p.dv + hp.qkv_off, rs, k0, T);
}

// dq (BF16, layout qkv) = scale · dq_acc; one thread per 8 elements.
template <int D>
__global__ void __launch_bounds__(256) FlashDqStoreKernel(Params p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.batch * p.heads * p.seq * (D / 8)) return;
  const int64_t c = (i % (D / 8)) * 8, row = i / (D / 8), bh = row / p.seq, t = row % p.seq;
  const float4* src = reinterpret_cast<const float4*>(p.dq_acc + row * D + c);
  const float4 a = src[0], b = src[1];
  const float f = p.scale;
  const uint4 out = {Pack(a.x * f, a.y * f), Pack(a.z * f, a.w * f), Pack(b.x * f, b.y * f), Pack(b.z * f, b.w * f)};
  const int64_t off = (bh / p.heads) * p.qkv.batch_stride + (bh % p.heads) * p.qkv.head_stride + t * p.qkv.row_stride + c;
  *reinterpret_cast<uint4*>(p.dq + off) = out;
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

// FP8_CUDA_FLASH_OLD=1 (read on every call, so a bench can flip it): the previous kernels (64-row
// forward blocks, two-kernel backward; the backward is the default one), for before/after runs.
bool UseOldKernels() {
  const char* e = std::getenv("FP8_CUDA_FLASH_OLD");
  return e != nullptr && *e != '\0' && *e != '0';
}

// Variant overrides for tuning runs of bench_attention_cuda: FP8_CUDA_FLASH_FWD_KEYS=64: 64-key
// forward tiles at D = 128. With FP8_CUDA_FLASH_BWD_FUSED=1 (the one-pass backward): at D = 64,
// FP8_CUDA_FLASH_BWD_BQ=32 (32-query tiles) or FP8_CUDA_FLASH_BWD_KEYS=128 (128-key blocks, 32 keys
// per warp, 32-query tiles); FP8_CUDA_FLASH_BWD_LAZY=1: deferred turn release.
bool EnvIs(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e != nullptr && std::string(e) == value;
}

bool UseFusedBackward() { return EnvIs("FP8_CUDA_FLASH_BWD_FUSED", "1") && !UseOldKernels(); }

unsigned Blocks(int64_t n, int64_t per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

template <int D, int BK>
Status ForwardWide(const Params& p, unsigned bh, cudaStream_t s) {
  return Launch(FlashForwardWideKernel<D, BK>, dim3(Blocks(p.seq, kFwdRows), bh), sizeof(bf16) * (kFwdRows + 4 * BK) * D, s, p);
}

template <int D>
Status Forward(const Params& p, int64_t batch, cudaStream_t s) {
  const unsigned bh = static_cast<unsigned>(batch * p.heads);
  if (UseOldKernels())
    return Launch(FlashForwardKernel<D>, dim3(Blocks(p.seq, kTile), bh), sizeof(bf16) * (kTile + 4 * kTile) * D, s, p);
  if constexpr (D == 128)
    if (EnvIs("FP8_CUDA_FLASH_FWD_KEYS", "64")) return ForwardWide<D, 64>(p, bh, s);
  return ForwardWide<D, kFwdKeys<D>>(p, bh, s);
}

// Query tile of the fused backward: 32 at D = 128 so dK, dV (128 registers) and the score tiles fit.
template <int D>
constexpr int kFusedBq = D == 128 ? 32 : 64;

template <int D, int BQ, int MR, bool kLazy = false>
Status BackwardFused(const Params& p, unsigned bh, cudaStream_t s) {
  constexpr int BK = 16 * MR * kWarps;
  FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(p.turns, 0, sizeof(int) * bh * Blocks(p.seq, BQ), s));
  FP8_RETURN_IF_ERROR(Launch(FlashBackwardFusedKernel<D, BQ, MR, kLazy>, dim3(Blocks(p.seq, BK), bh),
                             sizeof(bf16) * ((2 * BK + 4 * BQ) * D + BK * BQ) + sizeof(float) * 4 * BQ, s, p));
  const int64_t chunks = static_cast<int64_t>(bh) * p.seq * (D / 8);
  FlashDqStoreKernel<D><<<Blocks(chunks, 256), 256, 0, s>>>(p);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

// The two-kernel backward's halves, each the wgmma kernel where the environment selects it and it
// handles the arguments, else the mma.sync one.
template <int D>
Status BackwardDkDv(const Params& p, cudaStream_t s) {
  const AttentionDims dims{p.batch, p.heads, p.seq, D};
  if (FlashAttentionBackwardUsesWgmmaDkDv(dims, p.qkv, p.yl, p.q, p.k, p.v, p.dy))
    return internal::FlashAttentionBackwardDkDvWgmma(dims, p.q, p.k, p.v, p.qkv, p.dy, p.yl, p.lse, p.delta, p.dk, p.dv, s);
  constexpr int kInner = kBwdInner<D>;
  return Launch(FlashBackwardKvKernel<D, kInner>, dim3(Blocks(p.seq, kTile), static_cast<unsigned>(p.batch * p.heads)),
                sizeof(bf16) * (2 * kTile + 4 * kInner) * D, s, p);
}
template <int D>
Status BackwardDq(const Params& p, cudaStream_t s) {
  const AttentionDims dims{p.batch, p.heads, p.seq, D};
  if (FlashAttentionBackwardUsesWgmmaDq(dims, p.qkv, p.yl, p.q, p.k, p.v, p.dy))
    return internal::FlashAttentionBackwardDqWgmma(dims, p.q, p.k, p.v, p.qkv, p.dy, p.yl, p.lse, p.delta, p.dq, s);
  constexpr int kInner = kBwdInner<D>;
  return Launch(FlashBackwardQKernel<D, kInner>, dim3(Blocks(p.seq, kTile), static_cast<unsigned>(p.batch * p.heads)),
                sizeof(bf16) * (2 * kTile + 4 * kInner) * D, s, p);
}

template <int D>
Status Backward(const Params& p, int64_t batch, cudaStream_t s) {
  const unsigned bh = static_cast<unsigned>(batch * p.heads);
  FP8_RETURN_IF_ERROR(Launch(FlashDeltaKernel<D>, dim3(Blocks(batch * p.heads * p.seq, kWarps)), 0, s, p));
  if (!UseFusedBackward()) {  // default: the dk/dv and dq kernels (faster on the H200 at hd 64 and 128)
    FP8_RETURN_IF_ERROR(BackwardDkDv<D>(p, s));
    return BackwardDq<D>(p, s);
  }
  const bool lazy = EnvIs("FP8_CUDA_FLASH_BWD_LAZY", "1");
  if constexpr (D == 64) {
    if (EnvIs("FP8_CUDA_FLASH_BWD_KEYS", "128"))
      return lazy ? BackwardFused<D, 32, 2, true>(p, bh, s) : BackwardFused<D, 32, 2>(p, bh, s);
    if (EnvIs("FP8_CUDA_FLASH_BWD_BQ", "32"))
      return lazy ? BackwardFused<D, 32, 1, true>(p, bh, s) : BackwardFused<D, 32, 1>(p, bh, s);
  }
  if (lazy) return BackwardFused<D, kFusedBq<D>, 1, true>(p, bh, s);
  return BackwardFused<D, kFusedBq<D>, 1>(p, bh, s);
}

// Backward scratch: delta [B·H·T] | turn counters [B·H·ceil(T/16)] ints | dq_acc [B·H·T·hd],
// each part starting on a 256-byte boundary.
struct ScratchParts {
  int64_t turns, dq_acc, total;  // offsets and size, in floats
};
ScratchParts Scratch(const AttentionDims& d) {
  auto round = [](int64_t n) { return (n + 63) / 64 * 64; };
  const int64_t bh = d.batch * d.heads;
  const int64_t turns = round(bh * d.seq), dq_acc = turns + round(bh * ((d.seq + 15) / 16));
  return {turns, dq_acc, dq_acc + bh * d.seq * d.head_dim};
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

Status Check(const AttentionDims& d, HeadLayout qkv, HeadLayout yl, std::initializer_list<const void*> ptrs) {
  if (!FlashAttentionSupportsHeadDim(d.head_dim))
    return InvalidArgumentError("flash attention: head_dim " + std::to_string(d.head_dim) + " (want 32, 64 or 128)");
  if (d.batch < 1 || d.heads < 1 || d.seq < 1)
    return InvalidArgumentError("flash attention: batch, heads and seq must be positive");
  if (d.batch * d.heads > 65535 || d.seq > (int64_t{1} << 30))
    return InvalidArgumentError("flash attention: batch·heads " + std::to_string(d.batch * d.heads) + " over 65535 or seq too long");
  for (const HeadLayout& l : {qkv, yl})
    if (l.batch_stride % 8 || l.head_stride % 8 || l.row_stride % 8 || l.row_stride < d.head_dim)
      return InvalidArgumentError("flash attention: strides must be multiples of 8 elements (16-byte rows) and row_stride ≥ head_dim");
  for (const void* ptr : ptrs)
    if (!Aligned16(ptr)) return InvalidArgumentError("flash attention: a tensor pointer is not 16-byte aligned");
  return OkStatus();
}

Params MakeParams(const AttentionDims& d, HeadLayout qkv, HeadLayout yl) {
  Params p{};
  p.batch = d.batch;
  p.heads = d.heads;
  p.seq = d.seq;
  p.qkv = qkv;
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
  // The default two-kernel backward reads only rowsum(dy∘y): no dq accumulator (≈100 MB at
  // GPT-2 124M's shapes) unless the one-pass backward is selected.
  return UseFusedBackward() ? Scratch(dims).total : dims.batch * dims.heads * dims.seq;
}

// Head dims whose default forward is the wgmma kernel (where it handles the arguments).
// Measured on the H200 (docs/performance.md): 0.183 vs 0.247 ms at hd 64 (B32 H12 T1024), 0.284
// vs 0.594 ms at hd 128 (B4 H32 T2048).
static bool WgmmaForwardByDefault(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

// FP8_CUDA_FLASH_MMA_FWD=1 (or FP8_CUDA_FLASH_OLD=1): the mma.sync forward; =0: the wgmma forward
// wherever it handles the arguments; unset: the default per head dim. Read on every call, for
// before/after runs in one process.
bool FlashAttentionForwardUsesWgmma(const AttentionDims& dims, HeadLayout qkv, const void* q, const void* k,
                                    const void* v) {
  if (EnvIs("FP8_CUDA_FLASH_MMA_FWD", "1") || UseOldKernels()) return false;
  if (!EnvIs("FP8_CUDA_FLASH_MMA_FWD", "0") && !WgmmaForwardByDefault(dims.head_dim)) return false;
  return internal::FlashAttentionForwardWgmmaHandles(dims, qkv, q, k, v);
}

// The wgmma dQ kernel (two-kernel backward only): FP8_CUDA_FLASH_WGMMA_DQ=1 selects it, =0 the
// mma.sync one; unset: the default per head dim. Default at both after the bf16 step measured
// 62.7 → 61.5 ms (124M) and 181.8 → 178.2 ms (d4096) with it on the H200 (docs/performance.md).
static bool WgmmaDqByDefault(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

bool FlashAttentionBackwardUsesWgmmaDq(const AttentionDims& dims, HeadLayout qkv, HeadLayout yl, const void* q,
                                       const void* k, const void* v, const void* dy) {
  if (UseOldKernels() || UseFusedBackward() || EnvIs("FP8_CUDA_FLASH_WGMMA_DQ", "0")) return false;
  if (!EnvIs("FP8_CUDA_FLASH_WGMMA_DQ", "1") && !WgmmaDqByDefault(dims.head_dim)) return false;
  return internal::FlashAttentionDqWgmmaHandles(dims, qkv, yl, q, k, v, dy);
}

// The wgmma dK/dV kernel: FP8_CUDA_FLASH_WGMMA_DKDV=1 selects it, =0 the mma.sync one; unset: the
// default per head dim. Default at both: on the H200 (docs/performance.md) the kernel alone takes
// 0.266 vs 0.517 ms at hd 64 (B32 H12 T1024) and 0.479 vs 1.377 ms at hd 128 (B4 H32 T2048), with
// the same bits as the mma.sync one.
static bool WgmmaDkDvByDefault(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

bool FlashAttentionBackwardUsesWgmmaDkDv(const AttentionDims& dims, HeadLayout qkv, HeadLayout yl, const void* q,
                                         const void* k, const void* v, const void* dy) {
  if (UseOldKernels() || UseFusedBackward() || EnvIs("FP8_CUDA_FLASH_WGMMA_DKDV", "0")) return false;
  if (!EnvIs("FP8_CUDA_FLASH_WGMMA_DKDV", "1") && !WgmmaDkDvByDefault(dims.head_dim)) return false;
  return internal::FlashAttentionDqWgmmaHandles(dims, qkv, yl, q, k, v, dy);  // the same TMA conditions
}

namespace internal {

Status FlashAttentionBackwardDkDvAlone(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v,
                                       HeadLayout qkv, const bf16* dy, HeadLayout yl, const float* lse,
                                       const float* delta, bf16* dk, bf16* dv, cudaStream_t s) {
  FP8_RETURN_IF_ERROR(Check(dims, qkv, yl, {q, k, v, dy, dk, dv}));
  Params p = MakeParams(dims, qkv, yl);
  p.q = q, p.k = k, p.v = v, p.dy = dy, p.lse = lse, p.delta = const_cast<float*>(delta), p.dk = dk, p.dv = dv;
  switch (dims.head_dim) {
    case 32: return BackwardDkDv<32>(p, s);
    case 64: return BackwardDkDv<64>(p, s);
    default: return BackwardDkDv<128>(p, s);
  }
}

Status FlashAttentionBackwardDqAlone(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v,
                                     HeadLayout qkv, const bf16* dy, HeadLayout yl, const float* lse, const float* delta,
                                     bf16* dq, cudaStream_t s) {
  FP8_RETURN_IF_ERROR(Check(dims, qkv, yl, {q, k, v, dy, dq}));
  Params p = MakeParams(dims, qkv, yl);
  p.q = q, p.k = k, p.v = v, p.dy = dy, p.lse = lse, p.delta = const_cast<float*>(delta), p.dq = dq;
  switch (dims.head_dim) {
    case 32: return BackwardDq<32>(p, s);
    case 64: return BackwardDq<64>(p, s);
    default: return BackwardDq<128>(p, s);
  }
}

}  // namespace internal

Status FlashAttentionForward(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v,
                             HeadLayout qkv, bf16* y, HeadLayout yl, float* lse, cudaStream_t s) {
  FP8_RETURN_IF_ERROR(Check(dims, qkv, yl, {q, k, v, y}));
  if (FlashAttentionForwardUsesWgmma(dims, qkv, q, k, v))
    return internal::FlashAttentionForwardWgmma(dims, q, k, v, qkv, y, yl, lse, s);
  Params p = MakeParams(dims, qkv, yl);
  p.q = q, p.k = k, p.v = v, p.out = y, p.lse_out = lse;
  switch (dims.head_dim) {
    case 32: return Forward<32>(p, dims.batch, s);
    case 64: return Forward<64>(p, dims.batch, s);
    default: return Forward<128>(p, dims.batch, s);
  }
}

Status FlashAttentionBackward(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v,
                              HeadLayout qkv, const bf16* y, const bf16* dy, HeadLayout yl,
                              const float* lse, float* scratch, bf16* dq, bf16* dk, bf16* dv,
                              cudaStream_t s) {
  FP8_RETURN_IF_ERROR(Check(dims, qkv, yl, {q, k, v, y, dy, dq, dk, dv}));
  Params p = MakeParams(dims, qkv, yl);
  const ScratchParts parts = Scratch(dims);
  p.q = q, p.k = k, p.v = v, p.y = y, p.dy = dy, p.lse = lse, p.delta = scratch;
  p.turns = reinterpret_cast<int*>(scratch + parts.turns), p.dq_acc = scratch + parts.dq_acc;
  p.dq = dq, p.dk = dk, p.dv = dv;
  switch (dims.head_dim) {
    case 32: return Backward<32>(p, dims.batch, s);
    case 64: return Backward<64>(p, dims.batch, s);
    default: return Backward<128>(p, dims.batch, s);
  }
}

}  // namespace fp8::train::cuda
