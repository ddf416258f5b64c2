// SPDX-License-Identifier: Apache-2.0
// Data-parallel all-reduce between the ranks of one attempt through NCCL, on device buffers.
// NCCL is loaded with dlopen (libnccl.so.2) only when world_size > 1, so a single-GPU run and
// the CI build never need the library. Rank 0 writes the NCCL unique id to
// <rendezvous_dir>/nccl_unique_id (written to a temporary name, then renamed); the others wait
// for it until `timeout`.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"

namespace fp8::train::cuda {

class NcclComm {
 public:
  static StatusOr<std::unique_ptr<NcclComm>> Create(int rank, int world_size,
                                                    const std::string& rendezvous_dir,
                                                    std::chrono::milliseconds timeout);
  ~NcclComm();
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  // In place, Σ over ranks, enqueued on `stream`. No-op for world_size 1.
  Status AllReduceSum(float* data, size_t n, cudaStream_t stream);
  Status AllReduceSum(double* data, size_t n, cudaStream_t stream);
  // In place, max over ranks (fp8-tensorwise amaxes). No-op for world_size 1.
  Status AllReduceMax(float* data, size_t n, cudaStream_t stream);

 private:
  NcclComm() = default;
  Status AllReduce(void* data, size_t n, int nccl_type, int nccl_op, cudaStream_t stream);
  int rank_ = 0, world_ = 1;
  void* lib_ = nullptr;
  void* comm_ = nullptr;
};

}  // namespace fp8::train::cuda
