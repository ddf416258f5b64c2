// SPDX-License-Identifier: Apache-2.0
// The Llama family (Llama 2/3, Mistral, Qwen2, Qwen3) on one GPU: the same architecture,
// parameter names and flat layout as worker/train/llama_model.h (so checkpoints, export and the
// CPU model are interchangeable), forward and backward on the device. Per block:
//   RMSNorm → q, k, v projections (three CudaLinear layers, each with its own recipe state, as
//   the CPU's LinearPrecision; biases under attention_bias) → per-head RMSNorm of q and k
//   (qk_norm) → RoPE on q and k → grouped-query flash attention → o_proj → residual add +
//   RMSNorm → gate and up projections → SwiGLU → down_proj → residual add (+ the next RMSNorm).
// Then the final RMSNorm and the head (lm_head, or the tied embedding): a BF16 GEMM under every
// recipe, as GPT-2's head, and the fused cross-entropy.
// Without QKV biases and under every recipe but fp8-tensorwise (whose layers each keep their own
// scaling state), q, k and v run as one linear layer over their contiguous weights [q + 2·kv, C]
// (gate and up likewise, [2·I, C]): one GEMM each way instead of three, and the input gradient
// summed inside the dgrad GEMM (FP32) rather than by bf16 passes; attention and SwiGLU read the
// merged outputs at their row pitch.
// Precision as CudaGptModel: FP32 residual stream, RMSNorm statistics, master weights,
// gradients and losses; BF16 GEMM operands and stored activations. Under fp8-blockwise the
// RMSNorms before q/k/v and gate/up and the SwiGLU write their output only as the FP8 operand
// of the layers that read it (Fp8BlockOperand: one cast for q, k and v together, kept for their
// weight gradients), never in bf16.
// Attention runs only fused (head dims 32, 64, 128); other head dims are refused at Create.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kernels/cuda/sm90_fp8_gemm_cublaslt.h"
#include "worker/train/cuda/cuda_causal_lm.h"
#include "worker/train/cuda/cuda_linear.h"
#include "worker/train/cuda/device_buffer.h"
#include "worker/train/cuda/token_groups.h"
#include "worker/train/precision.h"
#include "worker/train/spec.h"

namespace fp8::train::cuda {

class CudaLlamaModel final : public CudaCausalLm {
 public:
  // `tensors`: LlamaParamLayout(cfg) (names, offsets); `max_batch` sizes the activations.
  static StatusOr<std::unique_ptr<CudaLlamaModel>> Create(const ModelConfig& cfg, const PrecisionConfig& precision,
                                                          const std::vector<ParamTensor>& tensors, int max_batch,
                                                          cudaStream_t stream, const CudaModelOptions& options = {});
  ~CudaLlamaModel() override;

  Status UploadParams(const float* host) override;
  Status DownloadParams(float* host) const override;
  Status DownloadGrads(float* host) const override;
  StatusOr<double> Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training,
                           float loss_scale) override;
  Status Backward() override;
  Status ZeroGrad() override;
  // AdamW over every parameter; under bf16 and fp8-blockwise the linear layers' steps also write
  // their next GEMM operands, and the head's step its BF16 copy (CudaModelOptions::fused_optimizer).
  Status OptimizerStep(const AdamWArgs& a, float* m, float* v) override;

  float* mutable_params() override;
  float* grads() override { return grads_.get(); }
  int64_t num_params() const override { return num_params_; }
  const std::vector<ParamTensor>& tensors() const override { return tensors_; }
  cudaStream_t stream() const override { return stream_; }

  Status CollectFp8Stats(bool on) override;
  Fp8CastStats TakeFp8Stats() override;
  // Keyed by LlamaModel's layer names ("model.layers.0.self_attn.q_proj").
  nlohmann::json PrecisionState() const override;
  Status RestorePrecisionState(const nlohmann::json& state) override;
  std::string EpilogueRefusals() const override { return epilogue_gemm_->Refusals(); }
  void SetOpTimer(OpTimer* timer) override;

 private:
  // The seven linear layers of a block, in LlamaModel's registration order.
  static constexpr int kLinearsPerBlock = 7;
  struct Block {
    int64_t norm1 = 0, norm2 = 0, q_norm = -1, k_norm = -1;  // offsets (-1: no q/k norm)
    std::unique_ptr<CudaLinear> q, k, v, o, gate, up, down;  // merged_: q..up null
    std::unique_ptr<CudaLinear> qkv, gate_up;                // merged_ only
    DeviceBuffer<float> x_in, res_mid, rstd1, rstd2, q_rstd, k_rstd;
    DeviceBuffer<float> att_lse;  // logsumexp per (b, h, t)
    // q, k after the norm and the rotation (attention's inputs); q_in, k_in: the q/k norm's inputs.
    // ln1_out, ln2_out, act: not under precast_. merged_: qkv_out, qkv_in and gate_up_out hold
    // what q_out, k_out, v_out, q_in, k_in, gate_out and up_out hold otherwise.
    DeviceBuffer<bf16> ln1_out, q_out, k_out, v_out, q_in, k_in, att_y, ln2_out, gate_out, up_out, act;
    DeviceBuffer<bf16> qkv_out, qkv_in, gate_up_out;
    // Where the passes find those, at row pitch q_ld_ (q), kv_ld_ (k, v) and gu_ld_ (gate, up).
    bf16 *q_act = nullptr, *k_act = nullptr, *v_act = nullptr, *q_norm_in = nullptr, *k_norm_in = nullptr;
    bf16 *gate_act = nullptr, *up_act = nullptr;
    // precast_: the transposed halves of the ln1, ln2 and SwiGLU outputs' casts (the weight
    // gradients' operands), [width, n] bytes and their 128x128 scales.
    DeviceBuffer<uint8_t> ln1_qt, ln2_qt, act_qt;
    DeviceBuffer<float> ln1_st, ln2_st, act_st;
  };

  CudaLlamaModel() = default;
  Status Init(int max_batch);
  Status InitDecayMask();
  void InitZeroRanges();
  void InvalidateWeightCasts();
  int64_t HeadNumel() const { return static_cast<int64_t>(cfg_.vocab_size) * cfg_.d_model; }
  int64_t OffsetOf(const CudaLinear* lin) const { return lin->weight() - params_.get(); }  // of its W in params()
  // y = lin(x): with the bias when the layer has one; under precast_ from x's cast `op`.
  Status LinearForward(CudaLinear& lin, const bf16* x, const Fp8BlockOperand& op, int64_t n, bf16* y, bool training);
  Status LinearBackward(CudaLinear& lin, const bf16* dy, const bf16* x, const Fp8BlockOperand& op, int64_t n, bf16* dx, bool bias_grad);
  // x_out = res + y (y null: the norm of res itself, x_out unused), then RMSNorm with weight w
  // into ln (bf16) or, under precast_, into op; rstd kept for the backward.
  Status AddNorm(const float* res, const bf16* y, float* x_out, const float* w, float* rstd, bf16* ln, const Fp8BlockOperand& op,
                 bool training);
  // precast_: the cast operand of an activation whose transposed half is (qt, st); the 1x128
  // half is the shared op_q_/op_s_, read only by the forward GEMMs right after the cast.
  Fp8BlockOperand Operand(DeviceBuffer<uint8_t>& qt, DeviceBuffer<float>& st) const {
    return {op_q_.get(), op_s_.get(), qt.get(), st.get()};
  }
  // Where a training cast folds its amax when the statistics are collected (else null).
  unsigned int* CastAmax(bool training) const;
  void Mark(const char* label) {
    if (timer_) timer_->Mark(label, stream_);
  }
  Status BlockBackward(Block& b, int64_t li);
  // Whether every block's q/k/v and gate/up weights lie back to back in the layout.
  StatusOr<bool> WeightsMergeable(const std::map<std::string, int64_t>& offsets) const;

  ModelConfig cfg_;
  PrecisionConfig precision_;
  std::vector<ParamTensor> tensors_;
  CudaModelOptions options_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<kernels::cuda::Sm90CublasLtContext> lt_;
  std::unique_ptr<Bf16EpilogueGemm> epilogue_gemm_;
  std::unique_ptr<LinearWorkspace> ws_;

  int64_t num_params_ = 0;
  int64_t q_width_ = 0, kv_width_ = 0;       // n_head·head_dim, n_kv_head·head_dim
  DeviceBuffer<float> params_, grads_;
  int64_t embed_ = 0, norm_ = 0, head_ = 0;  // head_ == embed_ when tied
  DeviceBuffer<bf16> head_bf16_;              // the head's GEMM operand
  bool head_cast_current_ = false;            // head_bf16_ holds the head weight
  bool fuse_optimizer_ = false;
  DeviceBuffer<uint8_t> decay_mask_;          // AdamWStep's mask (kAdamWSkip: stepped with its cast)
  // The maximal runs (offset, length) of parameters the mask does not skip: the masked AdamW runs
  // over these only (fused: the norm weights between the linear layers), not over every byte of
  // the mask (3.7 ms of a llama-3b step for a few hundred thousand parameters).
  std::vector<std::pair<int64_t, int64_t>> adamw_runs_;
  bool head_decays_ = false;
  std::vector<bool> linear_decays_;
  std::vector<std::pair<int64_t, int64_t>> zero_ranges_;  // what ZeroGrad clears
  bool grads_fresh_ = false;
  std::vector<Block> blocks_;
  std::vector<CudaLinear*> linears_;  // every block's q, k, v, o, gate, up, down, in block order
  std::vector<std::string> linear_names_;  // their LlamaModel names
  int max_batch_ = 0, batch_ = 0;
  int64_t vocab_ld_ = 0;  // logits row pitch: vocab rounded up to 8 (16-byte rows)

  DeviceBuffer<float> rope_cos_, rope_sin_;  // [seq_len, head_dim/2]
  DeviceBuffer<int32_t> inputs_, targets_;
  TokenGroups token_groups_;  // the training batch's positions by token (embedding gradient, no atomics)
  DeviceBuffer<float> res_final_, lnf_rstd_, losses_, col_scratch_, att_delta_;
  DeviceBuffer<bf16> lnf_out_, logits_;
  // backward scratch: the residual gradient dres_ (fp32) and dy_c_ (bf16), d_c_, d_c2_ [n, C];
  // d_att_, dq_ [n, q width]; dk_, dv_ [n, kv width]; d_act_, d_gate_, d_up_ [n, intermediate]
  DeviceBuffer<float> dres_;
  DeviceBuffer<bf16> dy_c_, d_c_, d_c2_, d_att_, dq_, dk_, dv_, d_act_, d_gate_, d_up_;
  DeviceBuffer<double> loss_sum_;
  DeviceBuffer<float> amax_slots_;  // fp8-tensorwise: 3 per linear layer (x, W, dy), one reduction
  bool precast_ = false;            // fp8-blockwise: norms and SwiGLU write the casts (see the top)
  bool merged_ = false;             // q/k/v and gate/up as one layer each (see the top)
  int64_t q_ld_ = 0, kv_ld_ = 0, gu_ld_ = 0;
  // The backward's views of dq_, dk_, dv_, d_gate_, d_up_ (merged_: into dq_ and d_gate_, which
  // then hold [n, q + 2·kv] and [n, 2·I]), at the pitches above.
  bf16 *dq_v_ = nullptr, *dk_v_ = nullptr, *dv_v_ = nullptr, *dgate_v_ = nullptr, *dup_v_ = nullptr;
  DeviceBuffer<uint8_t> op_q_;      // precast_: the 1x128 half of the current cast, [n, widest]
  DeviceBuffer<float> op_s_;
  OpTimer* timer_ = nullptr;
};

}  // namespace fp8::train::cuda
