// SPDX-License-Identifier: Apache-2.0
// fp8-blockwise's cast fused into the stage that produces its input (RMSNorm in rmsnorm.cu,
// SwiGLU in swiglu.cu): the stage computes each 128x128 tile of its bf16 output in registers and
// hands it to the lean transposing cast of kernels/cuda/sm90_fp8_quantize_transpose.cuh, which
// writes the Fp8BlockOperand (train_kernels.h). Same bytes and scales as writing the bf16
// output and casting it with Sm90Fp8Quantize1x128AndTransposed128x128, without the output's
// write and read back through device memory, and one cast where q, k, v (gate, up) each cast
// the same input before.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/cuda/sm90_fp8_quantize_transpose.cuh"
#include "worker/train/cuda/train_kernels.h"

namespace fp8::train::cuda {
namespace {

// TileRows: a kernels::cuda::Sm90Bf16TileRows-like functor over the stage's output [rows, cols].
// The stages read 2× the bytes the plain cast does (two bf16 inputs, or fp32), so the cast runs
// with a 128-register cap (2 CTAs per SM) rather than the plain cast's 64.
template <typename TileRows>
Status LaunchFusedBlockCast(int64_t rows, int64_t cols, kernels::ScaleFormat sf, const Fp8BlockOperand& op,
                            unsigned int* amax_bits, const TileRows& tile_rows, cudaStream_t s) {
  namespace kc = kernels::cuda;
  if (rows < 16 || rows % 16 != 0 || cols < 16 || cols % 16 != 0)
    return InvalidArgumentError("fused blockwise cast: rows " + std::to_string(rows) + " and cols " + std::to_string(cols) +
                                " must be positive multiples of 16 (" __FILE__ ")");
  if ((rows + 127) / 128 > 65535) return InvalidArgumentError("fused blockwise cast: rows too large (" __FILE__ ")");
  if (op.q == nullptr || op.s == nullptr || op.qt == nullptr || op.st == nullptr)
    return InvalidArgumentError("fused blockwise cast: an operand pointer is null (" __FILE__ ")");
  if (reinterpret_cast<uintptr_t>(op.q) % 16 != 0 || reinterpret_cast<uintptr_t>(op.qt) % 16 != 0)
    return InvalidArgumentError("fused blockwise cast: q and qt must be 16-byte aligned (" __FILE__ ")");
  // q's scales MN-major: (r, g) at g·rows + r; Xᵀ's block (j, i) at j·ld + i.
  const kc::Sm90TransposeCastArgs a{nullptr, rows, cols, sf == kernels::ScaleFormat::kUe8m0, op.q, op.s, 1, rows,
                                    op.qt, op.st, kc::Sm90BlockScaleLd(rows), 1, amax_bits};
  FP8_RETURN_IF_CUDA_ERROR((kc::Sm90LaunchTransposeCast<kernels::Fp8Format::kE4M3, kc::Sm90TransposedTiles::k128x128, 2>(
      a, s, tile_rows)));
  return OkStatus();
}

}  // namespace
}  // namespace fp8::train::cuda
