// SPDX-License-Identifier: Apache-2.0
// The blockwise FP8 GEMM's tile heuristics (kernels/cuda/sm90_fp8_gemm_tile_heuristics.h): a
// pure function of the shape and the GPU's residency, so it runs here without CUDA. The shapes
// are issue #3's, whose measured choices docs/perf-history.md records.
#include "kernels/cuda/sm90_fp8_gemm_tile_heuristics.h"

#include <gtest/gtest.h>

namespace fp8::kernels::cuda {
namespace {

// An H200: 132 SMs; CTAs of the split-K kernels resident at once (whole clusters).
constexpr BlockwiseGemmResidency kH200{132, 132, 132, 128, 128};

TEST(Sm90GemmBlockwiseTileHeuristics, SmallMSplitsKWhereAllClustersRunAtOnce) {
  // 32 tiles of 128x128: 128 CTAs of 128x64 split 2 all run at once, 56 K blocks.
  EXPECT_EQ(ChooseBlockwiseGemmTile(128, 4096, 7168, kH200), Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma);
  // 56 tiles: 128x64 split 2 (224 CTAs) and splits 4, 8 do not fit at once; split 2 (112) does.
  EXPECT_EQ(ChooseBlockwiseGemmTile(128, 7168, 16384, kH200), Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints);
  // Split 8 where its clusters fit and every CTA keeps >= 16 K blocks.
  EXPECT_EQ(ChooseBlockwiseGemmTile(128, 1024, 16384, {132, 0, 132, 128, 128}), Sm90BlockwiseGemmTile::kN128SplitK8);
}

TEST(Sm90GemmBlockwiseTileHeuristics, TooFewKBlocksToSplitTakeTheTileThatFillsTheWaves) {
  // 16 K blocks: no split leaves 16 per CTA; 112 tiles of 128x64 fill the SMs better than 56.
  EXPECT_EQ(ChooseBlockwiseGemmTile(128, 7168, 2048, kH200), Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints);
  EXPECT_EQ(ChooseBlockwiseGemmTile(1, 128, 128, kH200), Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints);
  // 448 tiles (between 1 and 4 waves): 896 tiles of 128x64 fill 7 waves at 97%, no L2 hints.
  EXPECT_EQ(ChooseBlockwiseGemmTile(1024, 7168, 7168, kH200), Sm90BlockwiseGemmTile::kN64ScalesTma);
}

TEST(Sm90GemmBlockwiseTileHeuristics, ManyTilesTake256x128) {
  // >= 4 waves of 128x128 tiles: 256x128 with A multicast.
  EXPECT_EQ(ChooseBlockwiseGemmTile(4096, 7168, 16384, kH200), Sm90BlockwiseGemmTile::kM256N128MulticastA);
  EXPECT_EQ(ChooseBlockwiseGemmTile(4096, 4096, 7168, kH200), Sm90BlockwiseGemmTile::kM256N128MulticastA);
  EXPECT_EQ(ChooseBlockwiseGemmTile(4096, 7168, 2048, kH200), Sm90BlockwiseGemmTile::kM256N128MulticastA);
  EXPECT_EQ(ChooseBlockwiseGemmTile(4096, 24576, 1536, kH200), Sm90BlockwiseGemmTile::kM256N128MulticastA);
  // Just under 4 waves: whichever of 128x128 / 128x64 fills the waves better.
  EXPECT_EQ(ChooseBlockwiseGemmTile(2048, 4096, 7168, kH200), Sm90BlockwiseGemmTile::kN128ScalesTma6Stages);
}

TEST(Sm90GemmBlockwiseTileHeuristics, SplitOfEachTile) {
  EXPECT_EQ(BlockwiseGemmSplitK(Sm90BlockwiseGemmTile::kN128ScalesTma6Stages), 1);
  EXPECT_EQ(BlockwiseGemmSplitK(Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints), 1);
  EXPECT_EQ(BlockwiseGemmSplitK(Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma), 2);
  EXPECT_EQ(BlockwiseGemmSplitK(Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints), 2);
  EXPECT_EQ(BlockwiseGemmSplitK(Sm90BlockwiseGemmTile::kN128SplitK4), 4);
  EXPECT_EQ(BlockwiseGemmSplitK(Sm90BlockwiseGemmTile::kN128SplitK8), 8);
}

}  // namespace
}  // namespace fp8::kernels::cuda
