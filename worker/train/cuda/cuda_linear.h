// SPDX-License-Identifier: Apache-2.0
// One linear layer y = x·Wᵀ + b on the GPU (docs/design.md §6), the device twin of
// LinearPrecision + LinearForward/LinearBackward:
//   bf16            x, W, dy in BF16, cuBLAS GEMMs, FP32 accumulation; dW accumulated in FP32
//   fp8-tensorwise  x, W: E4M3 / dy: E5M2, per-tensor scales from delayed scaling (amax history
//                   on the device), cuBLASLt FP8 GEMMs; the transposed operands of dgrad/wgrad
//                   are byte transposes of the same casts (same scales). A training cast
//                   records its amax in the layer's slots; the histories take them in only at
//                   ApplyScalingUpdates, after the model has reduced the slots over the ranks, so
//                   every rank keeps the same scaling state (Transformer Engine's amax reduction)
//   fp8-blockwise   x, dy: E4M3 1x128 tiles along the contraction dim, W: E4M3 128x128 blocks,
//                   cuBLASLt blockwise-scaled GEMMs (kernels/cuda). wgrad: dyᵀ 1x128 along M
//                   (the CPU's 128x1 of dy) × xᵀ in 128x128 blocks (cuBLASLt takes 128x128 for
//                   one operand; the CPU reference uses 128x1 for x there). Wᵀ and xᵀ come
//                   straight out of the cast kernels, written transposed: Wᵀ with W's cast, xᵀ
//                   with the forward's 1x128 cast of x (kept until backward, 1 byte per element).
//                   Or x comes cast already (Fp8BlockOperand: the Llama model's RMSNorm and SwiGLU
//                   write it, once for every layer that reads that input), and the layer keeps
//                   no xᵀ of its own.
// The bias stays FP32 and its gradient is an FP32 column sum of dy.
// Under bf16 the bias add, bias + GELU and GELU backward ride in the GEMMs' cuBLASLt epilogues (bf16_epilogue_gemm.h); where cuBLASLt refuses one, and for the FP8
// recipes, they are separate passes (train_kernels.h); so they are without an epilogue GEMM
// (CudaModelOptions::fused_epilogues off: the test that both paths agree).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kernels/cuda/sm90_fp8_gemm_cublaslt.h"
#include "kernels/scaling.h"
#include "worker/train/cuda/bf16_epilogue_gemm.h"
#include "worker/train/cuda/device_buffer.h"
#include "worker/train/cuda/op_timer.h"
#include "worker/train/cuda/train_kernels.h"
#include "worker/train/spec.h"

namespace fp8::train::cuda {

// Scratch shared by every linear layer of a model (they run one at a time on one stream).
struct LinearWorkspace {
  static StatusOr<std::unique_ptr<LinearWorkspace>> Create(const PrecisionConfig& p, int64_t max_m,
                                                           int64_t max_in, int64_t max_out);
  DeviceBuffer<uint8_t> aq, aqt, bq, bqt;          // fp8 operands and their transposes (bq, bqt: tensorwise)
  DeviceBuffer<float> as, ast;                     // blockwise: the activation/gradient scales
  DeviceBuffer<float> col_scratch, amax, tmp_state;
  // FP8 wgrad adds into dW in place (cuBLASLt beta = 1). The FP32 dW scratch + Accumulate pass is
  // the fallback: allocated on first use, when cuBLASLt refuses beta for a GEMM.
  DeviceBuffer<float> dw;
  bool dw_in_place = true;
  int64_t dw_scratch_floats = 0;  // the largest weight: what the fallback allocates
  // FP8 recipes: the training casts' statistics and element count on report steps (collecting).
  DeviceBuffer<DeviceFp8CastStats> fp8_stats;
  bool collect_fp8_stats = false;
  int64_t fp8_stats_elements = 0;
};

class CudaLinear {
 public:
  CudaLinear(int64_t in, int64_t out, float* w, float* b, float* gw, float* gb,
             const PrecisionConfig& p, LinearWorkspace* ws, cublasHandle_t cublas,
             kernels::cuda::Sm90CublasLtContext* lt, Bf16EpilogueGemm* epilogue_gemm, cudaStream_t s);
  // Allocates the per-layer state (tensorwise: scaling histories and the stored x cast).
  // `amax_slots`: 3 device floats owned by the model (tensorwise: the amax of the step's x, W
  // and dy casts, in that order). `input_cast_outside` (fp8-blockwise): training takes its x
  // as an Fp8BlockOperand only, so no xᵀ cast is allocated here.
  Status Init(int64_t max_m, float* amax_slots, bool input_cast_outside = false);
  // Tensorwise: feeds the amaxes recorded since the last call into the histories (the scales
  // of the next casts). Other recipes: nothing to do.
  Status ApplyScalingUpdates();

  // y [m, out] (bf16) = x [m, in]·Wᵀ + b. `training` false leaves the scaling state untouched.
  Status Forward(const bf16* x, int64_t m, bf16* y, bool training);
  // y = x·Wᵀ without the bias: for a projection whose bias the caller adds in its residual add.
  Status ForwardNoBias(const bf16* x, int64_t m, bf16* y, bool training);
  // fp8-blockwise with x cast already: y = x·Wᵀ (+ b when the layer has one). x.qt/x.st must
  // hold this x until the Backward that takes the same operand.
  Status Forward(const Fp8BlockOperand& x, int64_t m, bf16* y, bool training);
  // pre = x·Wᵀ + b and y = gelu(pre), both bf16 [m, out]; the backward reads pre.
  Status ForwardGelu(const bf16* x, int64_t m, bf16* pre, bf16* y, bool training);
  // dx [m, in] = dy·W (overwritten; null: not wanted), dW += dyᵀ·x, and unless `bias_grad` is
  // false db += Σ dy. x is the forward input; the weights must not have changed since that
  // Forward (bf16 reuses its cast of W).
  Status Backward(const bf16* dy, const bf16* x, int64_t m, bf16* dx, bool bias_grad = true);
  // Backward of Forward(Fp8BlockOperand): x is that forward's operand.
  Status Backward(const bf16* dy, const Fp8BlockOperand& x, int64_t m, bf16* dx, bool bias_grad = true);
  // Backward of a layer whose input was gelu(pre): dpre = gelu'(pre) ∘ (dy·W), and the bias
  // gradient of the layer that produced pre, Σ dpre, added to `pre_bias_grad` (that layer's
  // Backward then runs with bias_grad = false). dW, db of this layer as in Backward.
  Status BackwardIntoGelu(const bf16* dy, const bf16* x, int64_t m, const bf16* pre, bf16* dpre, float* pre_bias_grad);

  // Whether OptimizerStep can update this layer's W (bf16, fp32 and fp8-blockwise: their cast of
  // W does not depend on state outside W; tensorwise's delayed scale does).
  bool FusesOptimizerStep() const;
  // AdamW on W (m, v: W's moments) that also writes the next forward's GEMM operands from the
  // updated W: its BF16 copy, or (fp8-blockwise) W and Wᵀ in 128x128 blocks. The forward then
  // skips its cast of W.
  Status OptimizerStep(const AdamWArgs& a, float* m, float* v, bool decay);
  // Whether the next Backward/BackwardIntoGelu writes dW instead of adding to it (the first
  // micro-batch after the model's ZeroGrad, which then leaves dW alone: 8 fewer bytes per weight
  // than zeroing it and accumulating into the zeros).
  void OverwriteWeightGradNext(bool overwrite) { overwrite_dw_ = overwrite; }
  // W changed outside OptimizerStep (an upload, another optimizer): the next forward casts it.
  void InvalidateWeightCast() { w_cast_current_ = false; }

  // bench_trainer_cuda --profile: marks each cast and GEMM as "<role> <op>" (null: no marks).
  void SetOpTimer(OpTimer* timer, const std::string& role);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  const float* weight() const { return w_; }
  const float* bias() const { return b_; }
  float* bias_grad() const { return gb_; }

  nlohmann::json State() const;
  Status Restore(const nlohmann::json& state);

 private:
  struct Scaling {
    DeviceBuffer<float> state;  // DelayedStateFloats(history_len)
    bool seeded = false;        // has an amax been recorded (host mirror of count > 0)
    bool pending = false;       // a training cast recorded an amax not yet in the history
    float* amax = nullptr;      // its slot
    kernels::Fp8Format format = kernels::Fp8Format::kE4M3;
  };
  // dW += (or, under overwrite_dw_, =) the FP8 wgrad GEMM `gemm(c, beta)` writes: in place, or
  // through ws_->dw (see above).
  template <typename Gemm>
  Status AccumulateWgrad(Gemm&& gemm);
  // Whether this layer may try `e` fused; RunFused: true when it ran, false when cuBLASLt
  // refused it (remembered: the layer takes the unfused path from then on).
  bool MayFuse(Bf16Epilogue e) const;
  StatusOr<bool> RunFused(const Bf16GemmArgs& g);
  // bf16: y = x·Wᵀ with epilogue `e` (bias, or bias + GELU with aux = pre-activation); false when
  // this layer does not fuse `e` and the caller runs the separate passes.
  StatusOr<bool> TryFusedForward(const bf16* x, int64_t m, bf16* y, Bf16Epilogue e, bf16* aux);
  // fp8-blockwise: the scale format of every cast (PrecisionConfig::ue8m0).
  kernels::ScaleFormat BlockScaleFormat() const { return p_.ue8m0 ? kernels::ScaleFormat::kUe8m0 : kernels::ScaleFormat::kFp32; }
  // bf16/fp32 and fp8-blockwise: casts W into its GEMM operands unless they already hold W.
  Status EnsureWeightCast();
  // fp8-blockwise: y = x·Wᵀ from x's 1x128 cast (scales MN-major), W's cast made if needed.
  Status GemmForwardBlockwise(const uint8_t* xq, const float* xs, int64_t m, bf16* y);
  // fp8-blockwise backward with xᵀ's 128x128 cast (xt, its scales xts) for wgrad.
  Status BackwardBlockwise(const bf16* dy, const uint8_t* xt, const float* xts, int64_t m, bf16* dx);
  // Counts a training cast's input when collecting (scale_inv: the cast's; null for blockwise).
  template <typename T>
  Status CountCast(const T* x, int64_t n, const float* scale_inv, kernels::Fp8Format fmt);
  template <typename T>
  Status CastTensorwise(Scaling& sc, const T* x, int64_t n, uint8_t* q, bool training, float* si_dst);

  int64_t in_, out_;
  float *w_, *b_, *gw_, *gb_;
  PrecisionConfig p_;
  LinearWorkspace* ws_;
  cublasHandle_t cublas_;
  kernels::cuda::Sm90CublasLtContext* lt_;
  Bf16EpilogueGemm* epi_;
  cudaStream_t s_;
  bool fuse_ = false;                // bf16 recipe and an epilogue GEMM
  bool refused_[4] = {};             // per epilogue: cuBLASLt had no algorithm
  Scaling x_sc_, w_sc_, dy_sc_;
  DeviceBuffer<uint8_t> xq_saved_;  // tensorwise: the forward cast of x, reused by wgrad
  DeviceBuffer<bf16> w_bf16_;       // bf16: the forward's cast of W, reused by dgrad (one cast per step)
  DeviceBuffer<bf16> b_bf16_;       // bf16: the bias for the fused epilogues
  // fp8: the forward's cast of W (and blockwise: its 128x128 scales), reused by dgrad, so W is
  // cast once per step (1 byte per weight of memory instead of a second read of the FP32 W)
  DeviceBuffer<uint8_t> wq_;
  DeviceBuffer<float> wq_scale_;
  DeviceBuffer<uint8_t> wqt_;        // blockwise: Wᵀ's 128x128 cast, written by the same pass as wq_
  DeviceBuffer<float> wqt_scale_;
  DeviceBuffer<uint8_t> xqt_;        // blockwise: the training forward's 128x128 cast of xᵀ, for wgrad
  DeviceBuffer<float> xqt_scale_;
  DeviceBuffer<float> si_x_, si_w_, si_dy_;  // scale_inv the casts of x, W, dy used (backward reads them)
  // w_bf16_ (bf16/fp32) or wq_/wqt_ (blockwise) hold the current W: set by a cast or by
  // OptimizerStep, cleared by InvalidateWeightCast (the model calls it whenever W may change
  // otherwise). Saves the cast for every micro-batch after the first, and all of it when the
  // optimizer writes the operands.
  bool w_cast_current_ = false;
  bool overwrite_dw_ = false;  // see OverwriteWeightGradNext
  DelayedScalingParams Params(kernels::Fp8Format fmt) const;
  enum Op { kXCast, kWCast, kFwdGemm, kDyCast, kDgrad, kWgrad, kOther, kNumOps };
  void Mark(Op op) {
    if (timer_) timer_->Mark(labels_[op], s_);
  }
  OpTimer* timer_ = nullptr;
  std::string labels_[kNumOps];
};

}  // namespace fp8::train::cuda
