// SPDX-License-Identifier: Apache-2.0
// Launchers of the dequantization kernel (sm90_fp8_dequantize.cuh).
#include "kernels/cuda/sm90_fp8_dequantize.h"

#include <string>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_dequantize.cuh"

namespace fp8::kernels::cuda {
namespace {

template <typename OutT>
Status Launch(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
              int tile_rows_log2, int64_t s_row, int64_t s_col, Fp8Format fmt, OutT* out,
              cudaStream_t stream) {
  FP8_RETURN_IF_ERROR(Sm90ValidateQuantShape(rows, cols, q, out, scale_inv));
  constexpr int kN = DequantUnit<OutT>::kElems;
  constexpr int64_t kPerBlock = int64_t{kSm90DequantThreads} * kSm90DequantUnroll;
  const int64_t n_units = rows * cols / kN;
  if (n_units >= (int64_t{1} << 31)) return InvalidArgumentError("tensor too large");
  const int64_t blocks = (n_units + kPerBlock - 1) / kPerBlock;
  const FastDiv units_per_row(static_cast<uint32_t>(cols / kN));
  if (fmt == Fp8Format::kE4M3) {
    Sm90Fp8DequantizeKernel<OutT, Fp8Format::kE4M3>
        <<<static_cast<unsigned>(blocks), kSm90DequantThreads, 0, stream>>>(
            q, scale_inv, rows, cols, tile_rows_log2, s_row, s_col, units_per_row, out);
  } else {
    Sm90Fp8DequantizeKernel<OutT, Fp8Format::kE5M2>
        <<<static_cast<unsigned>(blocks), kSm90DequantThreads, 0, stream>>>(
            q, scale_inv, rows, cols, tile_rows_log2, s_row, s_col, units_per_row, out);
  }
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

template <typename OutT>
Status Dequantize1x128(const uint8_t* q, const float* s, Sm90ScaleLayout layout, int64_t rows,
                       int64_t cols, Fp8Format fmt, OutT* x, cudaStream_t stream) {
  const bool mn = layout == Sm90ScaleLayout::kMnMajor;
  const int64_t groups = (cols + 127) / 128;
  return Launch(q, s, rows, cols, 0, mn ? 1 : groups, mn ? rows : 1, fmt, x, stream);
}

template <typename OutT>
Status Dequantize128x128(const uint8_t* q, const float* s, int64_t scale_ld, int64_t rows,
                         int64_t cols, Fp8Format fmt, OutT* x, cudaStream_t stream) {
  if (scale_ld < (cols + 127) / 128)
    return InvalidArgumentError("scale_ld must be ≥ ceil(cols/128), got " + std::to_string(scale_ld));
  return Launch(q, s, rows, cols, 7, scale_ld, 1, fmt, x, stream);
}

}  // namespace

Status Sm90Fp8Dequantize1x128(const uint8_t* q, const float* scale_inv, Sm90ScaleLayout layout,
                              int64_t rows, int64_t cols, Fp8Format fmt, __nv_bfloat16* x,
                              cudaStream_t stream) {
  return Dequantize1x128(q, scale_inv, layout, rows, cols, fmt, x, stream);
}
Status Sm90Fp8Dequantize1x128(const uint8_t* q, const float* scale_inv, Sm90ScaleLayout layout,
                              int64_t rows, int64_t cols, Fp8Format fmt, float* x,
                              cudaStream_t stream) {
  return Dequantize1x128(q, scale_inv, layout, rows, cols, fmt, x, stream);
}
Status Sm90Fp8Dequantize128x128(const uint8_t* q, const float* scale_inv, int64_t scale_ld,
                                int64_t rows, int64_t cols, Fp8Format fmt, __nv_bfloat16* x,
                                cudaStream_t stream) {
  return Dequantize128x128(q, scale_inv, scale_ld, rows, cols, fmt, x, stream);
}
Status Sm90Fp8Dequantize128x128(const uint8_t* q, const float* scale_inv, int64_t scale_ld,
                                int64_t rows, int64_t cols, Fp8Format fmt, float* x,
                                cudaStream_t stream) {
  return Dequantize128x128(q, scale_inv, scale_ld, rows, cols, fmt, x, stream);
}
Status Sm90Fp8DequantizeTensor(const uint8_t* q, int64_t n, const float* scale_inv,
                               Fp8Format fmt, __nv_bfloat16* x, cudaStream_t stream) {
  return Launch(q, scale_inv, 1, n, 0, 0, 0, fmt, x, stream);
}
Status Sm90Fp8DequantizeTensor(const uint8_t* q, int64_t n, const float* scale_inv,
                               Fp8Format fmt, float* x, cudaStream_t stream) {
  return Launch(q, scale_inv, 1, n, 0, 0, 0, fmt, x, stream);
}

}  // namespace fp8::kernels::cuda
