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

// Block tile of one CTA (128 rows x BLOCK_N columns; two consumer warpgroups of 64 rows each,
// two FP32 partial accumulators so the tensor cores run the next K block while the previous one
// is promoted). Only the tiles the launcher's heuristics choose (sm90_fp8_gemm_tile_heuristics.h);
// the measurements behind them and the variants that lost are in docs/perf-history.md.
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
};

// Shape rules of Sm90GemmFp8Blockwise (no CUDA call; testable without a GPU). InvalidArgument
// naming the offending dimension.
Status Sm90ValidateGemmFp8BlockwiseOwnShape(int64_t m, int64_t n, int64_t k);

Status Sm90GemmFp8Blockwise(const uint8_t* a, const float* a_scale_inv, const uint8_t* b,
                            const float* b_scale_inv, int64_t m, int64_t n, int64_t k,
                            __nv_bfloat16* d, cudaStream_t stream,
                            Sm90BlockwiseGemmTile tile = Sm90BlockwiseGemmTile::kAuto);

}  // namespace fp8::kernels::cuda
