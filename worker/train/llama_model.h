// The Llama family on the CPU (Llama 2/3, Mistral, Qwen2, Qwen3): token embedding, pre-RMSNorm
// blocks of causal grouped-query attention with rotary positions (rope_theta, optionally
// Llama-3's rescaling) and a SwiGLU MLP, final RMSNorm, then the head (lm_head, or tied to the
// embedding). Optional per config: biases on q/k/v (Qwen2), RMSNorm of every query and key head
// before the rotation (Qwen3). All seven linear layers of a block (q, k, v, o, gate, up, down)
// run through LinearPrecision, as GPT-2's four do; embeddings, norms, rotation, softmax and the
// head stay FP32, as in GptModel. Parameter names are transformers' LlamaForCausalLM names
// ("model.layers.0.self_attn.q_proj.weight"), weights [out, in] as nn.Linear stores them.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/train/causal_lm.h"
#include "worker/train/llama_layers.h"

namespace fp8::train {

std::vector<ParamTensor> LlamaParamLayout(const ModelConfig& cfg);

class LlamaModel final : public CausalLm {
 public:
  LlamaModel(const ModelConfig& cfg, const PrecisionConfig& precision);

  // N(0, 0.02) for every matrix, norm weights 1, biases 0 (transformers' Llama init). A pure
  // function of the seed.
  void InitWeights(uint64_t seed) override;
  double Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training = true) override;
  void Backward(float loss_scale) override;

 private:
  struct Block {
    int64_t norm1 = 0, norm2 = 0, q_norm = -1, k_norm = -1;  // offsets (-1: no q/k norm)
    Linear q, k, v, o, gate, up, down;
    // activations of the last Forward
    std::vector<float> x_in, ln1, rstd1, q_raw, q_rstd, k_raw, k_rstd, qr, kr, vv, att, att_y, res_mid, ln2,
        rstd2, g, u, act;
  };

  void Resize(int batch);

  int64_t embed_ = 0, norm_ = 0, head_ = 0;  // head_ == embed_ when tied
  int64_t q_width_ = 0, kv_width_ = 0;       // n_head·head_dim, n_kv_head·head_dim
  RopeTables rope_;
  std::vector<Block> blocks_;

  int batch_ = 0;
  std::vector<int32_t> inputs_, targets_;
  std::vector<float> res_final_, lnf_out_, lnf_rstd_, probs_;
  // scratch for backward
  std::vector<float> dres_, dc_, dc2_, dq_, dk_, dv_, dqw_, dwide_, dwide2_, dwide3_;
};

}  // namespace fp8::train
