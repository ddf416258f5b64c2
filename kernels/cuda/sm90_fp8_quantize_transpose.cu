// SPDX-License-Identifier: Apache-2.0
// Launchers of the fused X / Xᵀ quantization kernel (sm90_fp8_quantize_transpose.cuh).
#include "kernels/cuda/sm90_fp8_quantize_transpose.h"

#include <string>
#include <type_traits>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_quantize_transpose.cuh"

namespace fp8::kernels::cuda {
namespace {

template <typename T, Fp8Format F>
Status Launch(const T* x, int64_t rows, int64_t cols, bool ue8m0, Sm90ScaleLayout layout,
              uint8_t* q, float* s, uint8_t* qt, float* st, cudaStream_t stream) {
  const int64_t col_groups = (cols + 127) / 128;
  const int64_t row_groups = (rows + 127) / 128;
  const bool mn = layout == Sm90ScaleLayout::kMnMajor;
  // (row, group) → index, for X and for Xᵀ (whose rows are X's columns).
  const int64_t s_row = mn ? 1 : col_groups, s_grp = mn ? rows : 1;
  const int64_t st_row = mn ? 1 : row_groups, st_grp = mn ? cols : 1;
  // bf16: the lean kernel (86% of copy on an H200 against the kernel below's 62%,
  // docs/perf-history.md); fp32 input keeps the kernel below.
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const Sm90TransposeCastArgs a{x, rows, cols, ue8m0, q, s, s_row, s_grp, qt, st, st_row, st_grp};
    FP8_RETURN_IF_CUDA_ERROR((Sm90LaunchTransposeCast<F, Sm90TransposedTiles::k1x128>(a, stream)));
    return OkStatus();
  }
  const dim3 grid(static_cast<unsigned>(col_groups), static_cast<unsigned>(row_groups));
  Sm90Fp8Quantize1x128TransposeKernel<T, F><<<grid, kSm90TransposeThreads, 0, stream>>>(
      x, rows, cols, ue8m0, q, s, s_row, s_grp, qt, st, st_row, st_grp);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

template <typename T>
Status QuantizeWithTranspose(const T* x, int64_t rows, int64_t cols, Fp8Format fmt,
                             ScaleFormat sf, Sm90ScaleLayout layout, uint8_t* q, float* s,
                             uint8_t* qt, float* st, cudaStream_t stream) {
  FP8_RETURN_IF_ERROR(Sm90ValidateQuantShape(rows, cols, x, q, s));
  if (rows % 16 != 0)
    return InvalidArgumentError("rows must be a multiple of 16 (16-byte rows of Xᵀ), got " +
                                std::to_string(rows));
  if (qt == nullptr || st == nullptr) return InvalidArgumentError("qt / scale_inv_t is null");
  if (reinterpret_cast<uintptr_t>(qt) % 16 != 0)
    return InvalidArgumentError("qt must be 16-byte aligned");
  if ((rows + 127) / 128 > 65535) return InvalidArgumentError("rows too large");
  const bool ue8m0 = sf == ScaleFormat::kUe8m0;
  return fmt == Fp8Format::kE4M3
             ? Launch<T, Fp8Format::kE4M3>(x, rows, cols, ue8m0, layout, q, s, qt, st, stream)
             : Launch<T, Fp8Format::kE5M2>(x, rows, cols, ue8m0, layout, q, s, qt, st, stream);
}

}  // namespace

Status Sm90Fp8Quantize1x128WithTranspose(const __nv_bfloat16* x, int64_t rows, int64_t cols,
                                         Fp8Format fmt, ScaleFormat sf, Sm90ScaleLayout layout,
                                         uint8_t* q, float* scale_inv, uint8_t* qt,
                                         float* scale_inv_t, cudaStream_t stream) {
  return QuantizeWithTranspose(x, rows, cols, fmt, sf, layout, q, scale_inv, qt, scale_inv_t,
                               stream);
}
Status Sm90Fp8Quantize1x128WithTranspose(const float* x, int64_t rows, int64_t cols,
                                         Fp8Format fmt, ScaleFormat sf, Sm90ScaleLayout layout,
                                         uint8_t* q, float* scale_inv, uint8_t* qt,
                                         float* scale_inv_t, cudaStream_t stream) {
  return QuantizeWithTranspose(x, rows, cols, fmt, sf, layout, q, scale_inv, qt, scale_inv_t,
                               stream);
}

}  // namespace fp8::kernels::cuda
