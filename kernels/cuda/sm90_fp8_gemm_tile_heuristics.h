// Which block tile Sm90GemmFp8Blockwise runs for a shape (kAuto): a pure function of the shape,
// the SM count and how many CTAs of each clustered kernel the GPU holds at once, so that it is
// tested without a GPU. The launcher (sm90_fp8_gemm_blockwise.cu) reads those counts off the
// device.
#pragma once

#include <cstdint>

#include "kernels/cuda/sm90_fp8_gemm_blockwise.h"

namespace fp8::kernels::cuda {

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
