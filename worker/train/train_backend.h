// The seam between the training loop (trainer.h: schedule, accumulation, evaluation, checkpoint
// cadence, resume, events, NaN handling) and the model that computes: the CPU GptModel + AdamW +
// Collective, or the CUDA model + NCCL (worker/train/cuda). The loop owns the data sampler and
// the host model that checkpoints are read into and written from; a backend only computes.
#pragma once

#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/collective.h"
#include "worker/train/model.h"
#include "worker/train/optimizer.h"
#include "worker/train/precision.h"
#include "worker/train/spec.h"

namespace fp8::train {

class TrainBackend {
 public:
  virtual ~TrainBackend() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // The host model and optimizer: layout, initialisation, the checkpoint format and export.
  // The loop initialises, resumes and loads init_from into them before Start; Save and export
  // read them after SyncHost.
  virtual GptModel& host() = 0;
  virtual AdamW& host_adam() = 0;

  // Acquires the device (CPU: nothing). An InvalidArgument error is the spec's fault.
  virtual Status Init() = 0;
  // The host model holds the starting weights (and, when `resumed`, the moments and the FP8
  // scaling state `fp8_scaling`): copy them to where the steps run.
  virtual Status Start(bool resumed, const nlohmann::json& fp8_scaling) = 0;

  // A step: BeginStep, MicroStep per micro-batch, ReduceStep, then Update unless the loss is not
  // finite. `fp8_stats`: this step's FP8 casts are reported (TakeFp8CastStats after it); other
  // steps need not count them.
  virtual Status BeginStep(bool fp8_stats) = 0;
  // Forward and backward of one micro-batch; gradients of loss_scale·loss accumulate. Returns the
  // micro-batch's mean loss.
  virtual StatusOr<double> MicroStep(const int32_t* inputs, const int32_t* targets, int batch,
                                     float loss_scale) = 0;
  // Sums the gradients over the ranks; *loss becomes the ranks' mean and *stop true if any rank
  // stops, so every rank leaves the loop at the same step.
  virtual Status ReduceStep(double* loss, bool* stop) = 0;
  // Clips to training.max_grad_norm and takes optimizer step `step` (1-based) at `lr`. Returns
  // the gradient norm before clipping.
  virtual StatusOr<double> Update(double lr, int64_t step) = 0;
  // The FP8 casts of the last step begun with fp8_stats (empty: none, or not an FP8 recipe).
  virtual Fp8CastStats TakeFp8CastStats() = 0;

  // Mean loss of `batch` sequences, no gradients, scaling state untouched.
  virtual StatusOr<double> EvalLoss(const int32_t* inputs, const int32_t* targets, int batch) = 0;
  // v[0..n) summed over the ranks, in place.
  virtual Status AllReduceSum(double* v, int n) = 0;

  // Brings host() and host_adam() up to date with the steps taken.
  virtual Status SyncHost() = 0;
  virtual nlohmann::json PrecisionState() const = 0;

  // Fields that name the backend in the started event, the checkpoint state and the result.
  virtual nlohmann::json Labels() const { return nlohmann::json::object(); }
  // Extra fields of the done event's result (device memory).
  virtual void AddResultFields(nlohmann::json* /*result*/) const {}
  // The dense peak FLOP/s per rank that progress reports MFU against (0: no MFU).
  virtual double PeakFlops() const { return 0; }
};

// The CPU backend: GptModel + AdamW, data parallel over `collective`.
std::unique_ptr<TrainBackend> MakeCpuBackend(const TrainSpec& spec, Collective& collective);

}  // namespace fp8::train
