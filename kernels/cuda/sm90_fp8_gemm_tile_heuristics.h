// SPDX-License-Identifier: Apache-2.0
// The block tiles of Sm90GemmFp8Blockwise and which one it runs for a shape (kAuto): a pure
// function of the shape, the SM count and how many CTAs of each clustered kernel the GPU holds at
// once. Plain C++ (no CUDA headers), so CI tests it on machines without CUDA
// (tests/kernels_cpu/gemm_tile_heuristics_test.cc). The launcher (sm90_fp8_gemm_blockwise.cu)
// reads those counts off the device.
#pragma once

#include <cstdint>

namespace fp8::kernels::cuda {

// Block tile of one CTA (128 rows x BLOCK_N columns; two consumer warpgroups of 64 rows each,
// two FP32 partial accumulators so the tensor cores run the next K block while the previous one
// is promoted). Only the tiles the heuristics below choose; the measurements behind them and the variants that lost are in docs/perf-history.md.
//   kN128ScalesTma6Stages: 128x128, 6 stages, one 64x64 epilogue staging box per warpgroup
//   kN64ScalesTma: 128x64 tiles, 8 stages (twice the CTAs of 128x128)
//   kN64ScalesTmaL2Hints: kN64ScalesTma whose TMA loads ask L2 to keep A (evict_last) and drop
//          B first (evict_first): at small M every CTA reads A, each B tile is read once
//   kN128SplitK2ScalesTmaL2Hints, kN128SplitK4, kN128SplitK8: 128x128 tiles, each computed by a
//          thread-block cluster of 2/4/8 CTAs over equal K ranges, summed through distributed
//          shared memory in a fixed order (bitwise reproducible; no workspace); split 2 with the
//          L2 hints. Fall back to kN128ScalesTma6Stages when K has fewer 128-blocks than the split
//   kN64SplitK2ScalesTma: 128x64 tiles, K split over clusters of 2 CTAs, 9 stages (twice the
//          CTAs of the 128x128 split for small M); bitwise the same as the 128x128 split 2
//   kM256N128MulticastA: 256x128 tiles, each consumer warpgroup 128 rows as two 64-row wgmma
//          waves (half the B traffic per FLOP of 128x128), in clusters of 2 CTAs on neighbouring
//          column blocks, each loading half of the shared A tile for both (TMA multicast); 3
//          stages beside the whole 64 KB output staging tile. N / 128 odd: kN128ScalesTma6Stages
// "ScalesTma": the producer copies each stage's A scales and B-scale group into shared memory on
// the stage's full barrier, so the consumers' K loop has no global loads. That needs M % 4 == 0
// and 16-byte aligned scale arrays; otherwise the same tile reads its scales with __ldg, with
// bitwise the same results.
//   kAuto: the heuristics' choice for the shape and the GPU (ChooseBlockwiseGemmTile).
enum class Sm90BlockwiseGemmTile : uint8_t {
  kAuto,
  kN128ScalesTma6Stages,
  kN64ScalesTma,
  kN64ScalesTmaL2Hints,
  kN128SplitK2ScalesTmaL2Hints,
  kN128SplitK4,
  kN128SplitK8,
  kN64SplitK2ScalesTma,
  kM256N128MulticastA,
};

// CTAs of each split-K kernel that run at once (whole clusters: cudaOccupancyMaxActiveClusters
// times the cluster size), and the SM count.
struct BlockwiseGemmResidency {
  int sms = 0;
  int n64_split2 = 0;
  int n128_split2 = 0;
  int n128_split4 = 0;
  int n128_split8 = 0;
};

// The tile for D[m, n] = A[m, k]·B[n, k]ᵀ (n, k multiples of 128). Never kAuto.
Sm90BlockwiseGemmTile ChooseBlockwiseGemmTile(int64_t m, int64_t n, int64_t k, const BlockwiseGemmResidency& gpu);

// Clusters of this many CTAs split K (1: no split).
int BlockwiseGemmSplitK(Sm90BlockwiseGemmTile tile);

}  // namespace fp8::kernels::cuda
