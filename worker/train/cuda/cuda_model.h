// SPDX-License-Identifier: Apache-2.0
// GPT-2 style decoder on one GPU: the same architecture, parameter names and flat layout as
// worker/train/model.h (so checkpoints are interchangeable), forward and backward on the
// device. Linear layers follow the recipe (cuda_linear.h); embeddings, LayerNorm statistics,
// softmax and the residual stream stay FP32 or BF16 as noted:
//   residual stream, LayerNorm mean/rstd, master weights, gradients, losses: FP32
//   GEMM operands and stored activations (LN outputs, qkv, attention probabilities, MLP): BF16
//   tied head logits: BF16 GEMM (all recipes), cross-entropy in FP32 arithmetic.
// Attention is fused (sm90_flash_attention.h: q/k/v read straight from the qkv GEMM output, only
// the per-row logsumexp kept for backward) for head dims 32/64/128; other head dims fall back to
// the plain formulation (batched cuBLAS GEMMs, a causal softmax kernel, T×T probabilities).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
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
#include "worker/train/model.h"
#include "worker/train/precision.h"
#include "worker/train/spec.h"

namespace fp8::train::cuda {

class CudaGptModel final : public CudaCausalLm {
 public:
  // `tensors`: the layout of GptModel (names, offsets); `max_batch` sizes the activations.
  static StatusOr<std::unique_ptr<CudaGptModel>> Create(const ModelConfig& cfg,
                                                        const PrecisionConfig& precision,
                                                        const std::vector<ParamTensor>& tensors,
                                                        int max_batch, cudaStream_t stream,
                                                        const CudaModelOptions& options = {});
  ~CudaGptModel() override;

  // Host ↔ device copies of the flat FP32 buffers (synchronous).
  Status UploadParams(const float* host) override;
  Status DownloadParams(float* host) const override;
  Status DownloadGrads(float* host) const override;

  // Mean cross-entropy of `batch` sequences (host token arrays). When `training`, also
  // writes d(loss_scale · loss)/dlogits for Backward and advances the FP8 scaling state.
  StatusOr<double> Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training,
                           float loss_scale) override;
  // Accumulates the gradients of the last training Forward into grads(), then (fp8-tensorwise)
  // feeds the step's amaxes into the scaling histories, reduced over the ranks first when an
  // amax reduction is set.
  Status Backward() override;
  // grads() = 0, as the next Backward sees it: the linear weights' and wte's gradients are not
  // cleared but overwritten by the first Backward's GEMMs (beta 0), saving a write and a read of
  // 4 bytes per weight (CudaModelOptions::overwrite_grads). Read grads() only after a Backward.
  Status ZeroGrad() override;

  // One AdamW step over every parameter (m, v: FP32 moments laid out like params(); decay per
  // ParamTensor::weight_decay). Under bf16, fp32 and fp8-blockwise the step also writes the next
  // forward's GEMM operands of the linear weights and the tied wte from the updated values
  // (CudaLinear::OptimizerStep), so the forward does not read the FP32 weights again
  // (CudaModelOptions::fused_optimizer).
  Status OptimizerStep(const AdamWArgs& a, float* m, float* v) override;

  // The parameters, to write: the weight casts the model keeps are dropped (the next forward
  // casts again). Read-only users take DownloadParams.
  float* mutable_params() override;
  float* grads() override { return grads_.get(); }
  int64_t num_params() const override { return num_params_; }
  const std::vector<ParamTensor>& tensors() const override { return tensors_; }
  cudaStream_t stream() const override { return stream_; }

  // FP8 recipes: whether the training casts from now on are counted (the steps that report
  // progress); turning it on starts a new count. TakeFp8Stats waits for the stream and returns
  // the count (empty when none was collected; a failed copy surfaces at the next step), then
  // stops collecting.
  Status CollectFp8Stats(bool on) override;
  Fp8CastStats TakeFp8Stats() override;

  nlohmann::json PrecisionState() const override;
  Status RestorePrecisionState(const nlohmann::json& state) override;

  std::string EpilogueRefusals() const override { return epilogue_gemm_->Refusals(); }

 private:
  struct Block {
    int64_t ln1_w, ln1_b, ln2_w, ln2_b;
    std::unique_ptr<CudaLinear> qkv, proj, fc, fc_proj;
    DeviceBuffer<float> x_in, res_mid, ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
    DeviceBuffer<float> att_lse;  // flash: logsumexp per (b, h, t)
    DeviceBuffer<bf16> ln1_out, qkv_out, probs /* plain path only */, att_y, ln2_out, fc_out, gelu_out;
  };

  CudaGptModel() = default;
  Status Init(int max_batch);
  Status AttentionForward(Block& b, int batch);
  Status AttentionBackward(Block& b, int batch, const bf16* dy, bf16* dqkv);
  Status InitDecayMask();
  void InitZeroRanges();
  void InvalidateWeightCasts();
  int64_t WteNumel() const { return cfg_.vocab_size * cfg_.d_model; }
  int64_t OffsetOf(const CudaLinear* lin) const { return lin->weight() - params_.get(); }  // of its W in params()

  ModelConfig cfg_;
  PrecisionConfig precision_;
  std::vector<ParamTensor> tensors_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<kernels::cuda::Sm90CublasLtContext> lt_;
  std::unique_ptr<Bf16EpilogueGemm> epilogue_gemm_;
  std::unique_ptr<LinearWorkspace> ws_;

  int64_t num_params_ = 0;
  DeviceBuffer<float> params_, grads_;
  DeviceBuffer<bf16> wte_bf16_;
  bool wte_cast_current_ = false;  // wte_bf16_ holds wte (as CudaLinear's w_cast_current_)
  CudaModelOptions options_;
  bool fuse_optimizer_ = false;    // OptimizerStep writes the casts (options_.fused_optimizer, recipe permitting)
  // AdamWStep's mask: kAdamWDecay / kAdamWNoDecay per parameter, kAdamWSkip on the tensors whose
  // update OptimizerStep runs with their cast
  DeviceBuffer<uint8_t> decay_mask_;
  bool wte_decays_ = false;          // weight decay of the tensors OptimizerStep steps itself:
  std::vector<bool> linear_decays_;  // wte, and each linears_ entry's W
  // ZeroGrad clears these [offset, offset + n) ranges of grads(): all but the gradients the first
  // Backward overwrites; grads_fresh_: no Backward since ZeroGrad.
  std::vector<std::pair<int64_t, int64_t>> zero_ranges_;
  bool grads_fresh_ = false;
  bool overwrite_grads_ = true;  // options_.overwrite_grads
  int64_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  std::vector<Block> blocks_;
  std::vector<CudaLinear*> linears_;  // every block's qkv, proj, fc, fc_proj, in block order
  int max_batch_ = 0, batch_ = 0;
  int64_t vocab_ld_ = 0;  // logits row pitch: vocab rounded up to 8 (16-byte rows)
  bool flash_ = false;    // fused attention (head dim supported) instead of the plain path

  DeviceBuffer<int32_t> inputs_, targets_;
  TokenGroups token_groups_;  // the training batch's positions by token (wte gradient, no atomics)
  DeviceBuffer<float> res_final_, lnf_mean_, lnf_rstd_, losses_, scores_, col_scratch_;
  DeviceBuffer<bf16> lnf_out_, logits_;
  DeviceBuffer<float> att_delta_;  // flash backward: rowsum(dy∘y) per (b, h, t)
  // plain-path attention scratch: q, k, v, y in [B, H, T, hd]; backward reuses them for dq, dk,
  // dv, dy; scores_ and dp_ are [B·H, T, T]
  DeviceBuffer<bf16> q_, k_, v_, yh_, dq_, dk_, dv_, dp_;
  // backward scratch
  DeviceBuffer<float> dres_;
  DeviceBuffer<bf16> dy_c_, d_c_, d_4c_;
  DeviceBuffer<double> loss_sum_;
  DeviceBuffer<float> amax_slots_;  // fp8-tensorwise: 3 per linear layer (x, W, dy), one reduction
};

// Row-major BF16 GEMM through cuBLAS (cuBLASLt kernels underneath): C[M,N] = alpha·op(A)·op(B)
// + beta·C with FP32 accumulation; C is bf16 or fp32 (c_fp32).
Status GemmBf16(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta, void* c,
                int64_t ldc, bool c_fp32);
Status GemmBf16Batched(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                       float alpha, const bf16* a, int64_t lda, int64_t stride_a, const bf16* b,
                       int64_t ldb, int64_t stride_b, float beta, void* c, int64_t ldc,
                       int64_t stride_c, bool c_fp32, int64_t batch);

}  // namespace fp8::train::cuda
