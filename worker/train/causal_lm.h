// SPDX-License-Identifier: Apache-2.0
// The host model as the trainer, AdamW, checkpoints, export, evaluation and calibration see it:
// a decoder-only language model on the CPU whose parameters and gradients each live in one flat
// FP32 buffer (so the optimizer, the all-reduce and the checkpoint see a single array), whose
// linear layers run through LinearPrecision (the recipe), and whose FP8 scaling state is keyed by
// the linear layers' own names. GptModel (model.h) and LlamaModel (llama_model.h) are the two
// families; MakeCausalLm picks one from ModelConfig::architecture, the only place that does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/precision.h"
#include "worker/train/spec.h"

namespace fp8::train {

struct ParamTensor {
  std::string name;             // the family's Hugging Face names: "h.0.attn.c_attn.weight", "model.norm.weight"
  std::vector<int64_t> shape;
  int64_t offset = 0;           // into params()/grads()
  int64_t numel = 0;
  bool weight_decay = false;    // 2-D tensors only, as in GPT-2/llm.c
};

// Appends a tensor after the last one of `layout` (offsets are consecutive).
void AddParamTensor(std::vector<ParamTensor>* layout, const std::string& name, std::vector<int64_t> shape, bool decay);

// N(0, 1) samples that are a pure function of the seed: Box-Muller over splitmix64, the same
// numbers on every platform and standard library (the families' InitWeights).
class SeededNormal {
 public:
  explicit SeededNormal(uint64_t seed) : seed_(seed) {}
  double operator()();

 private:
  double Uniform();
  uint64_t seed_, counter_ = 0;
};

// What the mixture-of-experts routers did in a step, over all ranks (progress events).
struct MoeRoutingStats {
  bool present = false;  // false: a dense model, or no step yet
  // Tokens routed to each expert as multiples of its layer's mean (1 = balanced), lowest and
  // highest over the MoE layers; cv: the largest of the layers' std/mean.
  double load_min = 0, load_max = 0, load_cv = 0;
  double dropped_fraction = 0;  // assignments past capacity / all assignments
  double aux_loss = 0;          // the load-balancing loss (all MoE layers), mean per micro-batch
};

class CausalLm {
 public:
  virtual ~CausalLm() = default;
  CausalLm(const CausalLm&) = delete;
  CausalLm& operator=(const CausalLm&) = delete;

  // The family's initialisation, a pure function of the seed.
  virtual void InitWeights(uint64_t seed) = 0;

  // Runs the model on `batch` sequences of seq_len tokens; returns the mean cross-entropy.
  // `training` false (evaluation) leaves the FP8 delayed-scaling state untouched.
  virtual double Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training = true) = 0;
  // Accumulates d(loss_scale · loss)/dθ of the last Forward into grads(). Then (fp8-tensorwise)
  // the amaxes of the step's casts go into the delayed-scaling histories, unless deferred.
  virtual void Backward(float loss_scale) = 0;

  // Mixture of experts (all no-ops for a dense model). AuxLoss: the load-balancing loss of the
  // last Forward, whose gradient Backward adds (Forward returns the cross-entropy alone).
  virtual double AuxLoss() const { return 0; }
  // What the training Forwards since the last call routed, as sums (empty: nothing to route).
  // The backend sums them over the ranks and hands them to FinishRoutingStep after the optimizer
  // step, which moves the sigmoid-bias router's bias and sets routing_stats().
  virtual std::vector<float> TakeRoutingCounts() { return {}; }
  virtual void FinishRoutingStep(const std::vector<float>& /*summed_counts*/) {}
  const MoeRoutingStats& routing_stats() const { return routing_stats_; }

  // Data parallelism (fp8-tensorwise): with updates deferred, Backward leaves the amaxes waiting;
  // the trainer max-reduces PendingAmaxes() over the ranks and hands the result to
  // ApplyPendingAmaxes, so every rank keeps the same history (and rank 0's checkpoint is
  // everyone's). Other recipes have no amaxes (empty vector).
  void DeferScalingUpdates(bool defer) { defer_scaling_updates_ = defer; }
  std::vector<float> PendingAmaxes() const;
  void ApplyPendingAmaxes(const std::vector<float>& reduced);
  void ZeroGrad();

  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  std::vector<float>& grads() { return grads_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ModelConfig& config() const { return cfg_; }
  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }

  // Calibration's view into Forward: called with each linear layer's input x [m, k] before the
  // recipe casts it (layer: one of LinearLayerNames()). Returning true means the hook wrote the
  // GEMM operand into `operand` [m, k] itself (how calibration simulates static FP8 input
  // scales); false keeps the recipe's cast. The trainer sets none.
  using LinearInputHook =
      std::function<bool(const std::string& layer, const float* x, int64_t m, int64_t k, float* operand)>;
  void SetLinearInputHook(LinearInputHook hook) { input_hook_ = std::move(hook); }
  // With `keep` set, Forward copies the logits [batch·seq_len, vocab] into logits() before the
  // loss turns them into probabilities (`fp8-worker evaluate --tokens`, tests).
  void KeepLogits(bool keep) { keep_logits_ = keep; }
  const std::vector<float>& logits() const { return logits_; }
  // Names of the linear layers in forward order (the prefixes of their .weight / .bias).
  std::vector<std::string> LinearLayerNames() const;

  // The FP8 casts of every training linear layer since the last call (progress events).
  Fp8CastStats TakeFp8CastStats();

  // Delayed-scaling state (fp8-tensorwise) for trainer_state.json: one entry per linear layer,
  // keyed by its name ("h.0.attn.c_attn", "model.layers.0.self_attn.q_proj"). Empty for the
  // other recipes.
  nlohmann::json PrecisionState() const;
  Status RestorePrecisionState(const nlohmann::json& state);

 protected:
  CausalLm(const ModelConfig& cfg, const PrecisionConfig& precision, std::vector<ParamTensor> layout);

  // One linear layer y = x·Wᵀ (+ b) whose GEMM operands the recipe makes.
  struct Linear {
    std::string name;           // the weight's name without ".weight"
    int64_t w = 0, b = -1;      // offsets of weight [out, in] and bias [out] (-1: no bias)
    int64_t in = 0, out = 0;
    LinearPrecision precision;
    std::vector<float> xq, wq;  // the forward GEMM's operands, kept for backward
  };
  // Offset of the tensor called `name` (it must exist).
  int64_t OffsetOf(const std::string& name) const;
  // Sets up `l` over the tensors "<name>.weight" (and "<name>.bias" when `bias`) and registers
  // it: PendingAmaxes, the scaling state and LinearLayerNames go over the layers in the order
  // they were registered. `l` must not move afterwards.
  void RegisterLinear(Linear& l, const std::string& name, int64_t in, int64_t out, bool bias);
  // Sizes the linear layers' operand buffers for `rows` input rows.
  void ResizeLinears(int64_t rows);
  void LinearFwd(Linear& l, const float* x, int64_t m, float* y, bool training);
  // dx (overwritten; null skips it), and dW (and db) accumulated into grads().
  void LinearBwd(Linear& l, const float* dy, const float* x, int64_t m, float* dx);
  // Feeds the amaxes of the step into the histories unless deferred (end of Backward).
  void FinishBackward();
  // The logits [n, vocab] in `logits` go to logits() when asked for; returns the mean loss and
  // leaves the probabilities in `logits`.
  double LossFromLogits(float* logits, const int32_t* targets, int64_t n);

  ModelConfig cfg_;
  PrecisionConfig precision_;
  std::vector<ParamTensor> tensors_;
  std::vector<float> params_, grads_;
  MoeRoutingStats routing_stats_;

 private:
  bool defer_scaling_updates_ = false;
  std::vector<Linear*> linears_;
  LinearInputHook input_hook_;
  bool keep_logits_ = false;
  std::vector<float> logits_;
  std::vector<float> gq_, gw_, xw_;  // LinearBwd's scratch
};

// The family ModelConfig::architecture names, initialised to zeros (call InitWeights or load).
std::unique_ptr<CausalLm> MakeCausalLm(const ModelConfig& cfg, const PrecisionConfig& precision);
// Its parameter layout, without allocating the model.
std::vector<ParamTensor> CausalLmParamLayout(const ModelConfig& cfg);

}  // namespace fp8::train
