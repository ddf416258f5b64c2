// Own sm_90a FP8 GEMM with DeepSeek-V3 blockwise scales (issue #3), the alternative to
// Sm90GemmFp8BlockwiseCublasLt with the same operands and scale layouts:
//
//   D[M, N] (bf16) = Σ_kb (a_scale_inv[kb, m] · b_scale_inv[n/128, kb]) · (A_kb · B_kbᵀ)
//
// A [M, K] and B [N, K] are row-major E4M3 (both K-major, as wgmma wants FP8 operands). Each
// 128-wide K block is accumulated in FP32 on the tensor cores and then promoted into an FP32
// total with both scales applied in registers (DeepGEMM's scheme; kernels/gemm.h's CPU
// reference does the same per K block).
//   a_scale_inv: 1x128 tiles of A, M-major [K/128, M]  (Sm90ScaleLayout::kMnMajor)
//   b_scale_inv: 128x128 blocks of B, [N/128, Sm90BlockScaleLd(K)] row-major
// — exactly what Sm90Fp8Quantize1x128(kMnMajor) / Sm90Fp8Quantize128x128 write and what the
// cuBLASLt path reads, so the two GEMMs are interchangeable.
//
// Shapes: M ≥ 1 (any; the last tile is clipped), N and K multiples of 128; A, B and D 16-byte
// aligned (TMA). All pointers are device pointers; work is enqueued on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace fp8::kernels::cuda {

// Block tile of one CTA (128 rows x N columns; two consumer warpgroups of 64 rows each) and
// how its main loop overlaps work:
//   kN128: 128x128, two FP32 partial accumulators per warpgroup so the tensor cores run the
//          next K block while the previous one is promoted
//   kN128SingleAccumulator: 128x128 with one partial accumulator (wgmma and promotion
//          alternate; kept to measure what the double buffer buys)
//   kN128OverlapEpilogue: kN128, and the next tile's first K block runs on the tensor cores
//          while the finished tile is converted and stored (measured slower; kept to compare)
//   kN64, kN64OverlapEpilogue: 128x64 tiles, twice the CTAs for small M (M = 128 gives only
//          N/128 tiles of 128x128)
//   kN128PairSharedA, kN64PairSharedA: kN128 / kN64 run by CTA pairs (thread-block clusters
//          of 2) on the tiles (m, 2j) and (m, 2j + 1), each CTA loading half of their common A
//          tile with a TMA multicast into both: half the A traffic from L2. An odd number of
//          column blocks falls back to kN128 / kN64.
//   kN128SplitK2/4/8: 128x128 tiles, each computed by a thread-block cluster of 2/4/8 CTAs
//          over equal K ranges, summed through distributed shared memory in a fixed order
//          (bitwise reproducible; no workspace). One tile per cluster. Falls back to kN128 when
//          K has fewer 128-blocks than the split.
//   kN64PrefetchB, kN128SplitK2PrefetchB: kN64 / kN128SplitK2 whose producer also prefetches
//          the tile's B rows into L2, 1 KB of each row at a time, ahead of the TMA loads
//          (experiment for small M, where B streams from HBM in 128-byte pieces per row)
//   kN128ScalesTma, kN64ScalesTma, kN128SplitK2ScalesTma, kN128SplitK4ScalesTma: kN128 / kN64 /
//          kN128SplitK2 / kN128SplitK4 whose
//          producer also copies each stage's A scales (512 bytes) and B-scale group (16 bytes)
//          into shared memory on the stage's full barrier (1-D bulk copies), so the consumers'
//          K loop has no global loads; bitwise the same results. The scale copies cost one
//          stage for 128x128 (5 stages; split 2 and 4: 6). Need M % 4 == 0 and 16-byte aligned
//          scale arrays; otherwise the launcher runs the twin without "ScalesTma".
//   kN128ScalesTma6Stages: kN128ScalesTma with 6 stages, the epilogue staging one 64x64 box per
//          warpgroup at a time (16 KB instead of 32 KB of staging); bitwise the same results
//   kN128PairSharedAScalesTma, kN64PairSharedAScalesTma: the CTA pairs sharing A (TMA multicast)
//          with the scales through the pipeline (128x128: 6 stages and one staging box, as
//          kN128ScalesTma6Stages); bitwise the same as kN128PairSharedA / kN64PairSharedA
//   kN64SplitK2ScalesTma: 128x64 tiles, K split over clusters of 2 CTAs, scales through the
//          pipeline, 9 stages (twice the CTAs of kN128SplitK2ScalesTma for small M); bitwise the
//          same as kN128SplitK2 (same K ranges, same per-element order); falls back to it where
//          the scales cannot be copied
//   kN112SplitK2ScalesTma, kN56ScalesTma: 128x112 tiles split over 2 CTAs (7 stages) and 128x56
//          tiles (9 stages, persistent), scales through the pipeline, D written from registers:
//          tile counts between 128x64's and 128x128's (N = 7168: 64 / 128 tiles, i.e. 128 CTAs
//          each at M = 128). A tile may span two 128-column B-scale blocks (two B scales, each
//          column promoted with its own block's) and N need not be a multiple of the width (the
//          last tile is clipped). Bitwise the same as kN128SplitK2 / kN64; they fall back to
//          those where the scales cannot be copied
//   kN128SplitK2ScalesTmaL2Hints, kN64ScalesTmaL2Hints: kN128SplitK2ScalesTma / kN64ScalesTma
//          whose TMA loads ask L2 to keep A (evict_last) and drop B first (evict_first): at small
//          M every CTA reads A, each B tile is read once. Bitwise the same results
//   kN192ScalesTma: 128x192 tiles with one partial accumulator per warpgroup (two do not fit in
//          the registers), scales through the pipeline, 5 stages, one staging box: B is read
//          from shared memory once per 192 columns (large M). Tiles span two B-scale blocks; N
//          need not be a multiple of 192 (the TMA store clips). Bitwise the same as kN128
//   kN192PingPong: kN192ScalesTma whose two consumer warpgroups take turns issuing their K
//          block's wgmmas (named barriers), so one warpgroup's promotion and epilogue run while
//          the tensor cores work on the other's; bitwise the same as kN128
//   kN192PingPongGroup16: kN192PingPong with tiles rasterized in groups of 16 row blocks
//          instead of 8 (fewer distinct B tiles in L2 at a time)
//   kN128PingPong: 128x128 with one partial accumulator per warpgroup, the issues alternating as
//          in kN192PingPong (against kN128's two partials: which hides the promotion better);
//          6 stages, one staging box; bitwise the same as kN128
//   kN128ScalesTma6StagesGroup16: kN128ScalesTma6Stages rasterized in groups of 16 row blocks
//   kN192PingPongPassAtHalf, kN192PingPongPassAtEnd, kN128PingPongPassAtHalf: kN192PingPong /
//          kN128PingPong passing the turn once 2 of the K block's 4 wgmmas / all 4 have completed
//          instead of once they are issued (the other warpgroup's wgmmas then queue behind them
//          instead of sharing the tensor cores with them); bitwise the same as kN128
//   kN192HalfAccumulators: kN192ScalesTma with each warpgroup's partial split into two 64x96
//          halves (wgmma m64n96k32), double-buffered: one half is promoted while the other is on
//          the tensor cores (two full 192-wide partials do not fit in the registers); bitwise the
//          same as kN128
//   kN192HalfAccumulatorsGroup16: kN192HalfAccumulators rasterized in groups of 16 row blocks
//   kAuto: with fewer 128x128 tiles than SMs: kN64SplitK2ScalesTma where its 4 x tiles CTAs
//          all run at once and K has >= 32 blocks; else the largest split whose clusters all
//          run at once and leave >= 16 K blocks per CTA (split 2: kN128SplitK2ScalesTmaL2Hints);
//          else 128x64 with L2 hints (kN64ScalesTmaL2Hints) if it fills the SMs' waves better
//          than 128x128, else kN128ScalesTma6Stages. With more tiles: at least 4 waves of
//          128x128 tiles kN128ScalesTma6Stages, else whichever of it / kN64ScalesTma fills the
//          waves better. Each falls back to its __ldg twin where the scales are not 16-byte
//          aligned or M % 4 != 0 (choices measured: docs/performance.md)
enum class Sm90BlockwiseGemmTile : uint8_t {
  kAuto,
  kN128,
  kN128SingleAccumulator,
  kN128OverlapEpilogue,
  kN64,
  kN64OverlapEpilogue,
  kN128PairSharedA,
  kN64PairSharedA,
  kN128SplitK2,
  kN128SplitK4,
  kN128SplitK8,
  kN64PrefetchB,
  kN128SplitK2PrefetchB,
  kN128ScalesTma,
  kN64ScalesTma,
  kN128SplitK2ScalesTma,
  kN128SplitK4ScalesTma,
  kN128ScalesTma6Stages,
  kN128PairSharedAScalesTma,
  kN64PairSharedAScalesTma,
  kN64SplitK2ScalesTma,
  kN112SplitK2ScalesTma,
  kN56ScalesTma,
  kN128SplitK2ScalesTmaL2Hints,
  kN64ScalesTmaL2Hints,
  kN192ScalesTma,
  kN192PingPong,
  kN192PingPongGroup16,
  kN128PingPong,
  kN128ScalesTma6StagesGroup16,
  kN192PingPongPassAtHalf,
  kN192PingPongPassAtEnd,
  kN128PingPongPassAtHalf,
  kN192HalfAccumulators,
  kN192HalfAccumulatorsGroup16,
};

// Shape rules of Sm90GemmFp8Blockwise (no CUDA call; testable without a GPU). InvalidArgument
// naming the offending dimension.
Status Sm90ValidateGemmFp8BlockwiseOwnShape(int64_t m, int64_t n, int64_t k);

Status Sm90GemmFp8Blockwise(const uint8_t* a, const float* a_scale_inv, const uint8_t* b,
                            const float* b_scale_inv, int64_t m, int64_t n, int64_t k,
                            __nv_bfloat16* d, cudaStream_t stream,
                            Sm90BlockwiseGemmTile tile = Sm90BlockwiseGemmTile::kAuto);

}  // namespace fp8::kernels::cuda
