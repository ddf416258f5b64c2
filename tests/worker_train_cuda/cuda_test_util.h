// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the CUDA trainer tests: GPU skip, Status asserts, device buffers with host
// copies, BF16 conversions and relative errors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "worker/train/cuda/cuda_trainer.h"
#include "worker/train/cuda/device_buffer.h"
#include "worker/train/cuda/train_kernels.h"

namespace fp8::train::cuda {

#define SKIP_WITHOUT_GPU()                                          \
  do {                                                              \
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";   \
  } while (0)

#define ASSERT_OK(expr)                                 \
  do {                                                  \
    const ::fp8::Status _s = (expr);                    \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.message(); \
  } while (0)

inline double RelErr(const float* a, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

template <typename T>
struct Dev {
  DeviceBuffer<T> b;
  explicit Dev(const std::vector<T>& h) {
    EXPECT_TRUE(b.Allocate(h.size(), "test").ok());
    cudaMemcpy(b.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  explicit Dev(size_t n) { EXPECT_TRUE(b.Allocate(n, "test").ok()); cudaMemset(b.get(), 0, n * sizeof(T)); }
  std::vector<T> Host() const {
    std::vector<T> h(b.size());
    cudaDeviceSynchronize();
    cudaMemcpy(h.data(), b.get(), h.size() * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
  T* get() { return b.get(); }
};

inline std::vector<float> ToF32(const std::vector<bf16>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __bfloat162float(v[i]);
  return o;
}
inline std::vector<bf16> ToBf16(const std::vector<float>& v) {
  std::vector<bf16> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __float2bfloat16(v[i]);
  return o;
}
inline std::vector<float> RoundBf16(std::vector<float> v) {
  for (float& x : v) x = __bfloat162float(__float2bfloat16(x));
  return v;
}

}  // namespace fp8::train::cuda
