// SPDX-License-Identifier: Apache-2.0
// Device side of Sm90GemmFp8Blockwise (sm90_fp8_gemm_blockwise.h): the FP8 wgmma shapes and the
// warp-specialized persistent kernel (shared PTX wrappers: sm90_ptx.cuh).
//
// CTA = 3 warpgroups. Warpgroup 2 is the producer: one thread streams 128x128 A and
// 128xBLOCK_N B tiles of each K block through a kStages-deep shared-memory ring with TMA,
// completing on "full" mbarriers. Warpgroups 0 and 1 are consumers, 64 rows each: wgmma
// m64nBLOCK_Nk32 (4 per K block) into an FP32 partial accumulator (two of them, alternating,
// so K block kb is on the tensor cores while kb - 1 is promoted), promotion
// total += (scale_a[row] · scale_b) · partial in registers, then release of the stage on its
// "empty" mbarrier. The epilogue converts to bf16 into a 128B-swizzled staging tile and stores
// it with TMA while the producer already loads the next tile. Tiles are walked persistently
// (grid = #SMs) in groups of kGroupM row blocks, so concurrent CTAs share A and B tiles in L2.
//
// 256-row tiles (large M): each consumer warpgroup owns 128 rows as two 64-row waves with one
// FP32 partial (wave: 4 wgmma, wait, promote), and CTA pairs on neighbouring column blocks share
// the A tile by TMA multicast (Config's comments).
//
// Split-K (kSplitK = S > 1, for small M where the tiles alone leave SMs idle): a thread-block
// cluster of S CTAs computes one tile, CTA r over the r-th of S equal K ranges. Each CTA pushes
// slice r of its FP32 total into CTA r's (now idle) stage memory with st.async, completing on
// CTA r's barrier (DSMEM, no cluster barrier), and CTA r sums slice r over the S CTAs in rank
// order 0..S-1 and writes it as bf16: no workspace, no atomics, and the same bits on every run.
#pragma once

#include <cuda.h>  // CUtensorMap (types only: the encoder is fetched through the runtime)
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/sm90_ptx.cuh"

namespace fp8::kernels::cuda::blockwise_gemm {

constexpr int kBlockK = 128;  // = one scale block of K, and one 128-byte swizzle row of FP8
constexpr int kThreads = 384;
constexpr int kConsumerWarps = 8;
constexpr int kGroupM = 8;

// Every tile has two FP32 partial accumulators per consumer warpgroup, so K block kb runs on
// the tensor cores while kb - 1 is promoted.
// kSplitK = S > 1: clusters of S CTAs split each tile's K blocks (file comment); one tile per
// cluster (grid = tiles x S), so the stage memory is free for the reduction after the K loop.
// kScalesTma: the producer also copies each stage's scales into shared memory on the stage's
// full barrier (1-D bulk copies: the tile rows' 128 A scales, 512 bytes of [K/128, M], and the
// 16-byte group of the tile's B-scale row holding the K block), so the consumers read them with
// ld.shared after the barrier wait and the K loop has no global loads (with __ldg one K block
// ahead, ptxas's register rotation of the scale sets made each K block's first wgmma wait for
// an HBM round trip; docs/perf-history.md). Needs M % 4 == 0 and 16-byte aligned scale arrays
// (16-byte aligned bulk-copy sources); the host falls back to the __ldg twin otherwise.
// kOneStagingBox: the epilogue stages one 64x64 bf16 box per consumer warpgroup at a time (store,
// wait until the TMA has read it, next box) instead of its whole 64 x BLOCK_N slice: for
// 128x128 tiles 16 KB of staging instead of 32 KB, which buys back the stage the scale copies
// cost (6 stages instead of 5).
// kL2Hints (small M): the TMA loads tell L2 to keep A (read by every CTA, evict_last) and to
// drop B first (each B tile is read by one CTA once, evict_first), so the streamed B does not
// push A out.
// kBlockM = 256 (large M): each consumer warpgroup owns 128 rows of the tile as two 64-row
// wgmma waves with one FP32 partial accumulator (wave, wait, promote; the other warpgroup's
// wgmma keeps the tensor cores busy meanwhile): half the B bytes per FLOP of 128-row tiles.
// kMulticastA: clusters of 2 CTAs take tiles (m, 2q) and (m, 2q + 1) together; each loads half
// of the shared A tile and multicasts it to both, so A crosses L2 once per pair. A stage is
// refilled once both CTAs' consumers released it (each consumer warp arrives on both CTAs'
// empty barriers). Needs an even number of column blocks.
// 256-row tiles build their wgmma descriptors once per warpgroup (uniform across the warp, as
// __shfl_sync makes them) and step them by the stage offset: rebuilt from the shared-memory base
// in every K block (ptxas rematerialized the base there) they ran 5-7% slower (kUniformDescs).
template <int kBlockN_, int kStages_, int kSplitK_ = 1, bool kScalesTma_ = false, bool kOneStagingBox_ = false,
          bool kL2Hints_ = false, int kBlockM_ = 128, bool kMulticastA_ = false>
struct Config {
  static constexpr int kBlockM = kBlockM_;
  static_assert(kBlockM == 128 || kBlockM == 256, "BLOCK_M: 128 or 256");
  static constexpr int kBlockN = kBlockN_;
  static_assert(kBlockN == 64 || kBlockN == 128, "BLOCK_N: 64 or 128 (one 128-column B-scale block per tile)");
  static constexpr int kStages = kStages_;
  static constexpr int kSplitK = kSplitK_;
  static constexpr bool kMulticastA = kMulticastA_;
  static_assert(!kMulticastA || kSplitK == 1, "multicast or split-K clusters, not both");
  static constexpr int kClusterDim = kMulticastA ? 2 : kSplitK;  // CTAs per thread-block cluster
  static constexpr bool kScalesTma = kScalesTma_;
  static constexpr bool kOneStagingBox = kOneStagingBox_;
  static constexpr bool kL2Hints = kL2Hints_;
  static constexpr int kWaves = kBlockM / 128;   // 64-row wgmma waves per consumer warpgroup
  static constexpr int kWgRows = kBlockM / 2;    // tile rows per consumer warpgroup
  static_assert(kWaves == 1 || (kSplitK == 1 && kScalesTma), "256-row tiles: scales through the pipeline, no split");
  static constexpr bool kUniformDescs = kWaves == 2;
  static constexpr int kTmaARows = kMulticastA ? kBlockM / 2 : kBlockM;  // rows of one A load
  static constexpr int kAccRegs = kBlockN / 2;  // 64 x BLOCK_N floats over 128 threads (one wave)
  static constexpr int kTotalRegs = kWaves * kAccRegs;
  static constexpr int kStageABytes = kBlockM * kBlockK;
  static constexpr int kStageBBytes = kBlockN * kBlockK;
  static constexpr int kStageBytes = kStageABytes + kStageBBytes;
  // Per consumer warpgroup and wave: 64 rows x BLOCK_N bf16 as BLOCK_N/64 boxes of 64x64 (128
  // bytes a row, the widest box the 128B swizzle allows).
  static constexpr int kEpilogueBoxBytes = 64 * 64 * 2;
  static constexpr int kEpilogueBoxes = kBlockN / 64;
  static constexpr int kWgBoxes = kWaves * kEpilogueBoxes;
  static constexpr int kStagedBoxes = kOneStagingBox ? 1 : kWgBoxes;
  static constexpr int kEpilogueWgBytes = kEpilogueBoxBytes * kStagedBoxes;
  // Split-K writes D from registers (no staging tile), which leaves room for one more stage.
  static constexpr int kStagingBytes = kSplitK > 1 ? 0 : 2 * kEpilogueWgBytes;
  // kScalesTma: per stage the A scales of the tile's 128 rows, then the 4 B scales (16 bytes,
  // the bulk-copy granule) whose group holds the stage's K block.
  static constexpr int kScaleAStageBytes = kBlockM * 4;
  static constexpr int kScaleBStageBytes = 16;
  static constexpr int kScaleAOffset = kStages * kStageBytes + kStagingBytes;
  static constexpr int kScaleBOffset = kScaleAOffset + (kScalesTma ? kStages * kScaleAStageBytes : 0);
  static constexpr int kBarrierOffset = kScaleBOffset + (kScalesTma ? kStages * kScaleBStageBytes : 0);
  // +1024: the dynamic shared memory base is aligned up to the 1024-byte swizzle atom.
  // Split-K: two more barriers (PushPartial, ReduceAndStore).
  static constexpr int kSmemBytes = 1024 + kBarrierOffset + 2 * kStages * 8 + (kSplitK > 1 ? 16 : 0);
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an sm_90 CTA may have");
  // Split-K: each consumer thread's FP32 total, kAccRegs / 4 float4s, gathered in the receiving
  // CTA's stage memory.
  static constexpr int kReduceVecs = kAccRegs / 4;
  static_assert(kSplitK == 1 || kConsumerWarps * 32 * kAccRegs * 4 <= kStages * kStageBytes,
                "the split-K partials must fit in the stage ring");
  static_assert(kReduceVecs % kSplitK == 0, "each CTA of the cluster reduces an equal slice");
};

// The shared PTX wrappers (sm90_ptx.cuh), unqualified inside this namespace.
using namespace ::fp8::kernels::cuda::ptx;

// D[64 x 128] (+)= A[64 x 32] · B[128 x 32]ᵀ, both K-major in 128B-swizzled shared memory.
__device__ __forceinline__ void WgmmaM64N128K32(float (&d)[64], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// D[64 x 64] (+)= A[64 x 32] · B[64 x 32]ᵀ, both K-major in 128B-swizzled shared memory.
__device__ __forceinline__ void WgmmaM64N64K32(float (&d)[32], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

template <int kN>
__device__ __forceinline__ void WgmmaM64K32(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                            bool accumulate) {
  if constexpr (kN == 128) {
    WgmmaM64N128K32(d, desc_a, desc_b, accumulate);
  } else {
    static_assert(kN == 64, "wgmma shapes: N = 128, 64");
    WgmmaM64N64K32(d, desc_a, desc_b, accumulate);
  }
}

// ---- tile scheduler --------------------------------------------------------------------------
// Tile t -> (m block, n block): groups of kGroupM row blocks, row block fastest inside a group,
// so the CTAs running at one time read few distinct A and B tiles (L2 reuse). Producer and
// consumers call it with the same t and get the same tile. With A multicast, t numbers pairs of
// column blocks and the cluster's CTA r takes column block 2q + r.
struct TileCoord {
  uint32_t m_block, n_block;
};
__device__ __forceinline__ TileCoord TileOf(uint32_t t, uint32_t num_m_blocks, uint32_t num_n_blocks) {
  const uint32_t per_group = kGroupM * num_n_blocks;
  const uint32_t group = t / per_group;
  const uint32_t first_m = group * kGroupM;
  const uint32_t group_m = min(num_m_blocks - first_m, static_cast<uint32_t>(kGroupM));
  const uint32_t r = t - group * per_group;
  return {first_m + r % group_m, r / group_m};
}

// This CTA's tiles: t in [FirstTile, NumTiles) step TileStride. With split-K the S CTAs of a
// cluster share one tile t.
template <class Cfg>
__device__ __forceinline__ uint32_t FirstTile() { return blockIdx.x / Cfg::kClusterDim; }
template <class Cfg>
__device__ __forceinline__ uint32_t TileStride() { return gridDim.x / Cfg::kClusterDim; }

struct KernelArgs {
  const float* a_scale;  // [K/128, M]
  const float* b_scale;  // [N/128, b_scale_ld]
  __nv_bfloat16* d;      // [M, N]; written directly only by the split-K reduction
  uint32_t m, n, num_m_blocks, num_n_blocks, num_k_blocks, b_scale_ld;
};

// This CTA's K blocks [begin, end): all of them, or with split-K the rank-th of kSplitK equal
// ranges (the host keeps kSplitK <= the number of K blocks, so none is empty).
struct KRange {
  uint32_t begin, end;
};
template <class Cfg>
__device__ __forceinline__ KRange CtaKRange(const KernelArgs& args) {
  const uint32_t r = blockIdx.x % Cfg::kSplitK, nk = args.num_k_blocks;
  return {r * nk / Cfg::kSplitK, (r + 1) * nk / Cfg::kSplitK};
}

template <class Cfg>
__device__ __forceinline__ uint32_t NumTiles(const KernelArgs& args) {
  return args.num_m_blocks * (Cfg::kMulticastA ? args.num_n_blocks / 2 : args.num_n_blocks);
}
template <class Cfg>
__device__ __forceinline__ TileCoord CtaTile(uint32_t t, const KernelArgs& args) {
  if constexpr (Cfg::kMulticastA) {
    const TileCoord pair = TileOf(t, args.num_m_blocks, args.num_n_blocks / 2);
    return {pair.m_block, 2 * pair.n_block + blockIdx.x % 2};
  } else {
    return TileOf(t, args.num_m_blocks, args.num_n_blocks);
  }
}

// Shared-memory addresses of the pipeline (all 1024-byte aligned except the scales (16-byte
// aligned) and the barriers).
struct SmemLayout {
  uint32_t a, b, epilogue, scale_a, scale_b, full_bar, empty_bar;
  uint32_t free_bar, recv_bar;  // split-K: peers' stage rings free; the peers' slices arrived
};

// One K block's scales for this thread: scale_a of its two rows and the tile's scale_b.
struct Scales {
  float a0, a1, b;
};

// A consumer warpgroup's side of the pipeline: 64 rows of the tile, the FP32 total in
// registers, the stage ring position. Everything inlines; arrays are only indexed with
// constants, so they stay in registers.
template <class Cfg>
struct Consumer {
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStages = Cfg::kStages, kAcc = Cfg::kAccRegs;
  const KernelArgs& args;
  const CUtensorMap* tmap_d;
  SmemLayout smem;
  uint32_t warpgroup, lane, row_in_wg;
  uint32_t desc_a_lo, desc_b_lo;  // kUniformDescs: stage 0's descriptors (low words)
  uint32_t s = 0, phase = 0;
  float total[Cfg::kTotalRegs];  // wave w: total[w * kAcc, (w + 1) * kAcc)

  // wgmma's accumulator layout: this thread holds rows r and r + 8 of the wave's 64,
  // columns 8i + 2(lane % 4) + {0, 1} for i < BLOCK_N / 8.
  __device__ __forceinline__ Consumer(const KernelArgs& a, const CUtensorMap* d, SmemLayout l)
      : args(a), tmap_d(d), smem(l), warpgroup(threadIdx.x / 128), lane(threadIdx.x % 32),
        row_in_wg((threadIdx.x / 32) % 4 * 16 + threadIdx.x % 32 / 4) {
    if constexpr (Cfg::kUniformDescs) {
      warpgroup = __shfl_sync(0xffffffffu, warpgroup, 0);
      desc_a_lo = __shfl_sync(0xffffffffu,
                              static_cast<uint32_t>(MakeSmemDescSw128(smem.a + warpgroup * Cfg::kWgRows * kBlockK)), 0);
      desc_b_lo = __shfl_sync(0xffffffffu, static_cast<uint32_t>(MakeSmemDescSw128(smem.b)), 0);
    }
  }

  __device__ __forceinline__ void WaitFull() const { MbarWait(smem.full_bar + 8 * s, phase); }
  __device__ __forceinline__ bool FullReady() const { return MbarTestWait(smem.full_bar + 8 * s, phase); }

  __device__ __forceinline__ void NextStage() {
    if (++s == kStages) {
      s = 0;
      phase ^= 1;
    }
  }
  // The stage's tiles may be overwritten once every consumer warp has arrived (with A
  // multicast: every consumer warp of both CTAs, lane r arriving on CTA r's barrier).
  __device__ __forceinline__ void Release(uint32_t stage) const {
    if constexpr (Cfg::kMulticastA) {
      if (lane < 2) MbarArriveRemote(smem.empty_bar + 8 * stage, lane);
    } else {
      if (lane == 0) MbarArrive(smem.empty_bar + 8 * stage);
    }
  }

  __device__ __forceinline__ Scales LoadScales(TileCoord tile, uint32_t kb) const {
    static_assert(Cfg::kWaves == 1, "__ldg scales: 128-row tiles");
    const uint32_t r0 = tile.m_block * kBlockM + warpgroup * 64 + row_in_wg, r1 = r0 + 8;
    const float* a_scale_kb = args.a_scale + static_cast<size_t>(kb) * args.m;
    const float* b_scale_row = args.b_scale + (tile.n_block * kBlockN / 128) * args.b_scale_ld;
    return Scales{r0 < args.m ? __ldg(a_scale_kb + r0) : 0.0f, r1 < args.m ? __ldg(a_scale_kb + r1) : 0.0f,
                  __ldg(b_scale_row + kb)};
  }

  // kScalesTma: K block kb's scales from the current stage's copies (call after WaitFull). The
  // same floats as LoadScales for rows < M, so the promotion is bitwise the same there. Rows past
  // M read a slot the copy did not fill (inside the array): their totals hold garbage, but their
  // A rows are zeros and no store writes rows past M (TMA stores clip, the split-K reduction
  // checks), so no select is needed in the K loop. ld.shared with a memory clobber: stays after
  // the barrier wait.
  __device__ __forceinline__ Scales StageScales(uint32_t kb, uint32_t wave = 0) const {
    const uint32_t row = warpgroup * Cfg::kWgRows + wave * 64 + row_in_wg;
    const uint32_t sa = smem.scale_a + s * Cfg::kScaleAStageBytes + row * 4;
    const uint32_t sb = smem.scale_b + s * Cfg::kScaleBStageBytes + (kb % 4) * 4;
    return Scales{LdSharedF32(sa), LdSharedF32(sa + 8 * 4), LdSharedF32(sb)};
  }

  // part = this stage's A rows of `wave` · B tile, 4 wgmma of K = 32 (the first overwrites part).
  __device__ __forceinline__ void Issue(float (&part)[kAcc], uint32_t wave = 0) const {
    uint64_t desc_a, desc_b;
    if constexpr (Cfg::kUniformDescs) {
      // The address field counts 16-byte units; the high word (stride, swizzle) is constant.
      constexpr uint64_t kHi = (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);  // as MakeSmemDescSw128
      desc_a = kHi | (desc_a_lo + (s * Cfg::kStageABytes + wave * 64 * kBlockK) / 16);
      desc_b = kHi | (desc_b_lo + s * Cfg::kStageBBytes / 16);
    } else {
      desc_a = MakeSmemDescSw128(smem.a + s * Cfg::kStageABytes + (warpgroup * Cfg::kWgRows + wave * 64) * kBlockK);
      desc_b = MakeSmemDescSw128(smem.b + s * Cfg::kStageBBytes);
    }
    FenceOperands(part);
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kBlockK / 32; ++k) WgmmaM64K32<kBlockN>(part, desc_a + 2 * k, desc_b + 2 * k, k > 0);
    WgmmaCommit();
    FenceOperands(part);
  }

  // total += (scale_a[row] · scale_b) · part. The scales are multiplied here, after the
  // wgmma.wait, and were loaded a K block earlier: a multiply right after the loads made the
  // warp wait out their latency between two wgmma issues (seen in the SASS: ptxas sinks the
  // loads past the barrier wait, next to the wgmma).
  template <int kWave = 0>
  __device__ __forceinline__ void Promote(float (&part)[kAcc], const Scales& sc) {
    FenceOperands(part);
    const float s0 = sc.a0 * sc.b, s1 = sc.a1 * sc.b;
    float* t = total + kWave * kAcc;
#pragma unroll
    for (int i = 0; i < kAcc; i += 4) {
      t[i] = fmaf(s0, part[i], t[i]);
      t[i + 1] = fmaf(s0, part[i + 1], t[i + 1]);
      t[i + 2] = fmaf(s1, part[i + 2], t[i + 2]);
      t[i + 3] = fmaf(s1, part[i + 3], t[i + 3]);
    }
  }

  __device__ __forceinline__ void ZeroTotal() {
#pragma unroll
    for (int i = 0; i < Cfg::kTotalRegs; ++i) total[i] = 0.0f;
  }

  // bf16 into the 128B-swizzled staging tile, then one TMA store per 64x64 box (box b of the
  // warpgroup: wave b / kEpilogueBoxes, columns 64 (b % kEpilogueBoxes)); with kOneStagingBox box
  // by box through one staging box, each store read out before the next box is written.
  __device__ __forceinline__ void Epilogue(TileCoord tile) {
    constexpr int kStaged = Cfg::kStagedBoxes;
    constexpr int kPasses = Cfg::kWgBoxes / kStaged;
    const uint32_t staging = smem.epilogue + warpgroup * Cfg::kEpilogueWgBytes;
    const bool leader = threadIdx.x % 128 == 0;
    const uint32_t out_row = tile.m_block * kBlockM + warpgroup * Cfg::kWgRows;
    // stmatrix: lane l addresses row l % 8 + 8 ((l / 8) % 2) of its warp's 16 rows, 8-column
    // group 2q + l / 16 of the box (q < 4: four x4 stores fill the warp's rows of a 64x64 box).
    // 16-byte chunk c of row r sits at chunk c ^ (r % 8): the 8 rows of each 8x8 matrix land in
    // 8 different chunks, so the stores are free of bank conflicts.
    const uint32_t st_row = (threadIdx.x / 32) % 4 * 16 + (lane / 8) % 2 * 8 + lane % 8;
    uint32_t st_off[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) st_off[q] = st_row * 128 + ((2 * q + lane / 16) ^ (lane % 8)) * 16;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      if (leader) BulkWaitRead();  // the previous store has read the staging memory
      NamedBarrierSync(1 + warpgroup, 128);
#pragma unroll
      for (int jb = 0; jb < kStaged; ++jb) {
        const int b = pass * kStaged + jb;  // box of the warpgroup
        const float* t = total + (b / Cfg::kEpilogueBoxes) * kAcc;
        const uint32_t box = staging + jb * Cfg::kEpilogueBoxBytes;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float* g = t + 8 * ((b % Cfg::kEpilogueBoxes) * 4 + q);  // column groups 2p, 2p + 1
          StMatrixX4(box + st_off[q], PackBf16(g[0], g[1]), PackBf16(g[2], g[3]), PackBf16(g[4], g[5]),
                     PackBf16(g[6], g[7]));
        }
      }
      FenceProxyAsyncShared();
      NamedBarrierSync(1 + warpgroup, 128);
      if (leader) {
#pragma unroll
        for (int jb = 0; jb < kStaged; ++jb) {
          const int b = pass * kStaged + jb;
          const uint32_t row = out_row + (b / Cfg::kEpilogueBoxes) * 64;
          if (row < args.m) {  // rows past M: the TMA store clips partial boxes
            TmaStore2d(tmap_d, staging + jb * Cfg::kEpilogueBoxBytes,
                       static_cast<int32_t>(tile.n_block * kBlockN + (b % Cfg::kEpilogueBoxes) * 64),
                       static_cast<int32_t>(row));
          }
        }
        BulkCommit();
      }
    }
  }

  // Split-K, step 1: tell the cluster's other CTAs that this CTA's stage ring is free (both
  // warpgroups' last wgmma has completed: the CTA's only tile), wait until theirs are, then push
  // float4 j of this thread's total (slice j / kSlice, reduced by CTA j / kSlice) into that CTA's
  // ring at ((rank · kSlice + j % kSlice) · 256 + i) · 16 (consecutive threads, consecutive 16
  // bytes): st.async completing on its receive barrier, plain stores for this CTA's own slice.
  // No cluster barrier: its release compiled to a GPU-wide memory barrier (MEMBAR.ALL.GPU; ncu:
  // 9% of the consumers' samples at M = 128, (4096, 7168)).
  __device__ __forceinline__ void PushPartial() {
    constexpr int kSlice = Cfg::kReduceVecs / Cfg::kSplitK;
    constexpr uint32_t kVecBytes = kConsumerWarps * 32 * 16;  // one float4 of every consumer thread
    const uint32_t rank = blockIdx.x % Cfg::kSplitK, i = threadIdx.x;
    NamedBarrierSync(3, kConsumerWarps * 32);
    if (i == 0) {
      for (uint32_t cta = 0; cta < Cfg::kSplitK; ++cta) {
        if (cta != rank) MbarArriveRemote(smem.free_bar, cta);
      }
      MbarArriveExpectTx(smem.recv_bar, (Cfg::kSplitK - 1) * kSlice * kVecBytes);
    }
    MbarWait(smem.free_bar, 0);
#pragma unroll
    for (int j = 0; j < Cfg::kReduceVecs; ++j) {
      const uint32_t dst = j / kSlice, addr = smem.a + (rank * kSlice + j % kSlice) * kVecBytes + i * 16;
      if (dst == rank) {
        StSharedV4(addr, total[4 * j], total[4 * j + 1], total[4 * j + 2], total[4 * j + 3]);
      } else {
        StAsyncV4(addr, smem.recv_bar, dst, total[4 * j], total[4 * j + 1], total[4 * j + 2], total[4 * j + 3]);
      }
    }
  }

  // Split-K, step 2: once the other CTAs' slices have arrived, the rank-th slice of the float4s
  // summed over the cluster's CTAs in rank order (fixed, so the result is bitwise reproducible),
  // written as bf16. Every CTA holds the same fragment layout, so float4 j of thread i is
  // total[4j .. 4j + 3] of this thread's rows and columns.
  __device__ __forceinline__ void ReduceAndStore(TileCoord tile) const {
    constexpr int kSlice = Cfg::kReduceVecs / Cfg::kSplitK;
    constexpr uint32_t kVecBytes = kConsumerWarps * 32 * 16;
    const uint32_t rank = blockIdx.x % Cfg::kSplitK, i = threadIdx.x;
    const uint32_t r0 = tile.m_block * kBlockM + warpgroup * 64 + row_in_wg, r1 = r0 + 8;
    MbarWaitCluster(smem.recv_bar, 0);
    float4 sum[kSlice];
#pragma unroll
    for (int q = 0; q < kSlice; ++q) {
      const uint32_t addr = smem.a + q * kVecBytes + i * 16;
      sum[q] = LdSharedV4F32(addr);
#pragma unroll
      for (int cta = 1; cta < Cfg::kSplitK; ++cta) {
        const float4 v = LdSharedV4F32(addr + cta * kSlice * kVecBytes);
        sum[q].x += v.x;
        sum[q].y += v.y;
        sum[q].z += v.z;
        sum[q].w += v.w;
      }
    }
#pragma unroll
    for (int q = 0; q < kSlice; ++q) {
      const uint32_t col = tile.n_block * kBlockN + 8 * (rank * kSlice + q) + 2 * (lane % 4);
      if (r0 < args.m) {
        *reinterpret_cast<__nv_bfloat162*>(args.d + static_cast<size_t>(r0) * args.n + col) =
            __floats2bfloat162_rn(sum[q].x, sum[q].y);
      }
      if (r1 < args.m) {
        *reinterpret_cast<__nv_bfloat162*>(args.d + static_cast<size_t>(r1) * args.n + col) =
            __floats2bfloat162_rn(sum[q].z, sum[q].w);
      }
    }
  }
};

// One tile's K blocks [kr.begin, kr.end) into c.total (zeroed here).
template <class Cfg>
__device__ __forceinline__ void TileMainLoop(Consumer<Cfg>& c, TileCoord tile, KRange kr,
                                             float (&part0)[Cfg::kAccRegs], float (&part1)[Cfg::kAccRegs]) {
  const uint32_t end = kr.end;
  c.ZeroTotal();
  uint32_t kb = kr.begin;
  // Scales are loaded one K block ahead of their wgmma (kScalesTma: they come with the stage).
  Scales ahead{};
  if constexpr (!Cfg::kScalesTma) ahead = c.LoadScales(tile, kb);
  // ready: K block kb's stage was seen full by the probe in advance() (issued right after the
  // previous wgmma, so the barrier's latency passes during the promotion instead of before the
  // next wgmma).
  bool ready = false;
  auto fetch = [&] {  // waits for K block kb's tiles; returns its scales
    if constexpr (Cfg::kScalesTma) {
      if (!ready) c.WaitFull();
      return c.StageScales(kb);
    } else {
      const Scales cur = ahead;
      ahead = c.LoadScales(tile, min(kb + 1, end - 1));
      if (!ready) c.WaitFull();
      return cur;
    }
  };
  auto advance = [&] {
    ++kb;
    c.NextStage();
    ready = c.FullReady();  // past the last K block: a stage not (yet) filled, never waited on
  };
  // K block kb runs on the tensor cores while kb - 1 is promoted. Straight-line code with the
  // two partial buffers named statically (ptxas serializes wgmma when it cannot tell which
  // accumulators are in flight).
  {
    Scales pending = fetch();
    uint32_t pending_stage = c.s;
    auto step = [&](float(&issue_into)[Cfg::kAccRegs], float(&promote_from)[Cfg::kAccRegs]) {
      const Scales cur = fetch();
      const uint32_t cur_stage = c.s;
      c.Issue(issue_into);
      advance();
      WgmmaWait<1>();
      c.Release(pending_stage);
      c.Promote(promote_from, pending);
      pending = cur;
      pending_stage = cur_stage;
    };
    c.Issue(part0);
    advance();
    while (kb + 1 < end) {
      step(part1, part0);
      step(part0, part1);
    }
    if (kb < end) {
      step(part1, part0);
      WgmmaWait<0>();
      c.Release(pending_stage);
      c.Promote(part1, pending);
    } else {
      WgmmaWait<0>();
      c.Release(pending_stage);
      c.Promote(part0, pending);
    }
  }
}

// 256-row tiles: per K block, wave by wave, 4 wgmma into the one partial, wait, promote into
// the wave's total (the other consumer warpgroup's wgmma run meanwhile). The stage is released
// as soon as the last wave's wgmma has read it, before that wave's promotion.
template <class Cfg>
__device__ __forceinline__ void TileMainLoopWaves(Consumer<Cfg>& c, uint32_t num_k_blocks,
                                                  float (&part)[Cfg::kAccRegs]) {
  static_assert(Cfg::kWaves == 2 && Cfg::kScalesTma, "two waves, scales in the stage");
  c.ZeroTotal();
  bool ready = c.FullReady();
  for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
    if (!ready) c.WaitFull();
    const Scales sc0 = c.StageScales(kb, 0), sc1 = c.StageScales(kb, 1);
    c.Issue(part, 0);
    WgmmaWait<0>();
    c.template Promote<0>(part, sc0);
    c.Issue(part, 1);
    WgmmaWait<0>();
    c.Release(c.s);
    c.NextStage();
    // Probe the next stage before the last promotion: with the wait at the top of the loop, its
    // latency sat between this promotion and the next wave's wgmma (ncu: the most sampled
    // instruction outside the wgmma waits), while the tensor cores ran dry.
    ready = c.FullReady();
    c.template Promote<1>(part, sc1);
  }
}

// Tile by tile: K loop, then the epilogue (tensor cores idle during it unless the other
// warpgroup is still busy).
template <class Cfg>
__device__ __forceinline__ void RunTileByTile(Consumer<Cfg>& c, float (&part0)[Cfg::kAccRegs],
                                              float (&part1)[Cfg::kAccRegs]) {
  const KernelArgs& args = c.args;
  const uint32_t num_tiles = NumTiles<Cfg>(args);
  for (uint32_t t = FirstTile<Cfg>(); t < num_tiles; t += TileStride<Cfg>()) {
    const TileCoord tile = CtaTile<Cfg>(t, args);
    if constexpr (Cfg::kWaves == 2) {
      TileMainLoopWaves(c, args.num_k_blocks, part0);
    } else {
      TileMainLoop(c, tile, KRange{0, args.num_k_blocks}, part0, part1);
    }
    c.Epilogue(tile);
  }
}

// Split-K: this CTA's K range of the cluster's one tile, then the reduction over the cluster.
// No CTA exits while another may still touch its shared memory: every remote arrive and st.async
// targets a CTA that waits for it before it goes on.
template <class Cfg>
__device__ __forceinline__ void RunSplitK(Consumer<Cfg>& c, float (&part0)[Cfg::kAccRegs],
                                          float (&part1)[Cfg::kAccRegs]) {
  const TileCoord tile = CtaTile<Cfg>(FirstTile<Cfg>(), c.args);
  TileMainLoop(c, tile, CtaKRange<Cfg>(c.args), part0, part1);
  c.PushPartial();
  c.ReduceAndStore(tile);
}

// ---- the kernel ------------------------------------------------------------------------------
template <class Cfg>
__global__ void __launch_bounds__(kThreads, 1)
    Sm90Fp8BlockwiseGemmKernel(const __grid_constant__ CUtensorMap tmap_a,
                               const __grid_constant__ CUtensorMap tmap_b,
                               const __grid_constant__ CUtensorMap tmap_d, const KernelArgs args) {
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStages = Cfg::kStages;
  extern __shared__ uint8_t smem_raw[];
  // 128B-swizzled tiles must start on a 1024-byte boundary (the swizzle atom).
  const uint32_t base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  SmemLayout smem;
  smem.a = base;
  smem.b = base + kStages * Cfg::kStageABytes;
  smem.epilogue = base + kStages * Cfg::kStageBytes;
  smem.scale_a = base + Cfg::kScaleAOffset;
  smem.scale_b = base + Cfg::kScaleBOffset;
  smem.full_bar = base + Cfg::kBarrierOffset;
  smem.empty_bar = smem.full_bar + kStages * 8;
  smem.free_bar = smem.empty_bar + kStages * 8;
  smem.recv_bar = smem.free_bar + 8;
  const uint32_t num_tiles = NumTiles<Cfg>(args);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarInit(smem.full_bar + 8 * s, 1);  // the producer's arrive + the TMA bytes
      // One arrive per consumer warp (with A multicast, of both CTAs).
      MbarInit(smem.empty_bar + 8 * s, kConsumerWarps * (Cfg::kMulticastA ? 2 : 1));
    }
    if constexpr (Cfg::kSplitK > 1) {
      MbarInit(smem.free_bar, Cfg::kSplitK - 1);  // one remote arrive per other CTA
      MbarInit(smem.recv_bar, 1);                 // this CTA's arrive + the other slices' bytes
    }
    FenceBarrierInit();
    FenceProxyAsyncShared();  // the initialized barriers, as the TMA unit (async proxy) sees them
  }
  if (threadIdx.x == 256) {
    PrefetchTensorMap(&tmap_a);
    PrefetchTensorMap(&tmap_b);
    PrefetchTensorMap(&tmap_d);
  }
  // With A multicast the peer CTA's barriers must be initialized before our copies signal them,
  // with split-K before the reduction's arrives and st.async do.
  if constexpr (Cfg::kMulticastA) {
    ClusterSync();
  } else if constexpr (Cfg::kSplitK > 1) {
    ClusterSyncRelaxed();  // fence.mbarrier_init above orders the initialization
  } else {
    __syncthreads();
  }

  if (threadIdx.x >= 256) {
    // ---- producer warpgroup: one thread of warp 8 issues every TMA load ----
    SetMaxNRegDec<40>();
    if (threadIdx.x / 32 == 8 && ElectOneSync()) {
      uint32_t s = 0, phase = 0;
      const uint64_t keep_a = Cfg::kL2Hints ? CreatePolicyEvictLast() : 0;
      const uint64_t drop_b = Cfg::kL2Hints ? CreatePolicyEvictFirst() : 0;
      for (uint32_t t = FirstTile<Cfg>(); t < num_tiles; t += TileStride<Cfg>()) {
        const TileCoord tile = CtaTile<Cfg>(t, args);
        const int32_t m0 = static_cast<int32_t>(tile.m_block * kBlockM);
        const int32_t n0 = static_cast<int32_t>(tile.n_block * kBlockN);
        const KRange kr = CtaKRange<Cfg>(args);
        // kScalesTma: the tile rows' A scales (M % 4 == 0, so a clipped last tile's count is a
        // multiple of 4 floats: 16-byte sizes, and every chunk starts 16-byte aligned).
        const uint32_t scale_a_bytes = min(args.m - static_cast<uint32_t>(m0), static_cast<uint32_t>(kBlockM)) * 4;
        const float* b_scale_row = args.b_scale + (static_cast<uint32_t>(n0) / 128) * args.b_scale_ld;
        const uint32_t stage_bytes = Cfg::kStageBytes + (Cfg::kScalesTma ? scale_a_bytes + Cfg::kScaleBStageBytes : 0);
        for (uint32_t kb = kr.begin; kb < kr.end; ++kb) {
          MbarWait(smem.empty_bar + 8 * s, phase ^ 1);  // a fresh barrier passes parity 1 at once
          MbarArriveExpectTx(smem.full_bar + 8 * s, stage_bytes);
          if constexpr (Cfg::kScalesTma) {
            // b_scale_ld is a multiple of 4, so the group kb & ~3 .. + 3 lies inside the row.
            BulkLoad1d(smem.scale_a + s * Cfg::kScaleAStageBytes, args.a_scale + size_t{kb} * args.m + m0,
                       scale_a_bytes, smem.full_bar + 8 * s);
            BulkLoad1d(smem.scale_b + s * Cfg::kScaleBStageBytes, b_scale_row + (kb & ~3u), 16, smem.full_bar + 8 * s);
          }
          const int32_t k0 = static_cast<int32_t>(kb * kBlockK);
          if constexpr (Cfg::kL2Hints) {
            TmaLoad2dHint(smem.a + s * Cfg::kStageABytes, &tmap_a, smem.full_bar + 8 * s, k0, m0, keep_a);
            TmaLoad2dHint(smem.b + s * Cfg::kStageBBytes, &tmap_b, smem.full_bar + 8 * s, k0, n0, drop_b);
          } else if constexpr (Cfg::kMulticastA) {
            // This CTA's half of the pair's A tile, into both CTAs (same offsets, each its own
            // full barrier); the full barrier expects the whole tile: the peer sends the rest.
            const uint32_t rank = blockIdx.x % 2;
            TmaLoad2dMulticast(smem.a + s * Cfg::kStageABytes + rank * (Cfg::kStageABytes / 2), &tmap_a,
                               smem.full_bar + 8 * s, k0, m0 + static_cast<int32_t>(rank * Cfg::kTmaARows), 0x3);
            TmaLoad2d(smem.b + s * Cfg::kStageBBytes, &tmap_b, smem.full_bar + 8 * s, k0, n0);
          } else {
            TmaLoad2d(smem.a + s * Cfg::kStageABytes, &tmap_a, smem.full_bar + 8 * s, k0, m0);
            TmaLoad2d(smem.b + s * Cfg::kStageBBytes, &tmap_b, smem.full_bar + 8 * s, k0, n0);
          }
          if (++s == kStages) {
            s = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    // ---- consumer warpgroups 0 and 1: rows [64·wg, 64·wg + 64) of each tile ----
    SetMaxNRegInc<232>();
    Consumer<Cfg> consumer(args, &tmap_d, smem);
    float part0[Cfg::kAccRegs];
    float part1[Cfg::kAccRegs];
    if constexpr (Cfg::kSplitK > 1) {
      RunSplitK(consumer, part0, part1);
    } else {
      RunTileByTile(consumer, part0, part1);
    }
    if (threadIdx.x % 128 == 0) BulkWaitAll();  // shared memory must outlive the last store
  }
  // A multicast: no CTA exits while its peer may still write its shared memory or arrive on its
  // barriers.
  if constexpr (Cfg::kMulticastA) ClusterSync();
}

}  // namespace fp8::kernels::cuda::blockwise_gemm
