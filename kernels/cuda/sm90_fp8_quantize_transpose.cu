// Launchers of the fused X / Xᵀ quantization kernel (sm90_fp8_quantize_transpose.cuh).
#include "kernels/cuda/sm90_fp8_quantize_transpose.h"

#include <string>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_quantize_transpose.cuh"

namespace fp8::kernels::cuda {
namespace {

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
  const bool ue8m0 = sf == ScaleFormat::kUe8m0, mn = layout == Sm90ScaleLayout::kMnMajor;
  const Sm90DirectLoad<T> load{x, cols};
  FP8_CUDA_RETURN_IF_ERROR(fmt == Fp8Format::kE4M3
                               ? LaunchSm90Fp8Quantize1x128Transpose<Fp8Format::kE4M3>(load, rows, cols, ue8m0, mn, q, s, qt, st, nullptr, stream)
                               : LaunchSm90Fp8Quantize1x128Transpose<Fp8Format::kE5M2>(load, rows, cols, ue8m0, mn, q, s, qt, st, nullptr, stream));
  return OkStatus();
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
