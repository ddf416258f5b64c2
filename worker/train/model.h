// GPT-2 style decoder on the CPU: token + position embeddings, pre-LayerNorm blocks (causal
// self-attention, GELU MLP), final LayerNorm, head tied to the token embedding. The four linear
// layers of each block run through LinearPrecision (the recipe); embeddings, norms, softmax and
// the head stay FP32. Parameters and gradients each live in one flat FP32 buffer, so the
// optimizer, the all-reduce and the checkpoint see a single array.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/precision.h"
#include "worker/train/spec.h"

namespace fp8::train {

struct ParamTensor {
  std::string name;             // Hugging Face GPT-2 names: "h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;
  int64_t offset = 0;           // into params()/grads()
  int64_t numel = 0;
  bool weight_decay = false;    // 2-D tensors only, as in GPT-2/llm.c
};

// The parameter layout (names, shapes, offsets, decay flags) of GptModel and CudaGptModel, also
// without allocating a host model: for benchmarks of models too large to mirror on the host.
std::vector<ParamTensor> GptParamLayout(const ModelConfig& cfg);

class GptModel {
 public:
  GptModel(const ModelConfig& cfg, const PrecisionConfig& precision);

  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2·n_layer)),
  // LayerNorm weight 1, biases 0. A pure function of the seed.
  void InitWeights(uint64_t seed);

  // Runs the model on `batch` sequences of seq_len tokens; returns the mean cross-entropy.
  // `training` false (evaluation) leaves the FP8 delayed-scaling state untouched.
  double Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training = true);
  // Accumulates d(loss_scale · loss)/dθ of the last Forward into grads(). Then (fp8-tensorwise)
  // the amaxes of the step's casts go into the delayed-scaling histories, unless deferred.
  void Backward(float loss_scale);

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
  // recipe casts it (layer = "h.<i>.attn.c_attn" | "attn.c_proj" | "mlp.c_fc" | "mlp.c_proj").
  // Returning true means the hook wrote the GEMM operand into `operand` [m, k] itself (how
  // calibration simulates static FP8 input scales); false keeps the recipe's cast. The trainer
  // sets none.
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

  // Delayed-scaling state of every linear layer (fp8-tensorwise), for trainer_state.json.
  nlohmann::json PrecisionState() const;
  Status RestorePrecisionState(const nlohmann::json& state);

 private:
  bool defer_scaling_updates_ = false;
  struct Linear {
    std::string name;      // "h.<i>.attn.c_attn", ...
    int64_t w = 0, b = 0;  // offsets of weight [out, in] and bias [out]
    int64_t in = 0, out = 0;
    LinearPrecision precision;
    std::vector<float> xq, wq;  // the forward GEMM's operands, kept for backward
  };
  struct Block {
    int64_t ln1_w, ln1_b, ln2_w, ln2_b;
    Linear qkv, proj, fc, fc_proj;
    // activations of the last Forward
    std::vector<float> x_in, ln1_out, ln1_mean, ln1_rstd, qkv_out, att, att_y, res_mid, ln2_out,
        ln2_mean, ln2_rstd, fc_out, gelu_out;
  };

  void Resize(int batch);
  void LinearFwd(Linear& l, const float* x, int64_t m, float* y, bool training);
  void LinearBwd(Linear& l, const float* dy, const float* x, int64_t m, float* dx);
  // The k-th linear layer's precision in block `layer` (order of kLinearStateNames).
  template <typename Self>
  static auto& PrecisionOf(Self& self, int64_t layer, int k) {
    auto& b = self.blocks_[static_cast<size_t>(layer)];
    return (k == 0 ? b.qkv : k == 1 ? b.proj : k == 2 ? b.fc : b.fc_proj).precision;
  }

  ModelConfig cfg_;
  PrecisionConfig precision_;
  std::vector<ParamTensor> tensors_;
  std::vector<float> params_, grads_;
  int64_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  std::vector<Block> blocks_;
  LinearInputHook input_hook_;
  bool keep_logits_ = false;
  std::vector<float> logits_;

  int batch_ = 0;
  std::vector<int32_t> inputs_, targets_;
  std::vector<float> res_final_, lnf_out_, lnf_mean_, lnf_rstd_, probs_;
  // scratch for backward
  std::vector<float> dres_, dtmp_, dbig_, dbig2_, gq_, gw_, xw_;
};

// The checkpoint's FP8 scaling state (fp8-tensorwise), the same on both backends: one entry
// "h.<layer>.<name>" per linear layer, names in block order (qkv, proj, fc, fc_proj).
// state_of(layer, k) and restore(layer, k, json) reach layer `layer`'s k-th linear.
inline constexpr const char* kLinearStateNames[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
template <typename StateOf>
nlohmann::json LinearStates(int64_t n_layer, StateOf state_of) {
  nlohmann::json out = nlohmann::json::object();
  for (int64_t l = 0; l < n_layer; ++l)
    for (int k = 0; k < 4; ++k) out["h." + std::to_string(l) + "." + kLinearStateNames[k]] = state_of(l, k);
  return out;
}
template <typename Restore>
Status RestoreLinearStates(const nlohmann::json& state, int64_t n_layer, Restore restore) {
  for (int64_t l = 0; l < n_layer; ++l)
    for (int k = 0; k < 4; ++k) {
      const std::string key = "h." + std::to_string(l) + "." + kLinearStateNames[k];
      if (!state.contains(key)) return DataLossError("fp8 scaling state lacks " + key);
      FP8_RETURN_IF_ERROR(restore(l, k, state[key]));
    }
  return OkStatus();
}

}  // namespace fp8::train
