// Collectives between the ranks of one attempt, behind an interface so the CPU (Gloo) and the
// future CUDA (NCCL) backends plug in the same way. Results are identical on every rank (each
// element is reduced once and then broadcast), so replicas never drift apart.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

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
};

// world_size 1: every call is a no-op.
std::unique_ptr<Collective> MakeSingleProcessCollective();

// Gloo over TCP on loopback, rendezvous through files in `rendezvous_dir` (shared by the
// attempt's ranks). Unavailable when the peers do not show up within `timeout`.
StatusOr<std::unique_ptr<Collective>> MakeGlooCollective(int rank, int world_size,
                                                         const std::string& rendezvous_dir,
                                                         std::chrono::milliseconds timeout);

}  // namespace fp8::train
