// SPDX-License-Identifier: Apache-2.0
// Collectives between the ranks of one attempt, behind an interface so the CPU (Gloo) and the
// future CUDA (NCCL) backends plug in the same way. Results are identical on every rank (each
// element is reduced once and then broadcast), so replicas never drift apart.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8::train {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: data[i] = Σ_ranks data[i].
  virtual Status AllReduceSum(float* data, size_t n) = 0;
  // In place: data[i] = max over ranks of data[i] (fp8-tensorwise amaxes).
  virtual Status AllReduceMax(float* data, size_t n) = 0;
  virtual Status Barrier() = 0;
  // Personalized exchange with variable counts (expert parallelism moves token rows with it).
  // `send_counts[r]` elements of `send` go to rank r, the blocks in rank order; `recv_counts[r]`
  // elements from rank r land in `recv`, in rank order. Both vectors have world_size() entries
  // and every pair must agree (what r sends to q is what q expects from r); a zero count sends
  // nothing. The block for this rank itself is copied.
  virtual Status AllToAllV(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                           const std::vector<int64_t>& recv_counts) = 0;
  virtual Status AllToAllV(const int64_t* send, const std::vector<int64_t>& send_counts, int64_t* recv,
                           const std::vector<int64_t>& recv_counts) = 0;
};

// world_size 1: the reductions are no-ops and AllToAllV copies its one block.
std::unique_ptr<Collective> MakeSingleProcessCollective();

// Gloo over TCP on loopback, rendezvous through files in `rendezvous_dir` (shared by the
// attempt's ranks). Unavailable when the peers do not show up within `timeout`.
StatusOr<std::unique_ptr<Collective>> MakeGlooCollective(int rank, int world_size,
                                                         const std::string& rendezvous_dir,
                                                         std::chrono::milliseconds timeout);

}  // namespace fp8::train
