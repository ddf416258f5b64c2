// SPDX-License-Identifier: Apache-2.0
// Owning device allocation (cudaMalloc, never managed memory) with an fp8::Status on failure.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "common/status.h"

namespace fp8::train::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Free(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Free();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // (Re)allocates `count` elements; contents undefined. `what` names the buffer in errors.
  Status Allocate(size_t count, const char* what) {
    Free();
    if (count == 0) return OkStatus();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, count * sizeof(T));
    if (e != cudaSuccess)
      return ResourceExhaustedError(std::string("cudaMalloc of ") + what + " (" +
                                    std::to_string(count * sizeof(T)) + " bytes): " + cudaGetErrorString(e));
    p_ = static_cast<T*>(p);
    n_ = count;
    return OkStatus();
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void Free() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace fp8::train::cuda
