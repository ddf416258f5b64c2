// SPDX-License-Identifier: Apache-2.0
// Launchers of the 1x128 and 128x128 quantization kernels (sm90_fp8_quantize.cuh).
#include "kernels/cuda/sm90_fp8_quantize.h"

#include <string>
#include <type_traits>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_quantize.cuh"
#include "kernels/cuda/sm90_fp8_quantize_transpose.cuh"

namespace fp8::kernels::cuda {

Status Sm90ValidateQuantShape(int64_t rows, int64_t cols, const void* in, const void* out,
                              const void* scale_inv) {
  if (rows < 1) return InvalidArgumentError("rows must be ≥ 1, got " + std::to_string(rows));
  if (cols < 1 || cols % 16 != 0)
    return InvalidArgumentError("cols must be a positive multiple of 16 (16-byte rows), got " +
                                std::to_string(cols));
  // Group/tile indices are 32-bit inside the kernels.
  if (rows >= (int64_t{1} << 31) || rows * ((cols + 127) / 128) >= (int64_t{1} << 31))
    return InvalidArgumentError("tensor too large: rows=" + std::to_string(rows) +
                                " cols=" + std::to_string(cols));
  if (in == nullptr) return InvalidArgumentError("input pointer is null");
  if (out == nullptr) return InvalidArgumentError("output pointer is null");
  if (scale_inv == nullptr) return InvalidArgumentError("scale_inv pointer is null");
  if (reinterpret_cast<uintptr_t>(in) % 16 != 0)
    return InvalidArgumentError("input pointer must be 16-byte aligned");
  if (reinterpret_cast<uintptr_t>(out) % 16 != 0)
    return InvalidArgumentError("output pointer must be 16-byte aligned");
  return OkStatus();
}

namespace {

// Per input type: vectors per thread and groups per thread, chosen on an H200 by
// bench_kernels_cuda's variant rows (docs/performance.md, "GPU: kernels and trainer").
template <typename T>
struct Config1x128;
template <>
struct Config1x128<__nv_bfloat16> {
  static constexpr int kVecs = 2, kUnroll = 2, kMinBlocks = 1;
  // Rows x group columns per CTA of the 2-D tile kernel.
  static constexpr int kTileRows = 8, kTileCols = 8;
};
template <>
struct Config1x128<float> {
  static constexpr int kVecs = 4, kUnroll = 2, kMinBlocks = 1;
  static constexpr int kTileRows = 8, kTileCols = 8;
};

template <typename T, Fp8Format F>
Status Launch1x128(const T* x, int64_t rows, int64_t cols, bool ue8m0, Sm90ScaleLayout layout,
                   uint8_t* q, float* scale_inv, cudaStream_t stream) {
  using Cfg = Config1x128<T>;
  constexpr int kTeamsPerBlock = Team1x128<T, Cfg::kVecs>::kPerBlock;
  const uint32_t groups_per_row = static_cast<uint32_t>((cols + 127) / 128);
  const uint32_t num_groups = static_cast<uint32_t>(rows) * groups_per_row;
  const uint32_t groups_per_block = kTeamsPerBlock * Cfg::kUnroll;
  const uint32_t blocks = (num_groups + groups_per_block - 1) / groups_per_block;
  // 2-D tiles (sm90_fp8_quantize.cuh); the memory-order kernel only where the row tiles
  // exceed the grid's y limit.
  const int64_t row_tiles = (rows + Cfg::kTileRows - 1) / Cfg::kTileRows;
  if (row_tiles <= 65535) {
    const dim3 grid((groups_per_row + Cfg::kTileCols - 1) / Cfg::kTileCols, static_cast<unsigned>(row_tiles));
    Sm90Fp8Quantize1x128TileKernel<T, F, Cfg::kVecs, Cfg::kTileRows, Cfg::kTileCols><<<grid, kSm90QuantThreads, 0, stream>>>(
        x, rows, cols, groups_per_row, layout == Sm90ScaleLayout::kMnMajor, ue8m0, q, scale_inv);
    FP8_RETURN_IF_LAUNCH_FAILED();
    return OkStatus();
  }
  // Memory order for both layouts (see the kernel's comment).
  Sm90Fp8Quantize1x128Kernel<T, F, Cfg::kVecs, Cfg::kUnroll, Cfg::kMinBlocks>
      <<<blocks, kSm90QuantThreads, 0, stream>>>(x, rows, cols, groups_per_row, num_groups,
                                                 FastDiv(groups_per_row), /*mn_order=*/false,
                                                 layout == Sm90ScaleLayout::kMnMajor, ue8m0, q,
                                                 scale_inv);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

template <typename T>
Status Quantize1x128(const T* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                     Sm90ScaleLayout layout, uint8_t* q, float* scale_inv, cudaStream_t stream) {
  FP8_RETURN_IF_ERROR(Sm90ValidateQuantShape(rows, cols, x, q, scale_inv));
  const bool ue8m0 = sf == ScaleFormat::kUe8m0;
  return fmt == Fp8Format::kE4M3
             ? Launch1x128<T, Fp8Format::kE4M3>(x, rows, cols, ue8m0, layout, q, scale_inv, stream)
             : Launch1x128<T, Fp8Format::kE5M2>(x, rows, cols, ue8m0, layout, q, scale_inv, stream);
}

template <typename T>
Status Quantize128x128(const T* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleFormat sf,
                       uint8_t* q, float* scale_inv, int64_t scale_ld, uint8_t* qt, float* scale_inv_t,
                       int64_t scale_ld_t, cudaStream_t stream, uint8_t* q1 = nullptr, float* scale1 = nullptr) {
  if (q != nullptr) {
    FP8_RETURN_IF_ERROR(Sm90ValidateQuantShape(rows, cols, x, q, scale_inv));
    if (scale_ld < (cols + 127) / 128)
      return InvalidArgumentError("scale_ld must be ≥ ceil(cols/128) = " +
                                  std::to_string((cols + 127) / 128) + ", got " +
                                  std::to_string(scale_ld));
  }
  if (qt != nullptr) {
    FP8_RETURN_IF_ERROR(Sm90ValidateQuantShape(rows, cols, x, qt, scale_inv_t));
    if (rows % 16 != 0)
      return InvalidArgumentError("rows must be a multiple of 16 for the transposed output (16-byte rows of qt), got " +
                                  std::to_string(rows));
    if (scale_ld_t < (rows + 127) / 128)
      return InvalidArgumentError("scale_ld_t must be ≥ ceil(rows/128) = " +
                                  std::to_string((rows + 127) / 128) + ", got " +
                                  std::to_string(scale_ld_t));
  }
  if (q1 != nullptr) FP8_RETURN_IF_ERROR(Sm90ValidateQuantShape(rows, cols, x, q1, scale1));
  if (q == nullptr && qt == nullptr && q1 == nullptr) return InvalidArgumentError("output pointer is null");
  const dim3 grid(static_cast<unsigned>((cols + 127) / 128), static_cast<unsigned>((rows + 127) / 128));
  if (grid.y > 65535) return InvalidArgumentError("rows too large: " + std::to_string(rows));
  const bool ue8m0 = sf == ScaleFormat::kUe8m0;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    // Xᵀ without X's 128x128 bytes: the lean transposing kernels (sm90_fp8_quantize_transpose.cuh),
    // q1's MN-major scales at (r, g) → g·rows + r, Xᵀ's block (j, i) scale at j·scale_ld_t + i.
    if (q == nullptr && qt != nullptr) {
      const Sm90TransposeCastArgs a{x, rows, cols, ue8m0, q1, scale1, 1, rows, qt, scale_inv_t, scale_ld_t, 1};
      FP8_RETURN_IF_CUDA_ERROR(
          fmt == Fp8Format::kE4M3
              ? (Sm90LaunchTransposeCast<Fp8Format::kE4M3, Sm90TransposedTiles::k128x128>(a, stream))
              : (Sm90LaunchTransposeCast<Fp8Format::kE5M2, Sm90TransposedTiles::k128x128>(a, stream)));
      return OkStatus();
    }
  }
  const size_t smem = qt != nullptr ? Sm90Block128x128<T>::kTransposeSmemBytes : 0;
  const bool only_q = qt == nullptr && q1 == nullptr;
  auto* kernel = fmt == Fp8Format::kE4M3
                     ? (only_q ? Sm90Fp8Quantize128x128Kernel<T, Fp8Format::kE4M3, true>
                               : Sm90Fp8Quantize128x128Kernel<T, Fp8Format::kE4M3, false>)
                     : (only_q ? Sm90Fp8Quantize128x128Kernel<T, Fp8Format::kE5M2, true>
                               : Sm90Fp8Quantize128x128Kernel<T, Fp8Format::kE5M2, false>);
  kernel<<<grid, kSm90QuantThreads, smem, stream>>>(x, rows, cols, ue8m0, q, scale_inv, scale_ld, qt, scale_inv_t,
                                                    scale_ld_t, q1, scale1);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace

Status Sm90Fp8Quantize1x128(const __nv_bfloat16* x, int64_t rows, int64_t cols, Fp8Format fmt,
                            ScaleFormat sf, Sm90ScaleLayout layout, uint8_t* q, float* scale_inv,
                            cudaStream_t stream) {
  return Quantize1x128(x, rows, cols, fmt, sf, layout, q, scale_inv, stream);
}
Status Sm90Fp8Quantize1x128(const float* x, int64_t rows, int64_t cols, Fp8Format fmt,
                            ScaleFormat sf, Sm90ScaleLayout layout, uint8_t* q, float* scale_inv,
                            cudaStream_t stream) {
  return Quantize1x128(x, rows, cols, fmt, sf, layout, q, scale_inv, stream);
}
Status Sm90Fp8Quantize128x128(const __nv_bfloat16* x, int64_t rows, int64_t cols, Fp8Format fmt,
                              ScaleFormat sf, uint8_t* q, float* scale_inv, int64_t scale_ld,
                              cudaStream_t stream) {
  if (q == nullptr) return InvalidArgumentError("output pointer is null");
  return Quantize128x128(x, rows, cols, fmt, sf, q, scale_inv, scale_ld, nullptr, nullptr, 0, stream);
}
Status Sm90Fp8Quantize128x128(const float* x, int64_t rows, int64_t cols, Fp8Format fmt,
                              ScaleFormat sf, uint8_t* q, float* scale_inv, int64_t scale_ld,
                              cudaStream_t stream) {
  if (q == nullptr) return InvalidArgumentError("output pointer is null");
  return Quantize128x128(x, rows, cols, fmt, sf, q, scale_inv, scale_ld, nullptr, nullptr, 0, stream);
}

Status Sm90Fp8Quantize128x128WithTranspose(const __nv_bfloat16* x, int64_t rows, int64_t cols,
                                           Fp8Format fmt, ScaleFormat sf, uint8_t* q, float* scale_inv,
                                           int64_t scale_ld, uint8_t* qt, float* scale_inv_t,
                                           int64_t scale_ld_t, cudaStream_t stream) {
  if (qt == nullptr) return InvalidArgumentError("transposed output pointer is null");
  return Quantize128x128(x, rows, cols, fmt, sf, q, scale_inv, scale_ld, qt, scale_inv_t, scale_ld_t, stream);
}
Status Sm90Fp8Quantize128x128WithTranspose(const float* x, int64_t rows, int64_t cols,
                                           Fp8Format fmt, ScaleFormat sf, uint8_t* q, float* scale_inv,
                                           int64_t scale_ld, uint8_t* qt, float* scale_inv_t,
                                           int64_t scale_ld_t, cudaStream_t stream) {
  if (qt == nullptr) return InvalidArgumentError("transposed output pointer is null");
  return Quantize128x128(x, rows, cols, fmt, sf, q, scale_inv, scale_ld, qt, scale_inv_t, scale_ld_t, stream);
}

Status Sm90Fp8Quantize1x128AndTransposed128x128(const __nv_bfloat16* x, int64_t rows, int64_t cols,
                                                Fp8Format fmt, ScaleFormat sf, uint8_t* q1, float* scale1,
                                                uint8_t* qt, float* scale_inv_t, int64_t scale_ld_t,
                                                cudaStream_t stream) {
  if (q1 == nullptr) return InvalidArgumentError("1x128 output pointer is null");
  if (qt == nullptr) return InvalidArgumentError("transposed output pointer is null");
  return Quantize128x128(x, rows, cols, fmt, sf, nullptr, nullptr, 0, qt, scale_inv_t, scale_ld_t, stream, q1, scale1);
}

}  // namespace fp8::kernels::cuda
