// SPDX-License-Identifier: Apache-2.0
// Helpers for the CUDA kernel tests: GPU presence, device buffers, fresh random inputs, and the
// comparisons against the CPU reference (the ground truth, docs/design.md §6).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/fp8_format.h"

namespace fp8::kernels::cuda::testing {

// True when a CUDA device is usable. On machines without a GPU (CI) cudaGetDeviceCount fails
// or reports 0 and the GPU tests skip.
inline bool HasCudaDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define FP8_SKIP_WITHOUT_GPU()                                                       \
  do {                                                                               \
    if (!::fp8::kernels::cuda::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// A device allocation poisoned with 0xFF bytes (NaN for floats, -NaN/0xFF for FP8), so an
// element the kernel forgot to write shows up as a mismatch.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    FP8_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(n, 1) * sizeof(T)));
    FP8_CHECK_CUDA(cudaMemset(ptr_, 0xFF, std::max<size_t>(n, 1) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    FP8_CHECK_CUDA(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> h(n_);
    FP8_CHECK_CUDA(cudaDeviceSynchronize());
    FP8_CHECK_CUDA(cudaMemcpy(h.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

// Fresh seed per run (the kernels must agree with the reference on any input); printed so a
// failure can be replayed with FP8_TEST_SEED.
inline uint64_t TestSeed() {
  if (const char* s = std::getenv("FP8_TEST_SEED")) return std::stoull(s);
  return std::random_device{}() * 0x9E3779B97F4A7C15ull + std::random_device{}();
}

// Values spread over many binades: each 32-element run gets its own magnitude 10^U(-4, 4), so
// tiles see very different amax values, saturation (ue8m0 and E5M2/E4M3 extremes) and FP8
// subnormals. A few runs are all zero (the amax floor).
inline std::vector<float> RandomFloats(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-4.0f, 4.0f);
  std::uniform_int_distribution<int> zero_run(0, 40);
  std::vector<float> x(n);
  float mag = 1.0f;
  bool zero = false;
  for (size_t i = 0; i < n; ++i) {
    if (i % 32 == 0) {
      mag = std::pow(10.0f, exponent(rng));
      zero = zero_run(rng) == 0;
    }
    x[i] = zero ? 0.0f : normal(rng) * mag;
  }
  return x;
}

// The same values rounded to bf16: the bf16 bits for the GPU, their exact floats for the CPU.
inline void ToBf16(const std::vector<float>& x, std::vector<uint16_t>* bits, std::vector<float>* exact) {
  bits->resize(x.size());
  exact->resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    (*bits)[i] = FloatToBf16(x[i]);
    (*exact)[i] = Bf16ToFloat((*bits)[i]);
  }
}

inline uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Element-wise bit equality; reports the first few mismatches.
template <typename T>
::testing::AssertionResult BitsEqual(const std::vector<T>& want, const std::vector<T>& got,
                                     const std::string& what) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << what << ": size differs";
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(T)) != 0) {
      if (bad < 5) {
        first += " [" + std::to_string(i) + "] want " + std::to_string(static_cast<double>(want[i])) +
                 " got " + std::to_string(static_cast<double>(got[i])) + ";";
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << want.size()
                                       << " elements differ:" << first;
}

// DeepSeek's calc_diff: 1 - 2Σxy / Σ(x² + y²); 0 for identical, ~1 for unrelated.
inline double CalcDiff(const std::vector<double>& x, const std::vector<double>& y) {
  double xy = 0, xx_yy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xy += x[i] * y[i];
    xx_yy += x[i] * x[i] + y[i] * y[i];
  }
  return xx_yy == 0 ? 0.0 : 1.0 - 2.0 * xy / xx_yy;
}

}  // namespace fp8::kernels::cuda::testing
