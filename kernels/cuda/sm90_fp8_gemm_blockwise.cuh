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
// Split-K (kSplitK = S > 1, for small M where the tiles alone leave SMs idle): a thread-block
// cluster of S CTAs computes one tile, CTA r over the r-th of S equal K ranges. Each CTA parks
// its FP32 total in its own (now idle) stage memory, and after a cluster barrier CTA r sums
// slice r of the tile over the S CTAs' shared memory (DSMEM) in rank order 0..S-1 and writes it
// as bf16: no workspace, no atomics, and the same bits on every run.
#pragma once

#include <cuda.h>  // CUtensorMap (types only: the encoder is fetched through the runtime)
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/sm90_ptx.cuh"

namespace fp8::kernels::cuda::blockwise_gemm {

constexpr int kBlockM = 128;
constexpr int kBlockK = 128;  // = one scale block of K, and one 128-byte swizzle row of FP8
constexpr int kThreads = 384;
constexpr int kConsumerWarps = 8;
constexpr int kGroupM = 8;

// kDoubleAccumulator: two FP32 partial accumulators, so K block kb runs on the tensor cores
// while kb - 1 is promoted. kOverlapEpilogue (needs it): the next tile's first K block runs
// during the epilogue. kCluster = 2: CTA pairs (a thread-block cluster) compute the tiles
// (m, 2j) and (m, 2j + 1); each loads half of their common A tile with a TMA multicast into
// both CTAs, so A crosses L2 -> SM once per pair instead of twice.
// kSplitK = S > 1: clusters of S CTAs split each tile's K blocks (file comment); one tile per
// cluster (grid = tiles x S), so the stage memory is free for the reduction after the K loop.
// kPrefetchB: the producer also asks L2 for each of the tile's B rows kPrefetchWindow K blocks
// (1 KB of the row) at a time, a window ahead of its TMA loads (experiment: a TMA box reads
// 128 bytes of each of 128 rows K bytes apart, so HBM sees short scattered pieces; at small M,
// where B streams from HBM once, both GEMMs reached 1.2-1.5 TB/s of the ~4 a copy reaches).
// kScalesTma: the producer also copies each stage's scales into shared memory on the stage's
// full barrier (1-D bulk copies: the tile rows' 128 A scales, 512 bytes of [K/128, M], and the
// 16-byte group of the tile's B-scale row holding the K block), so the consumers read them with
// ld.shared after the barrier wait and the K loop has no global loads (with __ldg one K block
// ahead, ptxas's register rotation of the scale sets made each K block's first wgmma wait for
// an HBM round trip; docs/performance.md). Needs M % 4 == 0 and 16-byte aligned scale arrays
// (16-byte aligned bulk-copy sources); the host falls back to the __ldg variant otherwise.
// kL2Hints (small M): the TMA loads tell L2 to keep A (read by every CTA, evict_last) and to
// drop B first (each B tile is read by one CTA once, evict_first), so the streamed B does not
// push A out.
// kOneStagingBox: the epilogue stages one 64x64 bf16 box per consumer warpgroup at a time (store,
// wait until the TMA has read it, next box) instead of its whole 64 x BLOCK_N slice: for
// 128x128 tiles 16 KB of staging instead of 32 KB, which buys back the stage the scale copies
// cost (6 stages instead of 5).
// kPingPong (one partial accumulator): the two consumer warpgroups take turns issuing their
// K block's wgmmas (named barriers, CUTLASS's ordered math), so one warpgroup's wait + promotion
// (and its epilogue) runs while the tensor cores work on the other's wgmmas. Without the order
// both wait on the same full barrier, issue together, and promote together with the tensor cores
// idle (kN192ScalesTma). kPassTurnAfter_: how many of the K block's 4 wgmmas have completed when
// the turn passes: 0 = as soon as they are issued (the other warpgroup's wgmmas may then share
// the tensor cores with them, and both batches finish late together), 2 = half, 4 = all (the
// tensor cores idle while the turn is handed over). kGroupM_: row blocks per rasterization
// group (TileOf).
template <int kBlockN_, int kStages_, bool kDoubleAccumulator_, bool kOverlapEpilogue_ = false,
          int kCluster_ = 1, int kSplitK_ = 1, bool kPrefetchB_ = false, bool kScalesTma_ = false,
          bool kOneStagingBox_ = false, bool kL2Hints_ = false, bool kPingPong_ = false,
          int kGroupM_ = kGroupM, int kPassTurnAfter_ = 0, bool kHalfAccumulators_ = false>
struct Config {
  // kHalfAccumulators (128x192): each consumer warpgroup splits its 64x192 partial into two
  // 64x96 halves (4 wgmma m64n96k32 each, 48 registers each): while one half of K block kb is
  // promoted, the other half (or kb + 1's first half) is on the tensor cores. Double buffering
  // in the registers of one 192-wide partial (96 total + 2 x 48), which two full partials
  // (3 x 96) would not fit.
  static constexpr bool kHalfAccumulators = kHalfAccumulators_;
  static_assert(!kHalfAccumulators_ || (kBlockN_ == 192 && !kDoubleAccumulator_ && !kPingPong_ && kSplitK_ == 1 &&
                                        kCluster_ == 1 && kScalesTma_),
                "half accumulators: 128x192, tile by tile, scales through TMA");
  static constexpr bool kPingPong = kPingPong_;
  static constexpr int kPassTurnAfter = kPassTurnAfter_;
  static_assert(kPassTurnAfter == 0 || kPassTurnAfter == 2 || kPassTurnAfter == 4, "turn: after 0, 2 or 4 wgmmas");
  static_assert(!kPingPong_ || (!kDoubleAccumulator_ && kSplitK_ == 1 && kCluster_ == 1),
                "ping-pong: one partial accumulator, tile by tile");
  static constexpr int kRasterGroupM = kGroupM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr bool kDoubleAccumulator = kDoubleAccumulator_;
  static constexpr bool kOverlapEpilogue = kOverlapEpilogue_;
  static constexpr int kCluster = kCluster_;
  static_assert(kCluster == 1 || (kCluster == 2 && !kOverlapEpilogue), "cluster pairs run tile by tile");
  static constexpr int kSplitK = kSplitK_;
  static_assert(kSplitK == 1 || (kCluster == 1 && !kOverlapEpilogue && kDoubleAccumulator),
                "split-K runs the plain tile loop, without A-sharing pairs");
  static constexpr int kClusterDim = kCluster * kSplitK;  // CTAs per thread-block cluster
  static constexpr bool kPrefetchB = kPrefetchB_;
  static_assert(!kPrefetchB || (kCluster == 1 && !kOverlapEpilogue), "B prefetch: plain or split-K tiles");
  static constexpr bool kScalesTma = kScalesTma_;
  // With CTA pairs each CTA copies its own scales (the A scales of the pair's common rows into
  // both) on its own full barrier; only the A tile is multicast.
  static_assert(!kScalesTma || !kOverlapEpilogue, "scales through TMA: plain, pair or split-K tiles");
  static constexpr bool kOneStagingBox = kOneStagingBox_;
  static constexpr bool kL2Hints = kL2Hints_;
  static_assert(!kL2Hints || kCluster == 1, "L2 hints: no multicast pairs");
  static constexpr int kABoxRows = kBlockM / kCluster;  // rows of A one CTA loads per K block
  static_assert(kDoubleAccumulator || !kOverlapEpilogue, "the epilogue overlap needs two partial accumulators");
  static constexpr int kAccRegs = kBlockN / 2;  // 64 x BLOCK_N floats over 128 threads
  static constexpr int kStageABytes = kBlockM * kBlockK;
  static constexpr int kStageBBytes = kBlockN * kBlockK;
  static constexpr int kStageBytes = kStageABytes + kStageBBytes;
  // Per consumer warpgroup: 64 rows x BLOCK_N bf16 as BLOCK_N/64 boxes of 64x64 (128 bytes a
  // row, the widest box the 128B swizzle allows).
  static constexpr int kEpilogueBoxBytes = 64 * 64 * 2;
  // BLOCK_N not a multiple of 64 (112, 56: tile counts that fill the SMs at small M): the
  // epilogue writes D straight from registers (no TMA-store boxes). BLOCK_N that 128 does not
  // divide (112, 56, 192): a tile may span two 128-column B-scale blocks (two scales per K block; the columns of each 8-wide accumulator
  // group lie in one block, since 8 divides BLOCK_N). N need not be a multiple of BLOCK_N: the
  // last column tile's B rows past N are zero-filled by TMA and its columns past N not written.
  static constexpr bool kDirectStore = kBlockN % 64 != 0;
  static constexpr bool kTwoScaleBlocks = 128 % kBlockN != 0;
  static constexpr int kEpilogueBoxes = kDirectStore ? 0 : kBlockN / 64;
  static constexpr int kEpilogueWgBytes = kEpilogueBoxBytes * (kOneStagingBox ? 1 : kEpilogueBoxes);
  // Split-K writes D from registers (no staging tile), which leaves room for one more stage.
  static constexpr int kStagingBytes = kSplitK > 1 || kDirectStore ? 0 : 2 * kEpilogueWgBytes;
  // kScalesTma: per stage the A scales of the tile's 128 rows, then the 4 B scales (16 bytes,
  // the bulk-copy granule) whose group holds the stage's K block.
  static constexpr int kScaleAStageBytes = kBlockM * 4;
  // (Tiles spanning two B-scale blocks: the group of each block's row, 32 bytes.)
  static constexpr int kScaleBStageBytes = kTwoScaleBlocks ? 32 : 16;
  static constexpr int kScaleAOffset = kStages * kStageBytes + kStagingBytes;
  static constexpr int kScaleBOffset = kScaleAOffset + (kScalesTma ? kStages * kScaleAStageBytes : 0);
  static constexpr int kBarrierOffset = kScaleBOffset + (kScalesTma ? kStages * kScaleBStageBytes : 0);
  // +1024: the dynamic shared memory base is aligned up to the 1024-byte swizzle atom.
  static constexpr int kSmemBytes = 1024 + kBarrierOffset + 2 * kStages * 8;
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an sm_90 CTA may have");
  static_assert(kBlockN % 8 == 0 && (kBlockN <= 128 || (kBlockN == 192 && !kDoubleAccumulator)),
                "BLOCK_N: a multiple of 8 up to 128, or 192 with one partial accumulator (registers: "
                "96 partial + 96 total floats per consumer thread)");
  static_assert(kBlockN == 64 || kBlockN == 128 || (kScalesTma && kCluster == 1 && !kOverlapEpilogue && !kPrefetchB),
                "other BLOCK_N only with the scales through TMA, no pairs, no epilogue overlap");
  // Every stage's B tile starts on a 1024-byte swizzle atom.
  static_assert(kStageBBytes % 1024 == 0, "BLOCK_N must be a multiple of 8 rows");
  // Split-K: each consumer thread's FP32 total, kAccRegs / 4 float4s, parked in stage memory.
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

// D[64 x 192] (+)= A[64 x 32] · B[192 x 32]ᵀ, both K-major in 128B-swizzled shared memory.
__device__ __forceinline__ void WgmmaM64N192K32(float (&d)[96], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// D[64 x 96] (+)= A[64 x 32] · B[96 x 32]ᵀ, both K-major in 128B-swizzled shared memory.
__device__ __forceinline__ void WgmmaM64N96K32(float (&d)[48], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// D[64 x 112] (+)= A[64 x 32] · B[112 x 32]ᵀ, both K-major in 128B-swizzled shared memory.
__device__ __forceinline__ void WgmmaM64N112K32(float (&d)[56], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %58, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n112k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55}, %56, %57, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// D[64 x 56] (+)= A[64 x 32] · B[56 x 32]ᵀ, both K-major in 128B-swizzled shared memory.
__device__ __forceinline__ void WgmmaM64N56K32(float (&d)[28], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %30, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n56k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27}, %28, %29, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

template <int kN>
__device__ __forceinline__ void WgmmaM64K32(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                            bool accumulate) {
  if constexpr (kN == 128) {
    WgmmaM64N128K32(d, desc_a, desc_b, accumulate);
  } else if constexpr (kN == 192) {
    WgmmaM64N192K32(d, desc_a, desc_b, accumulate);
  } else if constexpr (kN == 96) {
    WgmmaM64N96K32(d, desc_a, desc_b, accumulate);
  } else if constexpr (kN == 112) {
    WgmmaM64N112K32(d, desc_a, desc_b, accumulate);
  } else if constexpr (kN == 56) {
    WgmmaM64N56K32(d, desc_a, desc_b, accumulate);
  } else {
    static_assert(kN == 64, "wgmma shapes: N = 192, 128, 112, 96, 64, 56");
    WgmmaM64N64K32(d, desc_a, desc_b, accumulate);
  }
}

// ---- tile scheduler --------------------------------------------------------------------------
// Tile t -> (m block, n block): groups of kGroupM row blocks, row block fastest inside a group,
// so the CTAs running at one time read few distinct A and B tiles (L2 reuse). Producer and
// consumers call it with the same t and get the same tile.
struct TileCoord {
  uint32_t m_block, n_block;
};
__device__ __forceinline__ TileCoord TileOf(uint32_t t, uint32_t num_m_blocks,
                                            uint32_t num_n_blocks, uint32_t rows_per_group = kGroupM) {
  const uint32_t per_group = rows_per_group * num_n_blocks;
  const uint32_t group = t / per_group;
  const uint32_t first_m = group * rows_per_group;
  const uint32_t group_m = min(num_m_blocks - first_m, rows_per_group);
  const uint32_t r = t - group * per_group;
  return {first_m + r % group_m, r / group_m};
}

// This CTA's tiles: t in [FirstTile, NumTiles) step TileStride indexes tiles, or with cluster
// pairs pairs of tiles (m, 2j), (m, 2j + 1), CTA rank r of the pair taking column block 2j + r.
// With split-K the S CTAs of a cluster share one tile t.
template <class Cfg>
__device__ __forceinline__ uint32_t FirstTile() { return blockIdx.x / Cfg::kClusterDim; }
template <class Cfg>
__device__ __forceinline__ uint32_t TileStride() { return gridDim.x / Cfg::kClusterDim; }
template <class Cfg>
__device__ __forceinline__ uint32_t ClusterRank() { return blockIdx.x % Cfg::kCluster; }

struct KernelArgs {
  const float* a_scale;  // [K/128, M]
  const float* b_scale;  // [N/128, b_scale_ld]
  __nv_bfloat16* d;      // [M, N]; written directly only by the split-K reduction
  const uint8_t* b;      // [N, K]; read directly only by the L2 prefetch (kPrefetchB)
  uint32_t m, n, num_m_blocks, num_n_blocks, num_k_blocks, b_scale_ld;
};

constexpr uint32_t kPrefetchWindow = 8;  // K blocks per B-row L2 prefetch (1 KB of the row)

// kPrefetchB: at the start of each window of kPrefetchWindow K blocks of [begin, end), the
// next window of the tile's B rows into L2 (at the first, this window too), one contiguous
// bulk prefetch per row.
template <class Cfg>
__device__ __forceinline__ void PrefetchBWindow(const KernelArgs& args, uint32_t n0, uint32_t kb, uint32_t begin,
                                                uint32_t end) {
  if ((kb - begin) % kPrefetchWindow != 0) return;
  const uint32_t from = kb == begin ? kb : kb + kPrefetchWindow;
  const uint32_t to = min(kb + 2 * kPrefetchWindow, end);
  if (from >= to) return;
  const size_t row_bytes = size_t{args.num_k_blocks} * 128;
  const uint8_t* p = args.b + size_t{n0} * row_bytes + size_t{from} * 128;
#pragma unroll 4
  for (int row = 0; row < Cfg::kBlockN; ++row) PrefetchL2(p + row * row_bytes, (to - from) * 128);
}

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
  return args.num_m_blocks * (args.num_n_blocks / Cfg::kCluster);
}
template <class Cfg>
__device__ __forceinline__ TileCoord CtaTile(uint32_t t, const KernelArgs& args) {
  TileCoord c = TileOf(t, args.num_m_blocks, args.num_n_blocks / Cfg::kCluster, Cfg::kRasterGroupM);
  c.n_block = c.n_block * Cfg::kCluster + ClusterRank<Cfg>();
  return c;
}

// Shared-memory addresses of the pipeline (all 1024-byte aligned except the scales (16-byte
// aligned) and the barriers).
struct SmemLayout {
  uint32_t a, b, epilogue, scale_a, scale_b, full_bar, empty_bar;
};

// One K block's scales for this thread: scale_a of its two rows and the tile's scale_b.
// b1: the scale of the second B block for tiles that span two (Config::kTwoScaleBlocks), used
// from 8-column group Consumer::split_group on; == b otherwise (dead, optimized away).
struct Scales {
  float a0, a1, b, b1;
};

// A consumer warpgroup's side of the pipeline: 64 rows of the tile, the FP32 total in
// registers, the stage ring position. Everything inlines; arrays are only indexed with
// constants, so they stay in registers.
template <class Cfg>
struct Consumer {
  static constexpr int kBlockN = Cfg::kBlockN, kStages = Cfg::kStages, kAcc = Cfg::kAccRegs;
  const KernelArgs& args;
  const CUtensorMap* tmap_d;
  SmemLayout smem;
  uint32_t warpgroup, lane, row_in_wg;
  uint32_t s = 0, phase = 0;
  uint32_t split_group = kBlockN / 8;  // kTwoScaleBlocks: first 8-column group of the 2nd B block
  float total[kAcc];

  // wgmma's accumulator layout: this thread holds rows r and r + 8 of the warpgroup's 64,
  // columns 8i + 2(lane % 4) + {0, 1} for i < BLOCK_N / 8.
  __device__ __forceinline__ Consumer(const KernelArgs& a, const CUtensorMap* d, SmemLayout l)
      : args(a), tmap_d(d), smem(l), warpgroup(threadIdx.x / 128), lane(threadIdx.x % 32),
        row_in_wg((threadIdx.x / 32) % 4 * 16 + threadIdx.x % 32 / 4) {}

  __device__ __forceinline__ void WaitFull() const { MbarWait(smem.full_bar + 8 * s, phase); }

  // kPingPong: warpgroup w issues its wgmmas once the other has issued its previous K block
  // (kPassTurnAfter = 0; or once 2 / all 4 of them have completed).
  // Named barrier kTurnBarrier + w = "warpgroup w's turn": the other warpgroup's 128 threads
  // arrive (bar.arrive), w's 128 wait (bar.sync). Warpgroup 0 takes the very first turn
  // unasked, so it waits once more at the end (FinishTurns) for the last turn warpgroup 1 passes
  // back, which leaves both barriers idle at exit. (IDs 1-3: the epilogue and split-K.)
  static constexpr uint32_t kTurnBarrier = 4;
  bool took_turn = false;
  __device__ __forceinline__ void WaitTurn() {
    if (warpgroup == 1 || took_turn) NamedBarrierSync(kTurnBarrier + warpgroup, 256);
    took_turn = true;
  }
  __device__ __forceinline__ void PassTurn() const { NamedBarrierArrive(kTurnBarrier + (1 - warpgroup), 256); }
  __device__ __forceinline__ void FinishTurns() const {
    if (warpgroup == 0 && took_turn) NamedBarrierSync(kTurnBarrier, 256);
  }
  __device__ __forceinline__ void NextStage() {
    if (++s == kStages) {
      s = 0;
      phase ^= 1;
    }
  }
  // The stage's tiles may be overwritten once every consumer warp has arrived (with cluster
  // pairs: of both CTAs, since either producer's multicast writes into both).
  __device__ __forceinline__ void Release(uint32_t stage) const {
    if (lane != 0) return;
    if constexpr (Cfg::kCluster == 1) {
      MbarArrive(smem.empty_bar + 8 * stage);
    } else {
#pragma unroll
      for (uint32_t cta = 0; cta < Cfg::kCluster; ++cta) MbarArriveCluster(smem.empty_bar + 8 * stage, cta);
    }
  }

  // The tile's B-scale block rows (the same row twice unless the tile spans two blocks; the
  // second clamped to the last block for a last tile reaching past N).
  __device__ __forceinline__ uint32_t FirstScaleRow(TileCoord tile) const { return tile.n_block * kBlockN / 128; }
  __device__ __forceinline__ uint32_t LastScaleRow(TileCoord tile) const {
    return min((tile.n_block * kBlockN + kBlockN - 1) / 128, args.n / 128 - 1);
  }
  __device__ __forceinline__ void BeginTile(TileCoord tile) {
    if constexpr (Cfg::kTwoScaleBlocks) split_group = (128 - tile.n_block * kBlockN % 128) / 8;
  }

  __device__ __forceinline__ Scales LoadScales(TileCoord tile, uint32_t kb) const {
    const uint32_t r0 = tile.m_block * kBlockM + warpgroup * 64 + row_in_wg, r1 = r0 + 8;
    const float* a_scale_kb = args.a_scale + static_cast<size_t>(kb) * args.m;
    const float* b_scale_row = args.b_scale + FirstScaleRow(tile) * args.b_scale_ld;
    const float b = __ldg(b_scale_row + kb);
    return Scales{r0 < args.m ? __ldg(a_scale_kb + r0) : 0.0f, r1 < args.m ? __ldg(a_scale_kb + r1) : 0.0f, b,
                  Cfg::kTwoScaleBlocks ? __ldg(args.b_scale + LastScaleRow(tile) * args.b_scale_ld + kb) : b};
  }

  // kScalesTma: K block kb's scales from the current stage's copies (call after WaitFull). The
  // same floats as LoadScales (rows past M: 0, as there), so the promotion is bitwise the same.
  // ld.shared with a memory clobber: stays after the barrier wait. Rows past M read a slot the
  // copy did not fill (inside the array) and select 0: no branch in the K loop.
  __device__ __forceinline__ Scales StageScales(TileCoord tile, uint32_t kb) const {
    const uint32_t row = warpgroup * 64 + row_in_wg, r0 = tile.m_block * kBlockM + row;
    const uint32_t sa = smem.scale_a + s * Cfg::kScaleAStageBytes + row * 4;
    const float a0 = LdSharedF32(sa), a1 = LdSharedF32(sa + 8 * 4);
    const uint32_t sb = smem.scale_b + s * Cfg::kScaleBStageBytes + (kb % 4) * 4;
    const float b = LdSharedF32(sb);
    return Scales{r0 < args.m ? a0 : 0.0f, r0 + 8 < args.m ? a1 : 0.0f, b,
                  Cfg::kTwoScaleBlocks ? LdSharedF32(sb + 16) : b};
  }

  // part = this stage's A rows · B tile, 4 wgmma of K = 32 (the first overwrites part).
  // kFirstGroup in 1..3: the first kFirstGroup wgmmas are committed as a group of their own, so
  // WgmmaWait<1> waits for them alone (kPassTurnAfter = 2).
  template <int kFirstGroup = 0>
  __device__ __forceinline__ void Issue(float (&part)[kAcc]) const {
    const uint64_t desc_a = MakeSmemDescSw128(smem.a + s * Cfg::kStageABytes + warpgroup * 64 * kBlockK);
    const uint64_t desc_b = MakeSmemDescSw128(smem.b + s * Cfg::kStageBBytes);
    FenceOperands(part);
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kBlockK / 32; ++k) {
      WgmmaM64K32<kBlockN>(part, desc_a + 2 * k, desc_b + 2 * k, k > 0);
      if (k + 1 == kFirstGroup) WgmmaCommit();
    }
    WgmmaCommit();
    FenceOperands(part);
  }

  // kHalfAccumulators: columns [96·kHalf, 96·kHalf + 96) of this stage's B tile into part (4
  // wgmma m64n96k32; B rows 96.. start 12 swizzle atoms into the tile).
  template <int kHalf>
  __device__ __forceinline__ void IssueHalf(float (&part)[kAcc / 2]) const {
    const uint64_t desc_a = MakeSmemDescSw128(smem.a + s * Cfg::kStageABytes + warpgroup * 64 * kBlockK);
    const uint64_t desc_b = MakeSmemDescSw128(smem.b + s * Cfg::kStageBBytes + kHalf * (kBlockN / 2) * kBlockK);
    FenceOperands(part);
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kBlockK / 32; ++k) WgmmaM64K32<kBlockN / 2>(part, desc_a + 2 * k, desc_b + 2 * k, k > 0);
    WgmmaCommit();
    FenceOperands(part);
  }
  // Promote for one half: the half's 8-column groups are the tile's groups 12·kHalf.., its
  // registers total[48·kHalf ..] (wgmma's layout puts group i in registers 4i..4i+3 for any N),
  // so each element gets the same fmaf as from Promote.
  template <int kHalf>
  __device__ __forceinline__ void PromoteHalf(float (&part)[kAcc / 2], const Scales& sc) {
    FenceOperands(part);
    const float s0 = sc.a0 * sc.b, s1 = sc.a1 * sc.b;
    const float t0 = Cfg::kTwoScaleBlocks ? sc.a0 * sc.b1 : s0, t1 = Cfg::kTwoScaleBlocks ? sc.a1 * sc.b1 : s1;
#pragma unroll
    for (int i = 0; i < kAcc / 2; i += 4) {
      const int j = kHalf * (kAcc / 2) + i;
      const bool second = Cfg::kTwoScaleBlocks && static_cast<uint32_t>(j / 4) >= split_group;
      const float u0 = second ? t0 : s0, u1 = second ? t1 : s1;
      total[j] = fmaf(u0, part[i], total[j]);
      total[j + 1] = fmaf(u0, part[i + 1], total[j + 1]);
      total[j + 2] = fmaf(u1, part[i + 2], total[j + 2]);
      total[j + 3] = fmaf(u1, part[i + 3], total[j + 3]);
    }
  }

  // total += (scale_a[row] · scale_b) · part. The scales are multiplied here, after the
  // wgmma.wait, and were loaded a K block earlier: a multiply right after the loads made the
  // warp wait out their latency between two wgmma issues (seen in the SASS: ptxas sinks the
  // loads past the barrier wait, next to the wgmma).
  __device__ __forceinline__ void Promote(float (&part)[kAcc], const Scales& sc) {
    FenceOperands(part);
    const float s0 = sc.a0 * sc.b, s1 = sc.a1 * sc.b;
    // Tiles spanning two B blocks: the same products with the second block's scale from
    // split_group on (each column promoted exactly as by a tile inside its block).
    const float t0 = Cfg::kTwoScaleBlocks ? sc.a0 * sc.b1 : s0, t1 = Cfg::kTwoScaleBlocks ? sc.a1 * sc.b1 : s1;
#pragma unroll
    for (int i = 0; i < kAcc; i += 4) {
      const bool second = Cfg::kTwoScaleBlocks && static_cast<uint32_t>(i / 4) >= split_group;
      const float u0 = second ? t0 : s0, u1 = second ? t1 : s1;
      total[i] = fmaf(u0, part[i], total[i]);
      total[i + 1] = fmaf(u0, part[i + 1], total[i + 1]);
      total[i + 2] = fmaf(u1, part[i + 2], total[i + 2]);
      total[i + 3] = fmaf(u1, part[i + 3], total[i + 3]);
    }
  }

  __device__ __forceinline__ void ZeroTotal() {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) total[i] = 0.0f;
  }

  // bf16 into the 128B-swizzled staging tile, then one TMA store per 64-column box
  // (kOneStagingBox: box by box through one staging box, each store read out before the next
  // box is written).
  __device__ __forceinline__ void Epilogue(TileCoord tile) {
    if constexpr (Cfg::kDirectStore) {
      StoreDirect(tile);
      return;
    }
    constexpr int kPasses = Cfg::kOneStagingBox ? Cfg::kEpilogueBoxes : 1;
    constexpr int kBoxesPerPass = Cfg::kEpilogueBoxes / kPasses;
    const uint32_t staging = smem.epilogue + warpgroup * Cfg::kEpilogueWgBytes;
    const bool leader = threadIdx.x % 128 == 0;
    const uint32_t out_row = tile.m_block * kBlockM + warpgroup * 64;
    // 16-byte chunk c of row r sits at chunk c ^ (r % 8): the 8 rows a warp writes per
    // instruction land in 8 different chunks, so the stores are free of bank conflicts.
    const uint32_t swz = lane / 4;  // == row_in_wg % 8 == (row_in_wg + 8) % 8
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      if (leader) BulkWaitRead();  // the previous store has read the staging memory
      NamedBarrierSync(1 + warpgroup, 128);
#pragma unroll
      for (int j = 0; j < kBoxesPerPass * 8; ++j) {
        const int i = pass * kBoxesPerPass * 8 + j;  // 8-column group of the tile
        const uint32_t box = staging + (j / 8) * Cfg::kEpilogueBoxBytes;
        const uint32_t col = ((j % 8) ^ swz) * 16 + 4 * (lane % 4);
        const __nv_bfloat162 lo = __floats2bfloat162_rn(total[4 * i], total[4 * i + 1]);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(total[4 * i + 2], total[4 * i + 3]);
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(box + row_in_wg * 128 + col),
                     "r"(*reinterpret_cast<const uint32_t*>(&lo))
                     : "memory");
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(box + (row_in_wg + 8) * 128 + col),
                     "r"(*reinterpret_cast<const uint32_t*>(&hi))
                     : "memory");
      }
      FenceProxyAsyncShared();
      NamedBarrierSync(1 + warpgroup, 128);
      if (leader && out_row < args.m) {  // rows past M: the TMA store clips partial boxes
#pragma unroll
        for (int b = 0; b < kBoxesPerPass; ++b) {
          TmaStore2d(tmap_d, staging + b * Cfg::kEpilogueBoxBytes,
                     static_cast<int32_t>(tile.n_block * kBlockN + (pass * kBoxesPerPass + b) * 64),
                     static_cast<int32_t>(out_row));
        }
        BulkCommit();
      }
    }
  }

  // kDirectStore: bf16 pairs straight from registers (rows past M, columns past N skipped).
  __device__ __forceinline__ void StoreDirect(TileCoord tile) const {
    const uint32_t r0 = tile.m_block * kBlockM + warpgroup * 64 + row_in_wg, r1 = r0 + 8;
#pragma unroll
    for (int g = 0; g < kBlockN / 8; ++g) {
      const uint32_t col = tile.n_block * kBlockN + 8 * g + 2 * (lane % 4);
      if (col >= args.n) continue;
      if (r0 < args.m) {
        *reinterpret_cast<__nv_bfloat162*>(args.d + static_cast<size_t>(r0) * args.n + col) =
            __floats2bfloat162_rn(total[4 * g], total[4 * g + 1]);
      }
      if (r1 < args.m) {
        *reinterpret_cast<__nv_bfloat162*>(args.d + static_cast<size_t>(r1) * args.n + col) =
            __floats2bfloat162_rn(total[4 * g + 2], total[4 * g + 3]);
      }
    }
  }

  // Split-K, step 1: this CTA's FP32 total into its own stage memory, float4 j of thread i at
  // (j * 256 + i) * 16 (consecutive threads, consecutive 16 bytes: no bank conflicts). The stage
  // ring is idle once both warpgroups' last wgmma has completed (the CTA's only tile).
  __device__ __forceinline__ void StorePartial() {
    NamedBarrierSync(3, kConsumerWarps * 32);
    const uint32_t i = threadIdx.x;
#pragma unroll
    for (int j = 0; j < Cfg::kReduceVecs; ++j) {
      StSharedV4(smem.a + (j * kConsumerWarps * 32 + i) * 16, total[4 * j], total[4 * j + 1], total[4 * j + 2],
                 total[4 * j + 3]);
    }
  }

  // Split-K, step 2 (after a cluster barrier): the rank-th slice of the float4s, summed over the
  // cluster's CTAs in rank order (fixed, so the result is bitwise reproducible), written as bf16.
  // Every CTA holds the same fragment layout, so float4 j of thread i is total[4j .. 4j + 3] of
  // this thread's rows and columns.
  __device__ __forceinline__ void ReduceAndStore(TileCoord tile) const {
    constexpr int kSlice = Cfg::kReduceVecs / Cfg::kSplitK;
    const uint32_t rank = blockIdx.x % Cfg::kSplitK, i = threadIdx.x;
    const uint32_t r0 = tile.m_block * kBlockM + warpgroup * 64 + row_in_wg, r1 = r0 + 8;
    float4 sum[kSlice];
#pragma unroll
    for (int q = 0; q < kSlice; ++q) {
      const uint32_t addr = smem.a + ((rank * kSlice + q) * kConsumerWarps * 32 + i) * 16;
      sum[q] = LdSharedCluster(addr, 0);
#pragma unroll
      for (int cta = 1; cta < Cfg::kSplitK; ++cta) {
        const float4 v = LdSharedCluster(addr, cta);
        sum[q].x += v.x;
        sum[q].y += v.y;
        sum[q].z += v.z;
        sum[q].w += v.w;
      }
    }
#pragma unroll
    for (int q = 0; q < kSlice; ++q) {
      const uint32_t col = tile.n_block * kBlockN + 8 * (rank * kSlice + q) + 2 * (lane % 4);
      if (col >= args.n) continue;  // the last column tile of a BLOCK_N that does not divide N
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
  c.BeginTile(tile);
  uint32_t kb = kr.begin;
  // Scales are loaded one K block ahead of their wgmma (kScalesTma: they come with the stage).
  Scales ahead{};
  if constexpr (!Cfg::kScalesTma) ahead = c.LoadScales(tile, kb);
  auto fetch = [&] {  // waits for K block kb's tiles; returns its scales
    if constexpr (Cfg::kScalesTma) {
      c.WaitFull();
      return c.StageScales(tile, kb);
    } else {
      const Scales cur = ahead;
      ahead = c.LoadScales(tile, min(kb + 1, end - 1));
      c.WaitFull();
      return cur;
    }
  };
  auto advance = [&] {
    ++kb;
    c.NextStage();
  };
  if constexpr (Cfg::kDoubleAccumulator) {
    // K block kb runs on the tensor cores while kb - 1 is promoted. Straight-line code with
    // the two partial buffers named statically (ptxas serializes wgmma when it cannot tell
    // which accumulators are in flight).
    Scales pending = fetch();
    uint32_t pending_stage = c.s;
    auto step = [&](float(&issue_into)[Cfg::kAccRegs], float(&promote_from)[Cfg::kAccRegs]) {
      const Scales cur = fetch();
      const uint32_t cur_stage = c.s;
      c.Issue(issue_into);
      WgmmaWait<1>();
      c.Release(pending_stage);
      c.Promote(promote_from, pending);
      pending = cur;
      pending_stage = cur_stage;
      advance();
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
  } else if constexpr (Cfg::kHalfAccumulators) {
    // Two 96-column halves in flight in turn: half 0 of kb + 1 is issued before half 1 of kb is
    // promoted, half 1 of kb + 1 before half 0 of kb + 1 is promoted.
    // Measured slower than intended (docs/performance.md, session 5): where the if/else below
    // merges, ptxas put a `WARPGROUP.DEPBAR.LE gsb0, 0x0` into the shared promotion of half 1,
    // so each K block waits for the half 0 it has just issued. To try next: peel the last K block
    // out of the loop so that no branch with different wait counts merges inside it.
    float half0[Cfg::kAccRegs / 2];
    float half1[Cfg::kAccRegs / 2];
    Scales cur = fetch();
    uint32_t cur_stage = c.s;
    c.template IssueHalf<0>(half0);
    c.template IssueHalf<1>(half1);
    advance();
    for (;;) {
      WgmmaWait<1>();  // half 0 of the current block
      c.template PromoteHalf<0>(half0, cur);
      const bool more = kb < end;
      const uint32_t next_stage = c.s;
      Scales next = cur;
      if (more) {
        next = fetch();
        c.template IssueHalf<0>(half0);
        WgmmaWait<1>();  // half 1 of the current block
      } else {
        WgmmaWait<0>();
      }
      c.Release(cur_stage);
      c.template PromoteHalf<1>(half1, cur);
      if (!more) break;
      c.template IssueHalf<1>(half1);
      advance();
      cur = next;
      cur_stage = next_stage;
    }
  } else if constexpr (Cfg::kPingPong) {
    // One partial accumulator, the warpgroups' issues alternating (Config::kPingPong): while
    // this warpgroup waits for its wgmmas and promotes, the other's are on the tensor cores.
    while (kb < end) {
      const Scales cur = fetch();
      c.WaitTurn();
      if constexpr (Cfg::kPassTurnAfter == 0) {
        c.Issue(part0);
        c.PassTurn();
        WgmmaWait<0>();
      } else if constexpr (Cfg::kPassTurnAfter == 2) {
        c.template Issue<2>(part0);
        WgmmaWait<1>();
        c.PassTurn();
        WgmmaWait<0>();
      } else {
        c.Issue(part0);
        WgmmaWait<0>();
        c.PassTurn();
      }
      c.Release(c.s);
      c.Promote(part0, cur);
      advance();
    }
  } else {
    while (kb < end) {
      const Scales cur = fetch();
      c.Issue(part0);
      WgmmaWait<0>();
      c.Release(c.s);
      c.Promote(part0, cur);
      advance();
    }
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
    TileMainLoop(c, tile, KRange{0, args.num_k_blocks}, part0, part1);
    c.Epilogue(tile);
  }
  if constexpr (Cfg::kPingPong) c.FinishTurns();
}

// Split-K: this CTA's K range of the cluster's one tile, then the reduction over the cluster.
// The two cluster barriers are matched by the producer warpgroup (SplitKProducerSync).
template <class Cfg>
__device__ __forceinline__ void RunSplitK(Consumer<Cfg>& c, float (&part0)[Cfg::kAccRegs],
                                          float (&part1)[Cfg::kAccRegs]) {
  const TileCoord tile = CtaTile<Cfg>(FirstTile<Cfg>(), c.args);
  TileMainLoop(c, tile, CtaKRange<Cfg>(c.args), part0, part1);
  c.StorePartial();
  ClusterSync();  // every CTA's partial is in its shared memory
  c.ReduceAndStore(tile);
  ClusterSync();  // no CTA exits (its shared memory gone) while a peer still reads it
}
__device__ __forceinline__ void SplitKProducerSync() {
  __syncwarp();
  ClusterSync();
  ClusterSync();
}

// One flat stream of K blocks over all of this CTA's tiles: the first K block of the next
// tile is already on the tensor cores while the previous tile is promoted and stored.
template <class Cfg>
__device__ __forceinline__ void RunOverlappingEpilogue(Consumer<Cfg>& c, float (&part0)[Cfg::kAccRegs],
                                                       float (&part1)[Cfg::kAccRegs]) {
  const KernelArgs& args = c.args;
  const uint32_t num_tiles = args.num_m_blocks * args.num_n_blocks, nk = args.num_k_blocks;
  uint32_t t = blockIdx.x, kb = 0;
  if (t >= num_tiles) return;
  TileCoord tile = TileOf(t, args.num_m_blocks, args.num_n_blocks);
  c.ZeroTotal();
  Scales ahead = c.LoadScales(tile, 0);
  auto fetch = [&] {  // waits for (tile, kb)'s tiles; returns its scales, loads the next block's
    const Scales cur = ahead;
    if (kb + 1 < nk) {
      ahead = c.LoadScales(tile, kb + 1);
    } else if (t + gridDim.x < num_tiles) {
      ahead = c.LoadScales(TileOf(t + gridDim.x, args.num_m_blocks, args.num_n_blocks), 0);
    }
    c.WaitFull();
    return cur;
  };
  auto advance = [&] {
    c.NextStage();
    if (++kb == nk) {
      kb = 0;
      t += gridDim.x;
      if (t < num_tiles) tile = TileOf(t, args.num_m_blocks, args.num_n_blocks);
    }
  };
  // The block in flight whose promotion is pending, and whether it ends its tile.
  Scales pending = fetch();
  uint32_t pending_stage = c.s;
  bool pending_ends_tile = kb + 1 == nk;
  TileCoord pending_tile = tile;
  auto step = [&](float(&issue_into)[Cfg::kAccRegs], float(&promote_from)[Cfg::kAccRegs]) {
    const Scales cur = fetch();
    const uint32_t cur_stage = c.s;
    const bool cur_ends_tile = kb + 1 == nk;
    const TileCoord cur_tile = tile;
    c.Issue(issue_into);
    WgmmaWait<1>();
    c.Release(pending_stage);
    c.Promote(promote_from, pending);
    if (pending_ends_tile) {
      c.Epilogue(pending_tile);
      c.ZeroTotal();
    }
    pending = cur;
    pending_stage = cur_stage;
    pending_ends_tile = cur_ends_tile;
    pending_tile = cur_tile;
    advance();
  };
  auto drain = [&](float(&promote_from)[Cfg::kAccRegs]) {
    WgmmaWait<0>();
    c.Release(pending_stage);
    c.Promote(promote_from, pending);
    c.Epilogue(pending_tile);
  };
  c.Issue(part0);
  advance();
  for (;;) {
    if (t >= num_tiles) {
      drain(part0);
      break;
    }
    step(part1, part0);
    if (t >= num_tiles) {
      drain(part1);
      break;
    }
    step(part0, part1);
  }
}

// ---- the kernel ------------------------------------------------------------------------------
template <class Cfg>
__global__ void __launch_bounds__(kThreads, 1)
    Sm90Fp8BlockwiseGemmKernel(const __grid_constant__ CUtensorMap tmap_a,
                               const __grid_constant__ CUtensorMap tmap_b,
                               const __grid_constant__ CUtensorMap tmap_d, const KernelArgs args) {
  constexpr int kBlockN = Cfg::kBlockN, kStages = Cfg::kStages;
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
  const uint32_t num_tiles = NumTiles<Cfg>(args);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarInit(smem.full_bar + 8 * s, 1);  // the producer's arrive + the TMA bytes
      // one arrive per consumer warp (of each CTA of the cluster)
      MbarInit(smem.empty_bar + 8 * s, kConsumerWarps * Cfg::kCluster);
    }
    FenceBarrierInit();
    FenceProxyAsyncShared();  // the initialized barriers, as the TMA unit (async proxy) sees them
  }
  if (threadIdx.x == 256) {
    PrefetchTensorMap(&tmap_a);
    PrefetchTensorMap(&tmap_b);
    PrefetchTensorMap(&tmap_d);
  }
  // With cluster pairs, the peer's barriers must be initialized before this CTA's multicast
  // or remote arrive reaches them.
  if constexpr (Cfg::kCluster == 1) {
    __syncthreads();
  } else {
    ClusterSync();
  }

  if (threadIdx.x >= 256) {
    // ---- producer warpgroup: one thread issues every TMA load ----
    SetMaxNRegDec<40>();
    if (threadIdx.x == 256) {
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
        // kTwoScaleBlocks: the row of the block holding the tile's last column (clamped to the
        // last block; the same row when the tile lies inside one block).
        const float* b_scale_row2 =
            args.b_scale + min((static_cast<uint32_t>(n0) + kBlockN - 1) / 128, args.n / 128 - 1) * args.b_scale_ld;
        const uint32_t stage_bytes = Cfg::kStageBytes + (Cfg::kScalesTma ? scale_a_bytes + Cfg::kScaleBStageBytes : 0);
        for (uint32_t kb = kr.begin; kb < kr.end; ++kb) {
          if constexpr (Cfg::kPrefetchB) PrefetchBWindow<Cfg>(args, static_cast<uint32_t>(n0), kb, kr.begin, kr.end);
          MbarWait(smem.empty_bar + 8 * s, phase ^ 1);  // a fresh barrier passes parity 1 at once
          MbarArriveExpectTx(smem.full_bar + 8 * s, stage_bytes);
          if constexpr (Cfg::kScalesTma) {
            // b_scale_ld is a multiple of 4, so the group kb & ~3 .. + 3 lies inside the row.
            BulkLoad1d(smem.scale_a + s * Cfg::kScaleAStageBytes, args.a_scale + size_t{kb} * args.m + m0,
                       scale_a_bytes, smem.full_bar + 8 * s);
            BulkLoad1d(smem.scale_b + s * Cfg::kScaleBStageBytes, b_scale_row + (kb & ~3u), 16, smem.full_bar + 8 * s);
            if constexpr (Cfg::kTwoScaleBlocks) {
              BulkLoad1d(smem.scale_b + s * Cfg::kScaleBStageBytes + 16, b_scale_row2 + (kb & ~3u), 16,
                         smem.full_bar + 8 * s);
            }
          }
          const int32_t k0 = static_cast<int32_t>(kb * kBlockK);
          if constexpr (Cfg::kL2Hints) {
            TmaLoad2dHint(smem.a + s * Cfg::kStageABytes, &tmap_a, smem.full_bar + 8 * s, k0, m0, keep_a);
          } else if constexpr (Cfg::kCluster == 1) {
            TmaLoad2d(smem.a + s * Cfg::kStageABytes, &tmap_a, smem.full_bar + 8 * s, k0, m0);
          } else {  // this CTA's rows of the pair's A tile, into both CTAs (A's full bytes arrive)
            const uint32_t rank = ClusterRank<Cfg>();
            TmaLoad2dMulticast(smem.a + s * Cfg::kStageABytes + rank * Cfg::kABoxRows * kBlockK, &tmap_a,
                               smem.full_bar + 8 * s, k0, m0 + static_cast<int32_t>(rank * Cfg::kABoxRows),
                               static_cast<uint16_t>((1u << Cfg::kCluster) - 1));
          }
          if constexpr (Cfg::kL2Hints) {
            TmaLoad2dHint(smem.b + s * Cfg::kStageBBytes, &tmap_b, smem.full_bar + 8 * s, k0, n0, drop_b);
          } else {
            TmaLoad2d(smem.b + s * Cfg::kStageBBytes, &tmap_b, smem.full_bar + 8 * s, k0, n0);
          }
          if (++s == kStages) {
            s = 0;
            phase ^= 1;
          }
        }
      }
    }
    if constexpr (Cfg::kSplitK > 1) SplitKProducerSync();
  } else {
    // ---- consumer warpgroups 0 and 1: rows [64·wg, 64·wg + 64) of each tile ----
    SetMaxNRegInc<232>();
    Consumer<Cfg> consumer(args, &tmap_d, smem);
    float part0[Cfg::kAccRegs];
    float part1[Cfg::kAccRegs];
    if constexpr (Cfg::kOverlapEpilogue) {
      RunOverlappingEpilogue(consumer, part0, part1);
    } else if constexpr (Cfg::kSplitK > 1) {
      RunSplitK(consumer, part0, part1);
    } else {
      RunTileByTile(consumer, part0, part1);
    }
    if (threadIdx.x % 128 == 0) BulkWaitAll();  // shared memory must outlive the last store
  }
  // The peer may still arrive on this CTA's barriers: neither leaves before both are done.
  if constexpr (Cfg::kCluster > 1) {
    __syncwarp();
    ClusterSync();
  }
}

}  // namespace fp8::kernels::cuda::blockwise_gemm
