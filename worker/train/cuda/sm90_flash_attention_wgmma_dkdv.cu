// SPDX-License-Identifier: Apache-2.0
// The two-kernel backward's dK/dV kernel on Hopper's asynchronous tensor cores, flash-attention-3
// style (sm90_flash_attention.h has the contract; FlashAttentionBackward dispatches here). Same
// machinery as the forward and dQ kernels of sm90_flash_attention_wgmma.cu.
//
// CTA = 3 warpgroups, 128 keys of one key/value head. Warpgroup 0 is the producer: one thread
// loads the K and V tiles once, then, for each query head of the key/value head's group in turn
// (grouped-query attention; one head otherwise), the Q and dO tiles of BQ queries, from the
// diagonal on, with TMA into a kStages-deep ring ("full" / "empty" mbarriers); its warp copies
// the tile's lse and delta into the stage beside them (rows past the sequence get lse = +inf, so
// P = 0 there), and every lane arrives on "full" after its stores. Warpgroups 1 and 2 are
// consumers, 64 keys each, and walk the same query tiles; per tile:
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ        wgmma SS, K-major (K/V rows of the warpgroup, Q/dO rows)
//   Pᵀ = exp2(Sᵀ·scale_log2 − lse), 0 where key > query (only tiles that cross the diagonal)
//   dSᵀ = Pᵀ∘(dPᵀ − delta)        both rounded to BF16 A fragments in registers
//   dV += Pᵀ·dO, dK += dSᵀ·Q       wgmma RS, dO and Q read MN-major (d contiguous) from the stage
// and then release the stage. dK, dV stay in registers (64×D FP32 each per warpgroup) until the
// end (summed over the group's query heads), where dK is scaled by 1/√hd and both leave through
// the warpgroup's (spent) K and V rows in shared memory as 16-byte stores. No atomics, no
// reduction across CTAs: bitwise repeatable.
// Ping-pong (named barriers 3/4) as in the dQ kernel: a warpgroup's turn is dV/dK of tile j and
// Sᵀ/dPᵀ of tile j + 1, so one warpgroup's exp2 work overlaps the other's GEMMs.
//
// Query tile BQ: 64 at hd 128 (dK, dV, Sᵀ, dPᵀ = 64 + 64 + 32 + 32 registers of the 240);
// 128 at hd 64 (32 + 32 + 64 + 64).
#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/sm90_flash_attention.h"
#include "worker/train/cuda/sm90_flash_attention_wgmma.cuh"

namespace fp8::train::cuda {
namespace {

using namespace wgmma_attention;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
constexpr int kKeys = kTileRows;  // keys per CTA, 64 per consumer warpgroup
constexpr float kLog2e = 1.4426950408889634f;

template <int D, int BQ>
struct DkDvCfg {
  static constexpr int kColBlocks = D / kSwizzleCols;
  static constexpr uint32_t kKvBytes = kKeys * D * 2;  // the K or the V tile
  static constexpr uint32_t kTileBytes = BQ * D * 2;   // one Q or dO tile
  static constexpr uint32_t kStatsBytes = 2 * BQ * 4;  // lse, delta
  static constexpr int kStages = std::min<int>(4, (200 * 1024 - 2 * kKvBytes) / (2 * kTileBytes + kStatsBytes));
  static constexpr uint32_t kVOffset = kKvBytes;
  static constexpr uint32_t kStageOffset = 2 * kKvBytes;  // stage s: Q, then dO
  static constexpr uint32_t kStatsOffset = kStageOffset + kStages * 2 * kTileBytes;
  static constexpr uint32_t kBarOffset = kStatsOffset + kStages * kStatsBytes;
  // K/V full, then per stage full, empty.
  static constexpr uint32_t kSmemBytes = kBarOffset + 8 * (1 + 2 * kStages) + 1024;  // + alignment slack
  static_assert(kStages >= 2, "a ring of at least two stages");
};

struct DkDvArgs {
  int32_t seq, heads;
  int32_t group;              // query heads per key/value head
  bool rows_before_heads;     // of q's tensor map
  bool kv_rows_before_heads;  // of k's and v's (dk/dv share their layout)
  bool do_rows_first;         // of dy's
  int64_t batch_stride, head_stride, row_stride;  // dk, dv (layout kvl)
  float scale_log2, scale;
  const float *lse, *delta;
  bf16 *dk, *dv;
};

__device__ __forceinline__ float2 LdSharedF32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

template <int D, int BQ>
__global__ void __launch_bounds__(kThreads, 1)
    FlashBackwardDkDvWgmmaKernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_do,
                                 const __grid_constant__ CUtensorMap tmap_k, const __grid_constant__ CUtensorMap tmap_v,
                                 const DkDvArgs args) {
  using C = DkDvCfg<D, BQ>;
  constexpr int kStages = C::kStages;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (ptx::SmemAddr(smem_raw) + 1023u) & ~1023u;  // the 128B swizzle atom
  const uint32_t s_k = base, s_v = base + C::kVOffset;
  auto s_q = [&](int s) { return base + C::kStageOffset + s * 2 * C::kTileBytes; };
  auto s_do = [&](int s) { return s_q(s) + C::kTileBytes; };
  auto s_stats = [&](int s) { return base + C::kStatsOffset + s * C::kStatsBytes; };  // lse[BQ], delta[BQ]
  const uint32_t bar_kv = base + C::kBarOffset;
  auto full = [&](int s) { return bar_kv + 8 + 8 * s; };
  auto empty = [&](int s) { return bar_kv + 8 + 8 * (kStages + s); };

  // Key block 0 has the most query tiles: launched first (per head, or over all heads).
  const int k0 = blockIdx.x * kKeys;
  const int kv_heads = args.heads / args.group;
  const int batch = blockIdx.y / kv_heads, kv_head = blockIdx.y % kv_heads;
  const int64_t T = args.seq;
  const int i0 = k0 / BQ;  // the first query tile that sees any of these keys
  const int per_head = static_cast<int>((T + BQ - 1) / BQ) - i0;  // query tiles per query head
  const int n_tiles = per_head * args.group;  // the group's query heads one after the other

  if (threadIdx.x == 0) {
    ptx::MbarInit(bar_kv, 1);
    for (int s = 0; s < kStages; ++s) {
      ptx::MbarInit(full(s), 1 + 32);  // the TMA thread's expect_tx + every producer lane after its lse/delta stores
      ptx::MbarInit(empty(s), 8);      // one arrive per consumer warp
    }
    ptx::FenceBarrierInit();
    ptx::FenceProxyAsyncShared();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  const int lane = threadIdx.x % 32;
  if (warpgroup == 0) {
    // ---- producer: warp 0 ----
    ptx::SetMaxNRegDec<24>();
    if (threadIdx.x >= 32) return;
    auto load = [&](uint32_t dst, const CUtensorMap* map, uint32_t bar, int col, int row, int head, bool rows_first) {
      TmaLoadHeadRows(dst, map, bar, col, row, head, batch, rows_first);
    };
    if (lane == 0) {
      ptx::PrefetchTensorMap(&tmap_q);
      ptx::PrefetchTensorMap(&tmap_do);
      ptx::PrefetchTensorMap(&tmap_k);
      ptx::PrefetchTensorMap(&tmap_v);
      ptx::MbarArriveExpectTx(bar_kv, 2 * C::kKvBytes);
#pragma unroll
      for (int cb = 0; cb < C::kColBlocks; ++cb) {
        load(s_k + cb * kKeys * 128, &tmap_k, bar_kv, cb * kSwizzleCols, k0, kv_head, args.kv_rows_before_heads);
        load(s_v + cb * kKeys * 128, &tmap_v, bar_kv, cb * kSwizzleCols, k0, kv_head, args.kv_rows_before_heads);
      }
    }
    int s = 0;
    uint32_t phase = 0;
    for (int it = 0; it < n_tiles; ++it) {
      const int head = kv_head * args.group + it / per_head, q0 = (i0 + it % per_head) * BQ;
      const int64_t bh = static_cast<int64_t>(batch) * args.heads + head;
      const float* lse = args.lse + bh * T;
      const float* delta = args.delta + bh * T;
      ptx::MbarWait(empty(s), phase ^ 1);  // a fresh barrier passes parity 1 at once
      if (lane == 0) {
        ptx::MbarArriveExpectTx(full(s), 2 * C::kTileBytes);
#pragma unroll
        for (int cb = 0; cb < C::kColBlocks; ++cb) {
          load(s_q(s) + cb * BQ * 128, &tmap_q, full(s), cb * kSwizzleCols, q0, head, args.rows_before_heads);
          load(s_do(s) + cb * BQ * 128, &tmap_do, full(s), cb * kSwizzleCols, q0, head, args.do_rows_first);
        }
      }
#pragma unroll
      for (int j = lane; j < BQ; j += 32) {
        const bool in = q0 + j < T;
        StSharedU32(s_stats(s) + 4 * j, __float_as_uint(in ? __ldg(lse + q0 + j) : INFINITY));
        StSharedU32(s_stats(s) + 4 * (BQ + j), __float_as_uint(in ? __ldg(delta + q0 + j) : 0.f));
      }
      ptx::MbarArrive(full(s));  // release: this lane's stores before the consumers' acquire
      if (++s == kStages) s = 0, phase ^= 1;
    }
    return;
  }

  // ---- consumers: keys [64·cw, 64·cw + 64) of the block ----
  ptx::SetMaxNRegInc<240>();
  const int cw = warpgroup - 1;
  const int warp = (threadIdx.x / 32) % 4, g = lane / 4, t4 = lane % 4;
  const int wg_key0 = k0 + 64 * cw;
  const int key0 = wg_key0 + 16 * warp + g;  // this thread's keys (accumulator rows): key0 and key0 + 8
  const PingPongTurns turns(cw);

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = 0.f, dv[i] = 0.f;
  float sc[BQ / 2], dp[BQ / 2];
  uint32_t p[BQ / 16][4], ds[BQ / 16][4];
  const uint32_t k_rows = s_k + 64 * cw * 128, v_rows = s_v + 64 * cw * 128;  // in each column block

  // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for the tile in stage s (K-major: 16 columns = 32 bytes per k step).
  auto issue_s_dp = [&](int s) {
    ptx::FenceOperands(sc);
    ptx::FenceOperands(dp);
    ptx::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off_a = (kk / 4) * kKeys * 128 + (kk % 4) * 32, off_b = (kk / 4) * BQ * 128 + (kk % 4) * 32;
      WgmmaSS(sc, ptx::MakeSmemDescSw128(k_rows + off_a), ptx::MakeSmemDescSw128(s_q(s) + off_b), kk > 0);
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off_a = (kk / 4) * kKeys * 128 + (kk % 4) * 32, off_b = (kk / 4) * BQ * 128 + (kk % 4) * 32;
      WgmmaSS(dp, ptx::MakeSmemDescSw128(v_rows + off_a), ptx::MakeSmemDescSw128(s_do(s) + off_b), kk > 0);
    }
    ptx::WgmmaCommit();
  };
  // Pᵀ and dSᵀ as BF16 A fragments (n8 block i is half of k16 slice i/2), as the mma.sync kernel
  // rounds them. Accumulator column 8i + 2·t4 + (e & 1) is query q0 + that; row e >> 1 is key0 + 8·(e >> 1).
  auto compute_p_ds = [&](int s, int q0) {
    const bool mask = wg_key0 + 63 > q0;  // some key of the warpgroup comes after some query
#pragma unroll
    for (int i = 0; i < BQ / 8; ++i) {
      const int col = 8 * i + 2 * t4;
      const float2 l = LdSharedF32x2(s_stats(s) + 4 * col), dl = LdSharedF32x2(s_stats(s) + 4 * (BQ + col));
      float pv[4], dsv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float lse_q = (e & 1) ? l.y : l.x, delta_q = (e & 1) ? dl.y : dl.x;
        pv[e] = Exp2(fmaf(sc[4 * i + e], args.scale_log2, -lse_q));
        if (mask && key0 + 8 * (e >> 1) > q0 + col + (e & 1)) pv[e] = 0.f;
        dsv[e] = pv[e] * (dp[4 * i + e] - delta_q);
      }
      p[i / 2][(i % 2) * 2 + 0] = PackBf16(pv[0], pv[1]);
      p[i / 2][(i % 2) * 2 + 1] = PackBf16(pv[2], pv[3]);
      ds[i / 2][(i % 2) * 2 + 0] = PackBf16(dsv[0], dsv[1]);
      ds[i / 2][(i % 2) * 2 + 1] = PackBf16(dsv[2], dsv[3]);
    }
  };
  // dV += Pᵀ·dO and dK += dSᵀ·Q (MN-major B: 16 queries = 16 rows of 128 bytes per k step).
  auto issue_dv_dk = [&](int s) {
    ptx::FenceOperands(dv);
    ptx::FenceOperands(dk);
    ptx::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk)
      WgmmaRS(dv, p[kk], MakeSmemDescSw128MnMajor(s_do(s) + kk * 16 * 128, BQ * 128), true);
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk)
      WgmmaRS(dk, ds[kk], MakeSmemDescSw128MnMajor(s_q(s) + kk * 16 * 128, BQ * 128), true);
    ptx::WgmmaCommit();
  };

  // Peeled so that every wgmma is issued on a straight path (a conditional issue makes ptxas
  // serialize them): a turn is Sᵀ/dPᵀ of the first tile; then dV/dK of tile j with Sᵀ/dPᵀ of j + 1.
  int s = 0;
  uint32_t phase = 0;
  ptx::MbarWait(bar_kv, 0);
  ptx::MbarWait(full(0), 0);
  turns.Begin();
  issue_s_dp(0);
  turns.End(false);
  auto step = [&](int it, auto last) {
    constexpr bool kLast = decltype(last)::value;
    ptx::WgmmaWait<0>();
    ptx::FenceOperands(sc);
    ptx::FenceOperands(dp);
    compute_p_ds(s, (i0 + it % per_head) * BQ);
    turns.Begin();
    issue_dv_dk(s);
    ptx::WgmmaWait<0>();  // dV/dK done before the turn passes on
    ptx::FenceOperands(dv);
    ptx::FenceOperands(dk);
    if (lane == 0) ptx::MbarArrive(empty(s));
    if (++s == kStages) s = 0, phase ^= 1;
    if constexpr (!kLast) {
      ptx::MbarWait(full(s), phase);
      issue_s_dp(s);
    }
    turns.End(kLast);
  };
  for (int it = 0; it + 1 < n_tiles; ++it) step(it, std::false_type{});
  step(n_tiles - 1, std::true_type{});

  const int64_t off = batch * args.batch_stride + kv_head * args.head_stride;
  const float fk[2] = {args.scale, args.scale}, fv[2] = {1.f, 1.f};
  StoreRows<D>(dk, fk, s_k, cw, args.dk + off, args.row_stride, k0, T);
  StoreRows<D>(dv, fv, s_v, cw, args.dv + off, args.row_stride, k0, T);
}

template <int D, int BQ>
Status LaunchDkDv(const AttentionDims& d, const bf16* q, HeadLayout qkv, const bf16* k, const bf16* v, HeadLayout kvl,
                  const bf16* dy, HeadLayout yl, const float* lse, const float* delta, bf16* dk, bf16* dv,
                  cudaStream_t stream) {
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tq, HeadsTensorMap(q, d, qkv, BQ, "q"));
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tdo, HeadsTensorMap(dy, d, yl, BQ, "dy"));
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tk, HeadsTensorMap(k, KvDims(d), kvl, kKeys, "k"));
  FP8_ASSIGN_OR_RETURN(const CUtensorMap tv, HeadsTensorMap(v, KvDims(d), kvl, kKeys, "v"));
  DkDvArgs a{};
  a.seq = static_cast<int32_t>(d.seq);
  a.heads = static_cast<int32_t>(d.heads);
  a.group = static_cast<int32_t>(d.heads / KvHeads(d));
  a.rows_before_heads = qkv.row_stride <= qkv.head_stride;
  a.kv_rows_before_heads = kvl.row_stride <= kvl.head_stride;
  a.do_rows_first = yl.row_stride <= yl.head_stride;
  a.batch_stride = kvl.batch_stride, a.head_stride = kvl.head_stride, a.row_stride = kvl.row_stride;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
  a.scale_log2 = a.scale * kLog2e;
  a.lse = lse, a.delta = delta, a.dk = dk, a.dv = dv;
  auto kernel = FlashBackwardDkDvWgmmaKernel<D, BQ>;
  constexpr uint32_t smem = DkDvCfg<D, BQ>::kSmemBytes;
  // Set on every call, as the other launchers do: the attribute is per device.
  FP8_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const unsigned key_blocks = static_cast<unsigned>((d.seq + kKeys - 1) / kKeys), bh = static_cast<unsigned>(d.batch * KvHeads(d));
  const dim3 grid(key_blocks, bh);
  kernel<<<grid, kThreads, smem, stream>>>(tq, tdo, tk, tv, a);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace

namespace internal {

Status FlashAttentionBackwardDkDvWgmma(const AttentionDims& d, const bf16* q, HeadLayout qkv, const bf16* k,
                                       const bf16* v, HeadLayout kvl, const bf16* dy, HeadLayout yl, const float* lse,
                                       const float* delta, bf16* dk, bf16* dv, cudaStream_t s) {
  // Ping-pong turns; 128-query tiles at hd 64, 64 at hd 128; key blocks in launch order. The
  // schedules that lost (no turns, 64-query tiles at hd 64, the next tile's Sᵀ/dPᵀ overlapped,
  // heaviest key blocks first) are in docs/perf-history.md.
  if (d.head_dim == 64) return LaunchDkDv<64, 128>(d, q, qkv, k, v, kvl, dy, yl, lse, delta, dk, dv, s);
  return LaunchDkDv<128, 64>(d, q, qkv, k, v, kvl, dy, yl, lse, delta, dk, dv, s);
}

}  // namespace internal
}  // namespace fp8::train::cuda
