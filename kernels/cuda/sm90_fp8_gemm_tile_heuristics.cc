// SPDX-License-Identifier: Apache-2.0
// Tile choice of the blockwise FP8 GEMM, measured on the H200 (docs/perf-history.md, "Own
// blockwise GEMM"). Every choice reads its scales through the pipeline where it can (+4-13% over
// the __ldg scales on all eight issue shapes); the launcher falls back to __ldg where it cannot.
// - Small M (fewer 128x128 tiles than SMs), first: 128x64 tiles split 2 (4 x tiles_128 CTAs)
//   where they all run at once and leave >= 16 K blocks per CTA. M = 128, (4096, 7168): 454-456
//   TFLOPS against 366-372 for 128x128 split 2 (twice the CTAs, 24 KB stages, 9 of them).
// - Then split K over the largest cluster size S whose tiles x S CTAs all run at once and that
//   leaves every CTA >= 16 K blocks. M = 128: split 2 is the fastest at (7168, 16384); with 8 K
//   blocks per CTA (7168, 2048) it lost 20% to 128x64.
// - L2 hints (keep A, drop B first) on the small-M choices: +1-3% where they apply, in two runs;
//   on 128x64 with more tiles than SMs -1% once and +1% once, so not there.
// - Many tiles (>= 4 waves of 128x128): 256x128 tiles with A multicast (below); before them 128x128 with 6 stages
//   (5 stages measured 2-10% slower at M = 4096, K = 16384 and level elsewhere).
// - Otherwise whichever of 128x128 / 128x64 fills the SMs' waves better.
#include "kernels/cuda/sm90_fp8_gemm_tile_heuristics.h"

namespace fp8::kernels::cuda {

int BlockwiseGemmSplitK(Sm90BlockwiseGemmTile tile) {
  switch (tile) {
    case Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma:
    case Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints: return 2;
    case Sm90BlockwiseGemmTile::kN128SplitK4: return 4;
    case Sm90BlockwiseGemmTile::kN128SplitK8: return 8;
    case Sm90BlockwiseGemmTile::kAuto:
    case Sm90BlockwiseGemmTile::kN128ScalesTma6Stages:
    case Sm90BlockwiseGemmTile::kN64ScalesTma:
    case Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints:
    case Sm90BlockwiseGemmTile::kM256N128MulticastA: return 1;
  }
  return 1;
}

Sm90BlockwiseGemmTile ChooseBlockwiseGemmTile(int64_t m, int64_t n, int64_t k, const BlockwiseGemmResidency& gpu) {
  const int64_t tiles_128 = (m + 127) / 128 * (n / 128), k_blocks = k / 128, sms = gpu.sms;
  if (tiles_128 < sms) {
    if (4 * tiles_128 <= gpu.n64_split2 && k_blocks >= 32) return Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma;
    const struct {
      int resident;
      Sm90BlockwiseGemmTile tile;
    } splits[] = {{gpu.n128_split8, Sm90BlockwiseGemmTile::kN128SplitK8},
                  {gpu.n128_split4, Sm90BlockwiseGemmTile::kN128SplitK4},
                  {gpu.n128_split2, Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints}};
    for (const auto& [resident, tile] : splits) {
      const int split = BlockwiseGemmSplitK(tile);
      if (tiles_128 * split <= resident && k_blocks >= 16 * split) return tile;
    }
  }
  // Many tiles: 256x128 with A multicast (half of 128x128's L2->SM bytes per FLOP). M = 4096,
  // DeepGEMM's timer, one run: 1398 / 1373 / 1270 / 1279 TFLOPS against 1277 / 1277 / 1198 / 1197
  // for 128x128 at (N, K) = (7168, 16384), (4096, 7168), (7168, 2048), (24576, 1536); our
  // bench's back-to-back timing, same run: 1243 / 1380 / 1263 / 1287 against 1230 / 1275 /
  // 1194 / 1178.
  if (tiles_128 >= 4 * sms) return Sm90BlockwiseGemmTile::kM256N128MulticastA;
  auto wave_fill = [sms](int64_t tiles) { return double(tiles) / double((tiles + sms - 1) / sms * sms); };
  if (wave_fill(2 * tiles_128) <= wave_fill(tiles_128)) return Sm90BlockwiseGemmTile::kN128ScalesTma6Stages;
  return tiles_128 < sms ? Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints : Sm90BlockwiseGemmTile::kN64ScalesTma;
}

}  // namespace fp8::kernels::cuda
