// SPDX-License-Identifier: Apache-2.0
// The causal flash-attention forward on Hopper's asynchronous tensor cores, flash-attention-3
// style, and the two-kernel backward's dQ kernel on the same machinery (further down)
// (sm90_flash_attention.h has the contract; FlashAttentionForward/Backward dispatch here).
//
// CTA = 3 warpgroups, one 128-query tile of one head. Warpgroup 0 is the producer: one thread
// loads the Q tile once, then the K and V tiles (128 keys each) with TMA into a kStages-deep ring,
// diagonal tile first, completing on per-stage "K full" and "V full" mbarriers. Warpgroups 1 and 2
// are consumers, 64 query rows each: per key tile S = Q·Kᵀ by wgmma with both operands in shared
// memory, the online softmax in registers (exp2 with the scale folded into one FFMA, the causal
// mask only on tiles that cross the warpgroup's diagonal), then O += P·V by wgmma with P straight
// from the registers (the S accumulator layout of a k16 slice is the A-fragment layout) and V
// from shared memory read MN-major (d contiguous) through the descriptor, no transpose pass.
// Each consumer warp then arrives on the stage's "empty" mbarrier, which the producer waits on
// before refilling it.
//
// Ping-pong (PingPongTurns): two named barriers make the consumer warpgroups take turns at issuing
// their GEMMs (one's PV of tile j and S of tile j + 1, back to back), so one warpgroup's softmax
// runs while the other's GEMMs occupy the tensor cores.
//
// q/k/v are read through 4-D tensor maps (d, row, head, batch) over the caller's strides, so
// the trainer's fused [B, T, 3, H, hd] qkv rows need no copy; rows past the sequence arrive as
// zeros, so any T works. y goes out through the warpgroup's own (spent) Q rows in shared memory
// as 16-byte stores; lse as base-2 logsumexp of the scaled scores, as the mma.sync kernel writes it.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_tensor_map.h"
#include "worker/train/cuda/sm90_flash_attention.h"
#include "worker/train/cuda/sm90_flash_attention_wgmma.cuh"

namespace fp8::train::cuda {
namespace {

using namespace wgmma_attention;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
constexpr int kBlockM = 128;   // queries per CTA, 64 per consumer warpgroup
constexpr int kBlockN = 128;   // keys per stage
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct Cfg {
  static constexpr int kStages = D == 128 ? 2 : 3;
  static constexpr int kColBlocks = D / kSwizzleCols;  // [rows][64] 128B-swizzled blocks per tile
  static constexpr uint32_t kQBytes = kBlockM * D * 2;
  static constexpr uint32_t kKvBytes = kBlockN * D * 2;  // one K or one V tile
  static constexpr uint32_t kKOffset = kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKvBytes;
  static constexpr uint32_t kBarOffset = kVOffset + kStages * kKvBytes;
  // Q full, then per stage K full, V full, empty.
  static constexpr uint32_t kSmemBytes = kBarOffset + 8 * (1 + 3 * kStages) + 1024;  // + alignment slack
};

struct Args {
  int32_t seq, heads;
  int32_t group;           // query heads per key/value head: query head h reads k/v head h / group
  bool rows_before_heads;  // tensor-map dimension order: (d, row, head, batch) or (d, head, row, batch), of q
  bool kv_rows_before_heads;  // of k and v
  int64_t y_batch_stride, y_head_stride, y_row_stride;
  float scale_log2;
  bf16* y;
  float* lse;
};

template <int D, bool kOverlap>
__global__ void __launch_bounds__(kThreads, 1)
    FlashForwardWgmmaKernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                            const __grid_constant__ CUtensorMap tmap_v, const Args args) {
  using C = Cfg<D>;
  constexpr int kStages = C::kStages;
  extern __shared__ uint8_t smem_raw[];
  // 128B-swizzled tiles start on a 1024-byte boundary (the swizzle atom).
  const uint32_t base = (ptx::SmemAddr(smem_raw) + 1023u) & ~1023u;
  const uint32_t s_q = base, s_k = base + C::kKOffset, s_v = base + C::kVOffset;
  const uint32_t bar_q = base + C::kBarOffset;
  auto k_full = [&](int s) { return bar_q + 8 + 8 * s; };
  auto v_full = [&](int s) { return bar_q + 8 + 8 * (kStages + s); };
  auto empty = [&](int s) { return bar_q + 8 + 8 * (2 * kStages + s); };

  const int qt = gridDim.x - 1 - blockIdx.x;  // longest causal rows first
  const int bh = blockIdx.y, batch = bh / args.heads, head = bh % args.heads;
  const int q0 = qt * kBlockM;
  const int n_tiles = (min(q0 + kBlockM, args.seq) - 1) / kBlockN + 1;  // key tiles 0 .. diagonal

  if (threadIdx.x == 0) {
    ptx::MbarInit(bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      ptx::MbarInit(k_full(s), 1);
      ptx::MbarInit(v_full(s), 1);
      ptx::MbarInit(empty(s), 8);  // one arrive per consumer warp
    }
    ptx::FenceBarrierInit();
    ptx::FenceProxyAsyncShared();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    // ---- producer ----
    ptx::SetMaxNRegDec<24>();
    if (threadIdx.x == 0) {
      ptx::PrefetchTensorMap(&tmap_q);
      ptx::PrefetchTensorMap(&tmap_k);
      ptx::PrefetchTensorMap(&tmap_v);
      // coordinates (d, row, head, batch) in the tensor map's dimension order
      auto load = [&](uint32_t dst, const CUtensorMap* map, uint32_t bar, int col, int row) {
        TmaLoadHeadRows(dst, map, bar, col, row, head, batch, args.rows_before_heads);
      };
      auto load_kv = [&](uint32_t dst, const CUtensorMap* map, uint32_t bar, int col, int row) {
        TmaLoadHeadRows(dst, map, bar, col, row, head / args.group, batch, args.kv_rows_before_heads);
      };
      ptx::MbarArriveExpectTx(bar_q, C::kQBytes);
#pragma unroll
      for (int cb = 0; cb < C::kColBlocks; ++cb) load(s_q + cb * kBlockM * 128, &tmap_q, bar_q, cb * kSwizzleCols, q0);
      int s = 0;
      uint32_t phase = 0;
      for (int it = 0; it < n_tiles; ++it) {
        const int key0 = (n_tiles - 1 - it) * kBlockN;
        ptx::MbarWait(empty(s), phase ^ 1);  // a fresh barrier passes parity 1 at once
        ptx::MbarArriveExpectTx(k_full(s), C::kKvBytes);
#pragma unroll
        for (int cb = 0; cb < C::kColBlocks; ++cb)
          load_kv(s_k + s * C::kKvBytes + cb * kBlockN * 128, &tmap_k, k_full(s), cb * kSwizzleCols, key0);
        ptx::MbarArriveExpectTx(v_full(s), C::kKvBytes);
#pragma unroll
        for (int cb = 0; cb < C::kColBlocks; ++cb)
          load_kv(s_v + s * C::kKvBytes + cb * kBlockN * 128, &tmap_v, v_full(s), cb * kSwizzleCols, key0);
        if (++s == kStages) s = 0, phase ^= 1;
      }
    }
    return;
  }

  // ---- consumers: rows [64·cw, 64·cw + 64) of the tile ----
  ptx::SetMaxNRegInc<240>();
  const int cw = warpgroup - 1;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int wg_row0 = q0 + 64 * cw;
  const int row0 = wg_row0 + 16 * warp + g;  // this thread's rows: row0 and row0 + 8
  // Ping-pong barriers: warpgroup cw issues GEMMs after a sync on 3 + cw, which the other
  // warpgroup arrives on when it has issued its own.
  const PingPongTurns turns(cw);

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const uint32_t q_rows = s_q + 64 * cw * 128;  // this warpgroup's rows of each column block

  // S = Q·Kᵀ for the tile in stage s (K-major operands: 16 columns = 32 bytes per k step).
  float sc[kBlockN / 2];
  auto issue_s = [&](int s) {
    ptx::FenceOperands(sc);
    ptx::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t col_off = (kk % 4) * 32;  // + 32 bytes per k16 inside a 128-byte row
      const uint64_t da = ptx::MakeSmemDescSw128(q_rows + (kk / 4) * kBlockM * 128 + col_off);
      const uint64_t db = ptx::MakeSmemDescSw128(s_k + s * C::kKvBytes + (kk / 4) * kBlockN * 128 + col_off);
      WgmmaSS(sc, da, db, kk > 0);
    }
    ptx::WgmmaCommit();
  };

  // ---- online softmax of the S tile in sc, in place (sc := P in FP32), scores in the log2
  // domain (x·scale_log2); updates m and l, returns the factor O must be rescaled by ----
  // Every tile holds key0 ≤ each row, so each row's max is finite and exp2(m − m_new) is 0 on
  // the first tile, never NaN. Keys past the sequence are past every real row: masked too.
  auto softmax = [&](int key0, float (&alpha)[2]) {
    if (key0 + kBlockN - 1 > wg_row0) {
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + 8 * i + 2 * t4 + (e & 1) > row0 + 8 * (e >> 1)) sc[4 * i + e] = -INFINITY;
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], sc[4 * i + e]);
    float neg_m[2], sum[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r] * args.scale_log2);
      alpha[r] = Exp2(m[r] - m_new);
      m[r] = m_new;
      neg_m[r] = -m_new;
    }
#pragma unroll
    for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[4 * i + e] = Exp2(fmaf(sc[4 * i + e], args.scale_log2, neg_m[e >> 1]));
        sum[e >> 1] += sc[4 * i + e];
      }
    // l stays a per-thread partial sum (the row's 4 threads share alpha), reduced at the end.
    l[0] = l[0] * alpha[0] + sum[0];
    l[1] = l[1] * alpha[1] + sum[1];
  };
  auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      o[4 * i + 0] *= alpha[0], o[4 * i + 1] *= alpha[0];
      o[4 * i + 2] *= alpha[1], o[4 * i + 3] *= alpha[1];
    }
  };
  // P (FP32 in sc) → BF16 A fragments: n8 block i is half of k16 slice i/2, A registers
  // {row g, row g+8} × {cols 0-7, 8-15}.
  uint32_t p[kBlockN / 16][4];
  auto pack_p = [&] {
#pragma unroll
    for (int i = 0; i < kBlockN / 8; ++i) {
      p[i / 2][(i % 2) * 2 + 0] = PackBf16(sc[4 * i + 0], sc[4 * i + 1]);
      p[i / 2][(i % 2) * 2 + 1] = PackBf16(sc[4 * i + 2], sc[4 * i + 3]);
    }
  };
  // O += P·V for the V tile in stage s (MN-major: 16 keys = 16 rows of 128 bytes per k step).
  auto issue_pv = [&](int s) {
    ptx::FenceOperands(o);
    ptx::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      WgmmaRS(o, p[kk], MakeSmemDescSw128MnMajor(s_v + s * C::kKvBytes + kk * 16 * 128, kBlockN * 128), true);
    ptx::WgmmaCommit();
  };
  auto release = [&](int s) {
    if (lane == 0) ptx::MbarArrive(empty(s));
  };

  // Loops are peeled so that every wgmma is issued on a straight path (a conditional issue made
  // ptxas serialize them). A warpgroup's turn covers back-to-back GEMMs: S of the first tile;
  // then PV of tile j with S of tile j + 1; then PV of the last tile.
  int s = 0;
  uint32_t phase = 0;
  auto next_stage = [&] {
    if (++s == kStages) s = 0, phase ^= 1;
  };
  ptx::MbarWait(bar_q, 0);
  ptx::MbarWait(k_full(0), 0);
  turns.Begin();
  issue_s(0);
  turns.End(false);
  if constexpr (!kOverlap) {
    // S, wait, softmax, PV, wait: the two warpgroups' turns alone overlap softmax and GEMMs.
    auto step = [&](int it, auto last) {
      constexpr bool kLast = decltype(last)::value;
      ptx::WgmmaWait<0>();
      ptx::FenceOperands(sc);
      float alpha[2];
      softmax((n_tiles - 1 - it) * kBlockN, alpha);
      pack_p();
      rescale_o(alpha);
      ptx::MbarWait(v_full(s), phase);
      turns.Begin();
      issue_pv(s);
      ptx::WgmmaWait<0>();
      ptx::FenceOperands(o);
      release(s);
      next_stage();
      if constexpr (!kLast) {
        ptx::MbarWait(k_full(s), phase);
        issue_s(s);
      }
      turns.End(kLast);
    };
    for (int it = 0; it + 1 < n_tiles; ++it) step(it, std::false_type{});
    step(n_tiles - 1, std::true_type{});
  } else {
    // FA3's intra-warpgroup overlap: S of tile j + 1 and PV of tile j are issued together, and the
    // softmax of tile j + 1 runs while PV of tile j is still on the tensor cores; O is rescaled
    // and P packed once PV has finished reading them.
    ptx::WgmmaWait<0>();
    ptx::FenceOperands(sc);
    {
      float alpha[2];
      softmax((n_tiles - 1) * kBlockN, alpha);  // O is still 0: no rescale
      pack_p();
    }
    for (int it = 1; it < n_tiles; ++it) {
      const int s_prev = s;
      const uint32_t phase_prev = phase;
      next_stage();
      ptx::MbarWait(k_full(s), phase);
      ptx::MbarWait(v_full(s_prev), phase_prev);
      turns.Begin();
      issue_s(s);
      issue_pv(s_prev);
      turns.End(false);
      ptx::WgmmaWait<1>();  // S done, PV may still run
      ptx::FenceOperands(sc);
      float alpha[2];
      softmax((n_tiles - 1 - it) * kBlockN, alpha);
      ptx::WgmmaWait<0>();
      ptx::FenceOperands(o);
      release(s_prev);
      rescale_o(alpha);
      pack_p();
    }
    ptx::MbarWait(v_full(s), phase);
    turns.Begin();
    issue_pv(s);
    turns.End(true);
    ptx::WgmmaWait<0>();
    ptx::FenceOperands(o);
    release(s);
  }

  // ---- epilogue: lse, then y = O / l through this warpgroup's Q rows ----
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const int64_t T = args.seq;
  if (t4 == 0) {
    if (row0 < T) args.lse[bh * T + row0] = m[0] + __log2f(l[0]);
    if (row0 + 8 < T) args.lse[bh * T + row0 + 8] = m[1] + __log2f(l[1]);
  }
  const float inv[2] = {1.f / l[0], 1.f / l[1]};
  StoreRows<D>(o, inv, s_q, cw, args.y + batch * args.y_batch_stride + head * args.y_head_stride, args.y_row_stride, q0, T);
}

// ---- backward: dQ ----------------------------------------------------------------------------
// The two-kernel backward's dQ kernel on the same machinery: a CTA owns 128 queries (64 per
// consumer warpgroup) and walks the key tiles 0 .. diagonal. Per tile: S = Q·Kᵀ and dP = dO·Vᵀ
// (both SS wgmma, K-major), P = exp2(S·scale_log2 − lse) (0 above the diagonal),
// dS = P∘(dP − delta) in registers, then dQ += dS·K with dS from registers and K read MN-major
// from the same stage. No running statistics, so a key tile wholly above a warpgroup's rows
// (BN = 64) just gives dS = 0. Same ping-pong turns as the forward.
template <int D, int BN>
struct DqCfg {
  static constexpr int kColBlocks = D / kSwizzleCols;
  static constexpr uint32_t kTileBytes = kBlockM * D * 2;  // Q or dO
  static constexpr uint32_t kKvBytes = BN * D * 2;
  static constexpr int kStages = std::min<int>(4, (200 * 1024 - 2 * kTileBytes) / (2 * kKvBytes));
  static constexpr uint32_t kDoOffset = kTileBytes;
  static constexpr uint32_t kKOffset = 2 * kTileBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKvBytes;
  static constexpr uint32_t kBarOffset = kVOffset + kStages * kKvBytes;
  static constexpr uint32_t kSmemBytes = kBarOffset + 8 * (1 + 3 * kStages) + 1024;
};

struct DqArgs {
  int32_t seq, heads;
  int32_t group;              // query heads per key/value head
  bool rows_before_heads;     // of q's tensor map (dO's never decides anything in the kernel)
  bool kv_rows_before_heads;  // of k's and v's
  int64_t dq_batch_stride, dq_head_stride, dq_row_stride;
  float scale_log2, scale;
  const float *lse, *delta;
  bf16* dq;
};

template <int D, int BN>
__global__ void __launch_bounds__(kThreads, 1)
    FlashBackwardDqWgmmaKernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_do,
                               const __grid_constant__ CUtensorMap tmap_k, const __grid_constant__ CUtensorMap tmap_v,
                               const bool do_rows_first, const DqArgs args) {
  using C = DqCfg<D, BN>;
  constexpr int kStages = C::kStages;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (ptx::SmemAddr(smem_raw) + 1023u) & ~1023u;
  const uint32_t s_q = base, s_do = base + C::kDoOffset, s_k = base + C::kKOffset, s_v = base + C::kVOffset;
  const uint32_t bar_q = base + C::kBarOffset;
  auto k_full = [&](int s) { return bar_q + 8 + 8 * s; };
  auto v_full = [&](int s) { return bar_q + 8 + 8 * (kStages + s); };
  auto empty = [&](int s) { return bar_q + 8 + 8 * (2 * kStages + s); };

  const int qt = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y, batch = bh / args.heads, head = bh % args.heads;
  const int q0 = qt * kBlockM;
  const int64_t T = args.seq;
  const int n_tiles = (min(q0 + kBlockM, args.seq) - 1) / BN + 1;

  if (threadIdx.x == 0) {
    ptx::MbarInit(bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      ptx::MbarInit(k_full(s), 1);
      ptx::MbarInit(v_full(s), 1);
      ptx::MbarInit(empty(s), 8);
    }
    ptx::FenceBarrierInit();
    ptx::FenceProxyAsyncShared();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    ptx::SetMaxNRegDec<24>();
    if (threadIdx.x == 0) {
      ptx::PrefetchTensorMap(&tmap_q);
      ptx::PrefetchTensorMap(&tmap_do);
      ptx::PrefetchTensorMap(&tmap_k);
      ptx::PrefetchTensorMap(&tmap_v);
      auto load = [&](uint32_t dst, const CUtensorMap* map, uint32_t bar, int col, int row, bool rows_first) {
        TmaLoadHeadRows(dst, map, bar, col, row, head, batch, rows_first);
      };
      auto load_kv = [&](uint32_t dst, const CUtensorMap* map, uint32_t bar, int col, int row) {
        TmaLoadHeadRows(dst, map, bar, col, row, head / args.group, batch, args.kv_rows_before_heads);
      };
      ptx::MbarArriveExpectTx(bar_q, 2 * C::kTileBytes);
#pragma unroll
      for (int cb = 0; cb < C::kColBlocks; ++cb) {
        load(s_q + cb * kBlockM * 128, &tmap_q, bar_q, cb * kSwizzleCols, q0, args.rows_before_heads);
        load(s_do + cb * kBlockM * 128, &tmap_do, bar_q, cb * kSwizzleCols, q0, do_rows_first);
      }
      int s = 0;
      uint32_t phase = 0;
      for (int it = 0; it < n_tiles; ++it) {
        const int key0 = (n_tiles - 1 - it) * BN;
        ptx::MbarWait(empty(s), phase ^ 1);
        ptx::MbarArriveExpectTx(k_full(s), C::kKvBytes);
#pragma unroll
        for (int cb = 0; cb < C::kColBlocks; ++cb)
          load_kv(s_k + s * C::kKvBytes + cb * BN * 128, &tmap_k, k_full(s), cb * kSwizzleCols, key0);
        ptx::MbarArriveExpectTx(v_full(s), C::kKvBytes);
#pragma unroll
        for (int cb = 0; cb < C::kColBlocks; ++cb)
          load_kv(s_v + s * C::kKvBytes + cb * BN * 128, &tmap_v, v_full(s), cb * kSwizzleCols, key0);
        if (++s == kStages) s = 0, phase ^= 1;
      }
    }
    return;
  }

  ptx::SetMaxNRegInc<240>();
  const int cw = warpgroup - 1;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int wg_row0 = q0 + 64 * cw;
  const int row0 = wg_row0 + 16 * warp + g;
  const PingPongTurns turns(cw);

  float lse[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool in = row0 + 8 * r < T;  // rows past the end: Q = dO = 0 (TMA), so dS = 0 anyway
    lse[r] = in ? args.lse[bh * T + row0 + 8 * r] : 0.f;
    delta[r] = in ? args.delta[bh * T + row0 + 8 * r] : 0.f;
  }
  float dq[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dq[i] = 0.f;
  float sc[BN / 2], dp[BN / 2];
  uint32_t ds[BN / 16][4];
  const uint32_t q_rows = s_q + 64 * cw * 128, do_rows = s_do + 64 * cw * 128;

  auto issue_s_dp = [&](int s) {
    ptx::FenceOperands(sc);
    ptx::FenceOperands(dp);
    ptx::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off_a = (kk / 4) * kBlockM * 128 + (kk % 4) * 32, off_b = (kk / 4) * BN * 128 + (kk % 4) * 32;
      WgmmaSS(sc, ptx::MakeSmemDescSw128(q_rows + off_a), ptx::MakeSmemDescSw128(s_k + s * C::kKvBytes + off_b), kk > 0);
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off_a = (kk / 4) * kBlockM * 128 + (kk % 4) * 32, off_b = (kk / 4) * BN * 128 + (kk % 4) * 32;
      WgmmaSS(dp, ptx::MakeSmemDescSw128(do_rows + off_a), ptx::MakeSmemDescSw128(s_v + s * C::kKvBytes + off_b), kk > 0);
    }
    ptx::WgmmaCommit();
  };
  // dS = P∘(dP − delta), rounded to BF16 A fragments (as the mma.sync kernel rounds it).
  auto compute_ds = [&](int key0) {
    const bool mask = key0 + BN - 1 > wg_row0;
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pv = Exp2(fmaf(sc[4 * i + e], args.scale_log2, -lse[e >> 1]));
        if (mask && key0 + 8 * i + 2 * t4 + (e & 1) > row0 + 8 * (e >> 1)) pv = 0.f;
        v[e] = pv * (dp[4 * i + e] - delta[e >> 1]);
      }
      ds[i / 2][(i % 2) * 2 + 0] = PackBf16(v[0], v[1]);
      ds[i / 2][(i % 2) * 2 + 1] = PackBf16(v[2], v[3]);
    }
  };
  auto issue_dq = [&](int s) {
    ptx::FenceOperands(dq);
    ptx::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      WgmmaRS(dq, ds[kk], MakeSmemDescSw128MnMajor(s_k + s * C::kKvBytes + kk * 16 * 128, BN * 128), true);
    ptx::WgmmaCommit();
  };

  int s = 0;
  uint32_t phase = 0;
  ptx::MbarWait(bar_q, 0);
  ptx::MbarWait(k_full(0), 0);
  ptx::MbarWait(v_full(0), 0);
  turns.Begin();
  issue_s_dp(0);
  turns.End(false);
  auto step = [&](int it, auto last) {
    constexpr bool kLast = decltype(last)::value;
    ptx::WgmmaWait<0>();
    ptx::FenceOperands(sc);
    ptx::FenceOperands(dp);
    compute_ds((n_tiles - 1 - it) * BN);
    turns.Begin();
    issue_dq(s);
    ptx::WgmmaWait<0>();
    ptx::FenceOperands(dq);
    if (lane == 0) ptx::MbarArrive(empty(s));
    if (++s == kStages) s = 0, phase ^= 1;
    if constexpr (!kLast) {
      ptx::MbarWait(k_full(s), phase);
      ptx::MbarWait(v_full(s), phase);
      issue_s_dp(s);
    }
    turns.End(kLast);
  };
  for (int it = 0; it + 1 < n_tiles; ++it) step(it, std::false_type{});
  step(n_tiles - 1, std::true_type{});

  const float f[2] = {args.scale, args.scale};
  StoreRows<D>(dq, f, s_q, cw, args.dq + batch * args.dq_batch_stride + head * args.dq_head_stride, args.dq_row_stride,
               q0, T);
}

template <int D, bool kOverlap>
Status Launch(const AttentionDims& d, const bf16* q, HeadLayout qkv, const bf16* k, const bf16* v, HeadLayout kvl,
              bf16* y, HeadLayout yl, float* lse, cudaStream_t stream) {
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tq, HeadsTensorMap(q, d, qkv, kBlockM, "q"));
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tk, HeadsTensorMap(k, KvDims(d), kvl, kBlockN, "k"));
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tv, HeadsTensorMap(v, KvDims(d), kvl, kBlockN, "v"));
  Args a{};
  a.seq = static_cast<int32_t>(d.seq);
  a.heads = static_cast<int32_t>(d.heads);
  a.group = static_cast<int32_t>(d.heads / KvHeads(d));
  a.rows_before_heads = qkv.row_stride <= qkv.head_stride;
  a.kv_rows_before_heads = kvl.row_stride <= kvl.head_stride;
  a.y_batch_stride = yl.batch_stride, a.y_head_stride = yl.head_stride, a.y_row_stride = yl.row_stride;
  a.scale_log2 = static_cast<float>(kLog2e / std::sqrt(static_cast<double>(d.head_dim)));
  a.y = y, a.lse = lse;
  auto kernel = FlashForwardWgmmaKernel<D, kOverlap>;
  constexpr uint32_t smem = Cfg<D>::kSmemBytes;
  // Set on every call, as the mma.sync launcher does: the attribute is per device.
  FP8_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((d.seq + kBlockM - 1) / kBlockM), static_cast<unsigned>(d.batch * d.heads));
  kernel<<<grid, kThreads, smem, stream>>>(tq, tk, tv, a);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

template <int D, int BN>
Status LaunchDq(const AttentionDims& d, const bf16* q, HeadLayout qkv, const bf16* k, const bf16* v, HeadLayout kvl,
                const bf16* dy, HeadLayout yl, const float* lse, const float* delta, bf16* dq, cudaStream_t stream) {
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tq, HeadsTensorMap(q, d, qkv, kBlockM, "q"));
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tdo, HeadsTensorMap(dy, d, yl, kBlockM, "dy"));
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tk, HeadsTensorMap(k, KvDims(d), kvl, BN, "k"));
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tv, HeadsTensorMap(v, KvDims(d), kvl, BN, "v"));
  DqArgs a{};
  a.seq = static_cast<int32_t>(d.seq);
  a.heads = static_cast<int32_t>(d.heads);
  a.group = static_cast<int32_t>(d.heads / KvHeads(d));
  a.rows_before_heads = qkv.row_stride <= qkv.head_stride;
  a.kv_rows_before_heads = kvl.row_stride <= kvl.head_stride;
  a.dq_batch_stride = qkv.batch_stride, a.dq_head_stride = qkv.head_stride, a.dq_row_stride = qkv.row_stride;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
  a.scale_log2 = a.scale * kLog2e;
  a.lse = lse, a.delta = delta, a.dq = dq;
  auto kernel = FlashBackwardDqWgmmaKernel<D, BN>;
  constexpr uint32_t smem = DqCfg<D, BN>::kSmemBytes;
  FP8_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((d.seq + kBlockM - 1) / kBlockM), static_cast<unsigned>(d.batch * d.heads));
  kernel<<<grid, kThreads, smem, stream>>>(tq, tdo, tk, tv, yl.row_stride <= yl.head_stride, a);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

namespace internal {

bool FlashAttentionForwardWgmmaHandles(const AttentionDims& d, HeadLayout qkv, const void* q, const void* k,
                                       const void* v) {
  if (d.head_dim != 64 && d.head_dim != 128) return false;
  if (d.seq < 1 || d.seq > (int64_t{1} << 30) || d.batch * d.heads > 65535) return false;
  // TMA: 16-byte aligned base addresses and strides (in bytes, below 2^40).
  for (const void* p : {q, k, v})
    if (!Aligned16(p)) return false;
  for (int64_t st : {qkv.batch_stride, qkv.head_stride, qkv.row_stride})
    if (st <= 0 || st % 8 != 0 || st >= (int64_t{1} << 38)) return false;
  return true;
}

Status FlashAttentionForwardWgmma(const AttentionDims& d, const bf16* q, HeadLayout qkv, const bf16* k, const bf16* v,
                                  HeadLayout kvl, bf16* y, HeadLayout yl, float* lse, cudaStream_t s) {
  // Ping-pong at both head dims, plus the intra-warpgroup overlap at hd 64: measured on the H200
  // (docs/perf-history.md) 0.183 vs 0.199 ms at hd 64; at hd 128 the overlap cost 4%.
  if (d.head_dim == 64) return Launch<64, true>(d, q, qkv, k, v, kvl, y, yl, lse, s);
  return Launch<128, false>(d, q, qkv, k, v, kvl, y, yl, lse, s);
}

bool FlashAttentionDqWgmmaHandles(const AttentionDims& d, HeadLayout qkv, HeadLayout yl, const void* q, const void* k,
                                  const void* v, const void* dy) {
  if (!FlashAttentionForwardWgmmaHandles(d, qkv, q, k, v) || !Aligned16(dy)) return false;
  for (int64_t st : {yl.batch_stride, yl.head_stride, yl.row_stride})
    if (st <= 0 || st % 8 != 0 || st >= (int64_t{1} << 38)) return false;
  return true;
}

Status FlashAttentionBackwardDqWgmma(const AttentionDims& d, const bf16* q, HeadLayout qkv, const bf16* k,
                                     const bf16* v, HeadLayout kvl, const bf16* dy, HeadLayout yl, const float* lse,
                                     const float* delta, bf16* dq, cudaStream_t s) {
  // Key tile: 128 at hd 64; at hd 128, 64 (S, dP and dQ accumulators: 32 + 32 + 64 registers).
  // Ping-pong turns between the consumer warpgroups.
  if (d.head_dim == 64) return LaunchDq<64, 128>(d, q, qkv, k, v, kvl, dy, yl, lse, delta, dq, s);
  return LaunchDq<128, 64>(d, q, qkv, k, v, kvl, dy, yl, lse, delta, dq, s);
}

}  // namespace internal

namespace wgmma_attention {

// One head's [T, hd] rows of q, k or v as a 4-D tensor (d, row, head, batch) or (d, head, row,
// batch), whichever has the smaller stride first; box = 64 columns (one 128-byte swizzle row) ×
// `box_rows` rows.
StatusOr<CUtensorMap> HeadsTensorMap(const __nv_bfloat16* ptr, const AttentionDims& d, HeadLayout l, uint32_t box_rows,
                                     const char* what) {
  FP8_ASSIGN_OR_RETURN(auto encode, kernels::cuda::Sm90TensorMapEncoder());
  const bool rows_first = l.row_stride <= l.head_stride;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(d.head_dim),
                              static_cast<cuuint64_t>(rows_first ? d.seq : d.heads),
                              static_cast<cuuint64_t>(rows_first ? d.heads : d.seq), static_cast<cuuint64_t>(d.batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(2 * (rows_first ? l.row_stride : l.head_stride)),
                                 static_cast<cuuint64_t>(2 * (rows_first ? l.head_stride : l.row_stride)),
                                 static_cast<cuuint64_t>(2 * l.batch_stride)};
  const cuuint32_t box[4] = {kSwizzleCols, rows_first ? box_rows : 1u, rows_first ? 1u : box_rows, 1u};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  CUtensorMap map{};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<__nv_bfloat16*>(ptr), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return InternalError(std::string("flash attention: cuTensorMapEncodeTiled failed for ") + what + " (CUresult " +
                         std::to_string(static_cast<int>(r)) + ")");
  return map;
}

}  // namespace wgmma_attention
}  // namespace fp8::train::cuda
