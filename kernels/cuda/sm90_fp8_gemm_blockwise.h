// SPDX-License-Identifier: Apache-2.0
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
#include "kernels/cuda/sm90_fp8_gemm_tile_heuristics.h"

namespace fp8::kernels::cuda {


// Shape rules of Sm90GemmFp8Blockwise (no CUDA call; testable without a GPU). InvalidArgument
// naming the offending dimension.
Status Sm90ValidateGemmFp8BlockwiseOwnShape(int64_t m, int64_t n, int64_t k);

Status Sm90GemmFp8Blockwise(const uint8_t* a, const float* a_scale_inv, const uint8_t* b,
                            const float* b_scale_inv, int64_t m, int64_t n, int64_t k,
                            __nv_bfloat16* d, cudaStream_t stream,
                            Sm90BlockwiseGemmTile tile = Sm90BlockwiseGemmTile::kAuto);

}  // namespace fp8::kernels::cuda
