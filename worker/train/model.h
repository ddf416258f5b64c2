// SPDX-License-Identifier: Apache-2.0
// GPT-2 style decoder on the CPU: token + position embeddings, pre-LayerNorm blocks (causal
// self-attention, GELU MLP), final LayerNorm, head tied to the token embedding. The four linear
// layers of each block run through LinearPrecision (the recipe); embeddings, norms, softmax and
// the head stay FP32. Parameter names are GPT2Model's ("h.0.attn.c_attn.weight").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/causal_lm.h"
#include "worker/train/precision.h"
#include "worker/train/spec.h"

namespace fp8::train {

// The parameter layout (names, shapes, offsets, decay flags) of GptModel and CudaGptModel, also
// without allocating a host model: for benchmarks of models too large to mirror on the host.
std::vector<ParamTensor> GptParamLayout(const ModelConfig& cfg);

class GptModel final : public CausalLm {
 public:
  GptModel(const ModelConfig& cfg, const PrecisionConfig& precision);

  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2·n_layer)),
  // LayerNorm weight 1, biases 0. A pure function of the seed.
  void InitWeights(uint64_t seed) override;
  double Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training = true) override;
  void Backward(float loss_scale) override;

 private:
  struct Block {
    int64_t ln1_w, ln1_b, ln2_w, ln2_b;
    Linear qkv, proj, fc, fc_proj;
    // activations of the last Forward
    std::vector<float> x_in, ln1_out, ln1_mean, ln1_rstd, qkv_out, att, att_y, res_mid, ln2_out,
        ln2_mean, ln2_rstd, fc_out, gelu_out;
  };

  void Resize(int batch);

  int64_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  std::vector<Block> blocks_;

  int batch_ = 0;
  std::vector<int32_t> inputs_, targets_;
  std::vector<float> res_final_, lnf_out_, lnf_mean_, lnf_rstd_, probs_;
  // scratch for backward
  std::vector<float> dres_, dtmp_, dbig_, dbig2_;
};

// GPT-2's FP8 scaling state (fp8-tensorwise), the same on both backends: one entry
// "h.<layer>.<name>" per linear layer (the layer's name), in block order (qkv, proj, fc, fc_proj).
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
