// SPDX-License-Identifier: Apache-2.0
// The CUDA trainer's model as cuda_trainer.cc and the benches see it: one decoder-only family on
// one GPU, its parameters and gradients in flat FP32 device buffers laid out as the host
// family's (causal_lm.h), so checkpoints, export and the CPU models are interchangeable.
// CudaGptModel (cuda_model.h) and CudaLlamaModel (cuda_llama_model.h) implement it;
// MakeCudaCausalLm picks one from ModelConfig::architecture, the only place that does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/causal_lm.h"
#include "worker/train/cuda/op_timer.h"
#include "worker/train/cuda/train_kernels.h"
#include "worker/train/precision.h"
#include "worker/train/spec.h"

namespace fp8::train::cuda {

// The fused paths the model takes. Training always uses the defaults; a test turns one off to
// check it against the plain formulation on the same weights and tokens.
struct CudaModelOptions {
  // bf16: bias, bias + GELU and GELU backward in the GEMMs' cuBLASLt epilogues (false: separate
  // passes, as the FP8 recipes run them).
  bool fused_epilogues = true;
  // OptimizerStep writes the next forward's weight casts (false: plain AdamW, the forward casts).
  bool fused_optimizer = true;
  // The first Backward overwrites the linear weights' and the head's gradients (false: ZeroGrad
  // clears everything and every Backward accumulates).
  bool overwrite_grads = true;
};

class CudaCausalLm {
 public:
  virtual ~CudaCausalLm() = default;

  // Host ↔ device copies of the flat FP32 buffers (synchronous).
  virtual Status UploadParams(const float* host) = 0;
  virtual Status DownloadParams(float* host) const = 0;
  virtual Status DownloadGrads(float* host) const = 0;

  // Mean cross-entropy of `batch` sequences (host token arrays). When `training`, also
  // writes d(loss_scale · loss)/dlogits for Backward and advances the FP8 scaling state.
  virtual StatusOr<double> Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training,
                                   float loss_scale) = 0;
  // Accumulates the gradients of the last training Forward into grads(), then (fp8-tensorwise)
  // feeds the step's amaxes into the scaling histories, reduced over the ranks first when an
  // amax reduction is set.
  virtual Status Backward() = 0;
  // grads() = 0 as the next Backward sees it (the gradients the first Backward overwrites are
  // left alone: CudaModelOptions::overwrite_grads). Read grads() only after a Backward.
  virtual Status ZeroGrad() = 0;
  // One AdamW step over every parameter (m, v: FP32 moments laid out like the parameters).
  virtual Status OptimizerStep(const AdamWArgs& a, float* m, float* v) = 0;

  // The parameters, to write: the weight casts the model keeps are dropped (the next forward
  // casts again). Read-only users take DownloadParams.
  virtual float* mutable_params() = 0;
  virtual float* grads() = 0;
  virtual int64_t num_params() const = 0;
  virtual const std::vector<ParamTensor>& tensors() const = 0;
  virtual cudaStream_t stream() const = 0;

  // FP8 recipes: whether the training casts from now on are counted; TakeFp8Stats waits for
  // the stream, returns the count (empty when none was collected) and stops collecting.
  virtual Status CollectFp8Stats(bool on) = 0;
  virtual Fp8CastStats TakeFp8Stats() = 0;

  // fp8-tensorwise scaling state keyed by the host family's linear layer names.
  virtual nlohmann::json PrecisionState() const = 0;
  virtual Status RestorePrecisionState(const nlohmann::json& state) = 0;

  // fp8-tensorwise under data parallelism: an in-place max over the ranks of `n` device floats on
  // the model's stream, so every rank updates its histories with the same amaxes.
  using AmaxReduce = std::function<Status(float* amax, size_t n, cudaStream_t stream)>;
  void SetAmaxReduce(AmaxReduce reduce) { amax_reduce_ = std::move(reduce); }

  // The bf16 recipe's GEMM epilogues cuBLASLt refused (those run as separate passes); empty when
  // every fusion ran or the family has none. For the bench's report.
  virtual std::string EpilogueRefusals() const { return {}; }

  // bench_trainer_cuda --profile: from now on the model marks each operation it enqueues on
  // `timer` (op_timer.h); null stops it. A family that marks nothing ignores it.
  virtual void SetOpTimer(OpTimer* timer) { (void)timer; }

 protected:
  AmaxReduce amax_reduce_;
};

// The family cfg.architecture names. `tensors`: the host family's layout (CausalLmParamLayout);
// `max_batch` sizes the activations.
StatusOr<std::unique_ptr<CudaCausalLm>> MakeCudaCausalLm(const ModelConfig& cfg, const PrecisionConfig& precision,
                                                         const std::vector<ParamTensor>& tensors, int max_batch,
                                                         cudaStream_t stream, const CudaModelOptions& options = {});

}  // namespace fp8::train::cuda
