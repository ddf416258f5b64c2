// SPDX-License-Identifier: Apache-2.0
// The Llama family on the CPU (Llama 2/3, Mistral, Qwen2, Qwen3): token embedding, pre-RMSNorm
// blocks of causal grouped-query attention with rotary positions (rope_theta, optionally
// Llama-3's rescaling) and a SwiGLU MLP, final RMSNorm, then the head (lm_head, or tied to the
// embedding). Optional per config: biases on q/k/v (Qwen2), RMSNorm of every query and key head
// before the rotation (Qwen3). All seven linear layers of a block (q, k, v, o, gate, up, down)
// run through LinearPrecision, as GPT-2's four do; embeddings, norms, rotation, softmax and the
// head stay FP32, as in GptModel. Parameter names are transformers' LlamaForCausalLM names
// ("model.layers.0.self_attn.q_proj.weight"), weights [out, in] as nn.Linear stores them.
//
// With model.moe, the layers from first_dense_layers on have a mixture-of-experts MLP instead
// (llama_moe.cc): the router mlp.gate.weight [E, C] (FP32, outside the recipe; sigmoid-bias adds
// DeepSeek-V3's mlp.gate.e_score_correction_bias [E], a parameter without gradient that the
// bias update moves), the experts mlp.experts.<e>.{gate,up,down}_proj (Qwen3-MoE's names, so a
// checkpoint stores every expert by its id) and the shared experts mlp.shared_experts.* (one
// SwiGLU MLP num_shared_experts × moe_intermediate_size wide, DeepSeek-V3's layout). With expert
// parallelism (SetExpertParallel, moe_dispatch.h) each rank computes its group's rows of its own
// experts and keeps every expert's parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/train/causal_lm.h"
#include "worker/train/llama_layers.h"
#include "worker/train/moe_dispatch.h"
#include "worker/train/moe_router.h"

namespace fp8::train {

std::vector<ParamTensor> LlamaParamLayout(const ModelConfig& cfg);
// The tensors of one MoE MLP, "<prefix>gate.weight" and on (llama_moe.cc).
void AddMoeParamTensors(const ModelConfig& cfg, const std::string& prefix, std::vector<ParamTensor>* layout);

class LlamaModel final : public CausalLm {
 public:
  LlamaModel(const ModelConfig& cfg, const PrecisionConfig& precision);

  // N(0, 0.02) for every matrix, norm weights 1, biases 0 (transformers' Llama init). A pure
  // function of the seed.
  void InitWeights(uint64_t seed) override;
  double Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training = true) override;
  void Backward(float loss_scale) override;
  double AuxLoss() const override { return aux_loss_; }
  std::vector<float> TakeRoutingCounts() override;
  void FinishRoutingStep(const std::vector<float>& counts) override;
  // Spreads the experts' compute over `ep`'s group (degree > 1; checked by CheckExpertParallel).
  // `ep` outlives the model's steps; an exchange that fails lands in ep->status.
  void SetExpertParallel(moe::ExpertParallel* ep);

 private:
  struct Expert {
    Linear gate, up, down;
  };
  struct MoeMlp {
    int64_t router = 0, bias = -1;  // offsets of mlp.gate.weight and (sigmoid-bias) its bias
    std::vector<Expert> experts;    // sized before the linears register: they must not move
    std::vector<Expert> shared;     // none, or one of num_shared_experts × moe_intermediate_size
    // the last Forward: router logits [n, E], the routing, the permuted rows' input [rows, C],
    // gate/up/activation [rows, I] and expert output [rows, C]; the shared expert's [n, Is]
    std::vector<float> logits;
    moe::Routing routing;
    moe::Dispatch dispatch;
    std::vector<float> xp, g, u, act, out, sg, su, sact;
    // expert parallelism: the last Forward's exchange, the rows this rank computed for its group
    // (input [received, C], gate/up/activation [received, I], output [received, C]), each
    // (member, local expert, linear)'s forward operand for backward, and the members' expert
    // gradients passing through [G, L, expert size]
    moe::RowExchange exchange;
    std::vector<float> xr, gr, ur, actr, outr, dr, dxr, member_grads;
    std::vector<std::vector<float>> kept_xq;
  };
  struct Block {
    int64_t norm1 = 0, norm2 = 0, q_norm = -1, k_norm = -1;  // offsets (-1: no q/k norm)
    Linear q, k, v, o, gate, up, down;
    // activations of the last Forward
    std::vector<float> x_in, ln1, rstd1, q_raw, q_rstd, k_raw, k_rstd, qr, kr, vv, att, att_y, res_mid, ln2,
        rstd2, g, u, act;
    std::unique_ptr<MoeMlp> moe;  // null: the dense MLP (gate, up, down above)
  };

  // llama_moe.cc: the MoE MLP of a block on x [n, C] → y [n, C] (overwritten); backward from
  // dy, overwriting dx [n, C]. Forward adds the layer's aux loss to aux_loss_ and, training,
  // its routing to the step's counts.
  void RegisterMoe(MoeMlp& m, const std::string& prefix);
  void MoeForward(MoeMlp& m, int sparse_index, const float* x, int64_t n, bool training, float* y);
  void MoeBackward(MoeMlp& m, const float* dy, const float* x, int64_t n, float loss_scale, float* dx);
  void SwiGluMlpForward(Expert& e, const float* x, int64_t m, int64_t width, bool training, float* g, float* u,
                        float* act, float* y);
  void SwiGluMlpBackward(Expert& e, const float* dy, const float* x, const float* g, const float* u,
                         const float* act, int64_t m, int64_t width, float* dx);
  // The routed experts on the permuted rows m.xp → m.out, and back from moe_dout_ → moe_dxp_:
  // here, or spread over the expert-parallel group.
  void ExpertsForward(MoeMlp& m, bool training);
  void ExpertsBackward(MoeMlp& m);
  void SpreadExpertsForward(MoeMlp& m, bool training);
  void SpreadExpertsBackward(MoeMlp& m);

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
  // mixture of experts: the last Forward's aux loss; the routing counts of the step so far
  // (TakeRoutingCounts' layout); backward scratch
  double aux_loss_ = 0;
  int sparse_layers_ = 0;
  std::vector<float> routing_counts_;
  std::vector<float> moe_dout_, moe_dxp_, moe_dweight_, moe_dlogits_, moe_scratch_;
  moe::ExpertParallel* ep_ = nullptr;  // null: every expert here
};

}  // namespace fp8::train
