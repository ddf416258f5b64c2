// SPDX-License-Identifier: Apache-2.0
// Launchers of the per-tensor cast + amax kernels (sm90_fp8_tensor_quantize.cuh).
#include "kernels/cuda/sm90_fp8_tensor_quantize.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_tensor_quantize.cuh"

namespace fp8::kernels::cuda {
namespace {

template <typename T, Fp8Format F, bool kCast>
Status Launch(const T* x, int64_t n, const float* scale_inv, uint8_t* q, float* amax,
              cudaStream_t stream) {
  if (n < 1) return InvalidArgumentError("n must be ≥ 1, got " + std::to_string(n));
  if (x == nullptr || amax == nullptr) return InvalidArgumentError("x / amax pointer is null");
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0)
    return InvalidArgumentError("x must be 16-byte aligned");
  if (kCast) {
    if (q == nullptr || scale_inv == nullptr)
      return InvalidArgumentError("q / scale_inv pointer is null");
    if (reinterpret_cast<uintptr_t>(q) % 16 != 0)
      return InvalidArgumentError("q must be 16-byte aligned");
  }
  constexpr int64_t kPerBlock = int64_t{kSm90TensorThreads} * kSm90TensorUnroll;
  const int64_t n_vec = n / InVec<T>::kElems;
  const int64_t blocks = std::max<int64_t>(1, (n_vec + kPerBlock - 1) / kPerBlock);
  if (blocks >= (int64_t{1} << 31)) return InvalidArgumentError("n too large: " + std::to_string(n));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  Sm90Fp8QuantizeTensorKernel<T, F, kCast><<<static_cast<unsigned>(blocks), kSm90TensorThreads, 0,
                                            stream>>>(x, n, scale_inv, q,
                                                      reinterpret_cast<unsigned int*>(amax));
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

template <typename T>
Status QuantizeTensor(const T* x, int64_t n, const float* scale_inv, Fp8Format fmt, uint8_t* q,
                      float* amax, cudaStream_t stream) {
  return fmt == Fp8Format::kE4M3
             ? Launch<T, Fp8Format::kE4M3, true>(x, n, scale_inv, q, amax, stream)
             : Launch<T, Fp8Format::kE5M2, true>(x, n, scale_inv, q, amax, stream);
}

}  // namespace

Status Sm90Fp8QuantizeTensor(const __nv_bfloat16* x, int64_t n, const float* scale_inv,
                             Fp8Format fmt, uint8_t* q, float* amax, cudaStream_t stream) {
  return QuantizeTensor(x, n, scale_inv, fmt, q, amax, stream);
}
Status Sm90Fp8QuantizeTensor(const float* x, int64_t n, const float* scale_inv, Fp8Format fmt,
                             uint8_t* q, float* amax, cudaStream_t stream) {
  return QuantizeTensor(x, n, scale_inv, fmt, q, amax, stream);
}
Status Sm90Amax(const __nv_bfloat16* x, int64_t n, float* amax, cudaStream_t stream) {
  return Launch<__nv_bfloat16, Fp8Format::kE4M3, false>(x, n, nullptr, nullptr, amax, stream);
}
Status Sm90Amax(const float* x, int64_t n, float* amax, cudaStream_t stream) {
  return Launch<float, Fp8Format::kE4M3, false>(x, n, nullptr, nullptr, amax, stream);
}

}  // namespace fp8::kernels::cuda
