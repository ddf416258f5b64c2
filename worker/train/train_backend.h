// SPDX-License-Identifier: Apache-2.0
// The seam between the training loop (trainer.h: schedule, accumulation, evaluation, checkpoint
// cadence, resume, events, NaN handling) and what computes the steps: the CPU CausalLm + AdamW
// + Collective (cpu_backend.cc) or the CUDA model + NCCL (cuda/cuda_trainer.cc). The loop owns
// the data sampler and the host model (either family, causal_lm.h) that checkpoints are read
// into and written from.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/causal_lm.h"
#include "worker/train/optimizer.h"
#include "worker/train/spec.h"

namespace fp8::train {

class TrainBackend {
 public:
  virtual ~TrainBackend() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Layout, initialisation, checkpoints and export: the loop fills them before Start (init,
  // resume, init_from) and reads them after SyncHost.
  virtual CausalLm& host() = 0;
  virtual AdamW& host_adam() = 0;

  // Acquires the device (an InvalidArgument error is the spec's fault).
  virtual Status Init() = 0;
  // The host holds the starting weights (if `resumed`, also the moments, and the checkpoint's
  // `fp8_scaling` state unless null).
  virtual Status Start(bool resumed, const nlohmann::json& fp8_scaling) = 0;

  // A step: BeginStep, MicroStep per micro-batch, ReduceStep, then Update if the loss is finite.
  // `fp8_stats`: the step reports progress, so its FP8 casts are counted for TakeFp8CastStats.
  virtual Status BeginStep(bool fp8_stats) = 0;
  // Forward and backward; gradients of loss_scale·loss accumulate. Returns the mean loss.
  virtual StatusOr<double> MicroStep(const int32_t* inputs, const int32_t* targets, int batch, float loss_scale) = 0;
  // Gradients summed over the ranks; *loss becomes their mean, *stop true if any rank stops.
  virtual Status ReduceStep(double* loss, bool* stop) = 0;
  // Clips to training.max_grad_norm, takes AdamW step `step` (1-based); returns the norm before.
  virtual StatusOr<double> Update(double lr, int64_t step) = 0;
  virtual Fp8CastStats TakeFp8CastStats() = 0;  // empty: not counted, or not an FP8 recipe
  // What the mixture-of-experts routers did in the last step, all ranks (absent: dense model).
  virtual MoeRoutingStats RoutingStats() const { return {}; }

  // Mean loss of `batch` sequences: no gradients, scaling state untouched.
  virtual StatusOr<double> EvalLoss(const int32_t* inputs, const int32_t* targets, int batch) = 0;
  virtual Status AllReduceSum(double* v, int n) = 0;  // in place, over the ranks

  virtual Status SyncHost() = 0;  // host() and host_adam() catch up with the steps taken
  virtual nlohmann::json PrecisionState() const = 0;

  // Fields naming the backend (started event, checkpoint state, result), extra result fields,
  // and the dense peak FLOP/s per rank that progress reports MFU against (0: none).
  virtual nlohmann::json Labels() const { return nlohmann::json::object(); }
  virtual void AddResultFields(nlohmann::json* /*result*/) const {}
  virtual double PeakFlops() const { return 0; }
};

}  // namespace fp8::train
