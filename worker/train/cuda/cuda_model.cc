// SPDX-License-Identifier: Apache-2.0
#include "worker/train/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/sm90_flash_attention.h"

namespace fp8::train::cuda {

namespace {
cublasOperation_t Op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

Status CublasStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return OkStatus();
  return InternalError(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(st)));
}
}  // namespace

// Row-major C = op(A)·op(B) is the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands.
Status GemmBf16(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta, void* c,
                int64_t ldc, bool c_fp32) {
  return CublasStatus(cublasGemmEx(h, Op(tb), Op(ta), static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                   CUDA_R_16BF, static_cast<int>(ldb), a, CUDA_R_16BF, static_cast<int>(lda), &beta, c,
                                   c_fp32 ? CUDA_R_32F : CUDA_R_16BF, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT),
                      "cublasGemmEx");
}

Status GemmBf16Batched(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                       float alpha, const bf16* a, int64_t lda, int64_t stride_a, const bf16* b,
                       int64_t ldb, int64_t stride_b, float beta, void* c, int64_t ldc,
                       int64_t stride_c, bool c_fp32, int64_t batch) {
  return CublasStatus(cublasGemmStridedBatchedEx(h, Op(tb), Op(ta), static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                                 &alpha, b, CUDA_R_16BF, static_cast<int>(ldb), stride_b, a, CUDA_R_16BF,
                                                 static_cast<int>(lda), stride_a, &beta, c, c_fp32 ? CUDA_R_32F : CUDA_R_16BF,
                                                 static_cast<int>(ldc), stride_c, static_cast<int>(batch), CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT),
                      "cublasGemmStridedBatchedEx");
}

StatusOr<std::unique_ptr<CudaGptModel>> CudaGptModel::Create(const ModelConfig& cfg,
                                                             const PrecisionConfig& precision,
                                                             const std::vector<ParamTensor>& tensors,
                                                             int max_batch, cudaStream_t stream,
                                                             const CudaModelOptions& options) {
  if (cfg.d_model % cfg.n_head != 0) return InvalidArgumentError("model.n_head: must divide d_model");
  const int64_t m = static_cast<int64_t>(max_batch) * cfg.seq_len;
  if (precision.recipe == Recipe::kFp8Tensorwise && (cfg.d_model % 16 != 0 || m % 16 != 0))
    return InvalidArgumentError("model.d_model: fp8-tensorwise on CUDA needs d_model and batch·seq_len multiples of 16");
  if (precision.recipe == Recipe::kFp8Blockwise && (cfg.d_model % 128 != 0 || m % 128 != 0))
    return InvalidArgumentError("model.d_model: fp8-blockwise on CUDA needs d_model and batch·seq_len multiples of 128");
  if (cfg.d_model % 8 != 0) return InvalidArgumentError("model.d_model: must be a multiple of 8 on CUDA");
  std::unique_ptr<CudaGptModel> model(new CudaGptModel());
  model->cfg_ = cfg;
  model->precision_ = precision;
  model->tensors_ = tensors;
  model->stream_ = stream;
  model->options_ = options;
  FP8_RETURN_IF_ERROR(model->Init(max_batch));
  return model;
}

CudaGptModel::~CudaGptModel() {
  blocks_.clear();
  if (cublas_) cublasDestroy(cublas_);
}

Status CudaGptModel::Init(int max_batch) {
  max_batch_ = max_batch;
  std::map<std::string, int64_t> off;
  for (const ParamTensor& t : tensors_) off[t.name] = t.offset;
  num_params_ = tensors_.back().offset + tensors_.back().numel;
  auto at = [&](const std::string& name) -> StatusOr<int64_t> {
    auto it = off.find(name);
    if (it == off.end()) return InvalidArgumentError("parameter layout lacks " + name);
    return it->second;
  };
  FP8_RETURN_IF_ERROR(CublasStatus(cublasCreate(&cublas_), "cublasCreate"));
  FP8_RETURN_IF_ERROR(CublasStatus(cublasSetStream(cublas_, stream_), "cublasSetStream"));
  FP8_ASSIGN_OR_RETURN(lt_, kernels::cuda::Sm90CublasLtContext::Create());
  epilogue_gemm_ = std::make_unique<Bf16EpilogueGemm>(lt_.get());

  const int64_t c = cfg_.d_model, t = cfg_.seq_len, v = cfg_.vocab_size, h = cfg_.n_head;
  const int64_t n = static_cast<int64_t>(max_batch) * t;
  flash_ = FlashAttentionSupportsHeadDim(c / h);
  const size_t plain_tt = flash_ ? 0 : static_cast<size_t>(max_batch * h * t * t);  // T×T only without flash
  FP8_RETURN_IF_ERROR(params_.Allocate(static_cast<size_t>(num_params_), "parameters"));
  FP8_RETURN_IF_ERROR(grads_.Allocate(static_cast<size_t>(num_params_), "gradients"));
  FP8_ASSIGN_OR_RETURN(wte_, at("wte.weight"));
  FP8_ASSIGN_OR_RETURN(wpe_, at("wpe.weight"));
  FP8_ASSIGN_OR_RETURN(lnf_w_, at("ln_f.weight"));
  FP8_ASSIGN_OR_RETURN(lnf_b_, at("ln_f.bias"));
  FP8_ASSIGN_OR_RETURN(ws_, LinearWorkspace::Create(precision_, n, 4 * c, 4 * c));
  float* p = params_.get();
  float* g = grads_.get();
  FP8_RETURN_IF_ERROR(amax_slots_.Allocate(static_cast<size_t>(12 * cfg_.n_layer), "amax slots"));
  blocks_.resize(static_cast<size_t>(cfg_.n_layer));
  for (int l = 0; l < cfg_.n_layer; ++l) {
    Block& b = blocks_[static_cast<size_t>(l)];
    const std::string pre = "h." + std::to_string(l) + ".";
    FP8_ASSIGN_OR_RETURN(b.ln1_w, at(pre + "ln_1.weight"));
    FP8_ASSIGN_OR_RETURN(b.ln1_b, at(pre + "ln_1.bias"));
    FP8_ASSIGN_OR_RETURN(b.ln2_w, at(pre + "ln_2.weight"));
    FP8_ASSIGN_OR_RETURN(b.ln2_b, at(pre + "ln_2.bias"));
    // Linear layer k of block l has amax slots 3·(4·l + k) .. +2.
    auto linear = [&](std::unique_ptr<CudaLinear>& lin, int k, const std::string& name, int64_t in, int64_t out) -> Status {
      FP8_ASSIGN_OR_RETURN(int64_t w, at(pre + name + ".weight"));
      FP8_ASSIGN_OR_RETURN(int64_t bb, at(pre + name + ".bias"));
      lin = std::make_unique<CudaLinear>(in, out, p + w, p + bb, g + w, g + bb, precision_, ws_.get(), cublas_, lt_.get(),
                                         options_.fused_epilogues ? epilogue_gemm_.get() : nullptr, stream_);
      return lin->Init(n, amax_slots_.get() + 3 * (4 * l + k));
    };
    FP8_RETURN_IF_ERROR(linear(b.qkv, 0, "attn.c_attn", c, 3 * c));
    FP8_RETURN_IF_ERROR(linear(b.proj, 1, "attn.c_proj", c, c));
    FP8_RETURN_IF_ERROR(linear(b.fc, 2, "mlp.c_fc", c, 4 * c));
    FP8_RETURN_IF_ERROR(linear(b.fc_proj, 3, "mlp.c_proj", 4 * c, c));
    const size_t nc = static_cast<size_t>(n * c);
    FP8_RETURN_IF_ERROR(b.x_in.Allocate(nc, "x_in"));
    FP8_RETURN_IF_ERROR(b.res_mid.Allocate(nc, "res_mid"));
    FP8_RETURN_IF_ERROR(b.ln1_mean.Allocate(static_cast<size_t>(n), "ln1 mean"));
    FP8_RETURN_IF_ERROR(b.ln1_rstd.Allocate(static_cast<size_t>(n), "ln1 rstd"));
    FP8_RETURN_IF_ERROR(b.ln2_mean.Allocate(static_cast<size_t>(n), "ln2 mean"));
    FP8_RETURN_IF_ERROR(b.ln2_rstd.Allocate(static_cast<size_t>(n), "ln2 rstd"));
    FP8_RETURN_IF_ERROR(b.ln1_out.Allocate(nc, "ln1 out"));
    FP8_RETURN_IF_ERROR(b.qkv_out.Allocate(3 * nc, "qkv"));
    FP8_RETURN_IF_ERROR(b.probs.Allocate(plain_tt, "attention probabilities"));
    if (flash_) FP8_RETURN_IF_ERROR(b.att_lse.Allocate(static_cast<size_t>(max_batch * h * t), "attention logsumexp"));
    FP8_RETURN_IF_ERROR(b.att_y.Allocate(nc, "attention out"));
    FP8_RETURN_IF_ERROR(b.ln2_out.Allocate(nc, "ln2 out"));
    FP8_RETURN_IF_ERROR(b.fc_out.Allocate(4 * nc, "fc out"));
    FP8_RETURN_IF_ERROR(b.gelu_out.Allocate(4 * nc, "gelu out"));
  }
  for (Block& b : blocks_)
    for (CudaLinear* lin : {b.qkv.get(), b.proj.get(), b.fc.get(), b.fc_proj.get()}) linears_.push_back(lin);
  vocab_ld_ = (v + 7) / 8 * 8;
  const size_t nc = static_cast<size_t>(n * c);
  FP8_RETURN_IF_ERROR(wte_bf16_.Allocate(static_cast<size_t>(v * c), "bf16 wte"));
  FP8_RETURN_IF_ERROR(inputs_.Allocate(static_cast<size_t>(n), "inputs"));
  FP8_RETURN_IF_ERROR(token_groups_.Allocate(n, c));
  FP8_RETURN_IF_ERROR(targets_.Allocate(static_cast<size_t>(n), "targets"));
  FP8_RETURN_IF_ERROR(res_final_.Allocate(nc, "res_final"));
  FP8_RETURN_IF_ERROR(lnf_mean_.Allocate(static_cast<size_t>(n), "lnf mean"));
  FP8_RETURN_IF_ERROR(lnf_rstd_.Allocate(static_cast<size_t>(n), "lnf rstd"));
  FP8_RETURN_IF_ERROR(losses_.Allocate(static_cast<size_t>(n), "losses"));
  FP8_RETURN_IF_ERROR(scores_.Allocate(plain_tt, "attention scores"));
  FP8_RETURN_IF_ERROR(col_scratch_.Allocate(static_cast<size_t>(ColumnScratchFloats(n, c)), "column scratch"));
  FP8_RETURN_IF_ERROR(lnf_out_.Allocate(nc, "lnf out"));
  FP8_RETURN_IF_ERROR(logits_.Allocate(static_cast<size_t>(n * vocab_ld_), "logits"));
  if (flash_) {
    FP8_RETURN_IF_ERROR(att_delta_.Allocate(static_cast<size_t>(FlashAttentionBackwardScratchFloats({max_batch, h, t, c / h})), "attention backward scratch"));
  } else {
    for (DeviceBuffer<bf16>* buf : {&q_, &k_, &v_, &yh_, &dq_, &dk_, &dv_})
      FP8_RETURN_IF_ERROR(buf->Allocate(nc, "attention heads"));
    FP8_RETURN_IF_ERROR(dp_.Allocate(plain_tt, "attention dprobs"));
  }
  FP8_RETURN_IF_ERROR(dres_.Allocate(nc, "residual gradient"));
  FP8_RETURN_IF_ERROR(dy_c_.Allocate(nc, "dy"));
  FP8_RETURN_IF_ERROR(d_c_.Allocate(nc, "d [n, C]"));
  FP8_RETURN_IF_ERROR(d_4c_.Allocate(4 * nc, "d [n, 4C]"));
  FP8_RETURN_IF_ERROR(loss_sum_.Allocate(1, "loss sum"));
  fuse_optimizer_ = options_.fused_optimizer;
  FP8_RETURN_IF_ERROR(InitDecayMask());
  InitZeroRanges();
  return ZeroGrad();
}

void CudaGptModel::InitZeroRanges() {
  std::vector<std::pair<int64_t, int64_t>> overwritten;  // [begin, end)
  overwrite_grads_ = options_.overwrite_grads;
  if (overwrite_grads_) {
    overwritten.emplace_back(wte_, wte_ + WteNumel());  // the head's wgrad
    for (CudaLinear* lin : linears_) {
      overwritten.emplace_back(OffsetOf(lin), OffsetOf(lin) + lin->in() * lin->out());
    }
    std::sort(overwritten.begin(), overwritten.end());
  }
  zero_ranges_.clear();
  int64_t at = 0;
  for (const auto& [begin, end] : overwritten) {
    if (begin > at) zero_ranges_.emplace_back(at, begin - at);
    at = std::max(at, end);
  }
  if (at < num_params_) zero_ranges_.emplace_back(at, num_params_ - at);
}

Status CudaGptModel::InitDecayMask() {
  std::vector<uint8_t> mask(static_cast<size_t>(num_params_), kAdamWNoDecay);
  auto fill = [&](int64_t offset, int64_t n, uint8_t value) { std::fill_n(mask.begin() + offset, n, value); };
  for (const ParamTensor& t : tensors_) fill(t.offset, t.numel, t.weight_decay ? kAdamWDecay : kAdamWNoDecay);
  // The fused steps take their tensor's flag as an argument: read once here, not every step.
  wte_decays_ = mask[static_cast<size_t>(wte_)] == kAdamWDecay;
  linear_decays_.clear();
  for (CudaLinear* lin : linears_) linear_decays_.push_back(mask[static_cast<size_t>(OffsetOf(lin))] == kAdamWDecay);
  if (fuse_optimizer_) {
    fill(wte_, WteNumel(), kAdamWSkip);
    for (CudaLinear* lin : linears_)
      if (lin->FusesOptimizerStep()) fill(OffsetOf(lin), lin->in() * lin->out(), kAdamWSkip);
  }
  FP8_RETURN_IF_ERROR(decay_mask_.Allocate(mask.size(), "AdamW decay mask"));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(decay_mask_.get(), mask.data(), mask.size(), cudaMemcpyHostToDevice));
  return OkStatus();
}

Status CudaGptModel::OptimizerStep(const AdamWArgs& a, float* m, float* v) {
  float* p = params_.get();
  if (fuse_optimizer_) {
    FP8_RETURN_IF_ERROR(AdamWStepTensor(p + wte_, grads_.get() + wte_, m + wte_, v + wte_, WteNumel(), wte_decays_, a, wte_bf16_.get(),
                                        stream_));
    wte_cast_current_ = true;
    for (size_t i = 0; i < linears_.size(); ++i) {
      CudaLinear* lin = linears_[i];
      if (!lin->FusesOptimizerStep()) continue;
      const int64_t off = OffsetOf(lin);
      FP8_RETURN_IF_ERROR(lin->OptimizerStep(a, m + off, v + off, linear_decays_[i]));
    }
  }
  // Everything else (all of it when not fused); the skipped tensors are the ones stepped above.
  FP8_RETURN_IF_ERROR(AdamWStep(p, grads_.get(), m, v, decay_mask_.get(), num_params_, a, stream_));
  // The weights this step changed without writing their casts.
  if (!fuse_optimizer_) wte_cast_current_ = false;
  for (CudaLinear* lin : linears_)
    if (!fuse_optimizer_ || !lin->FusesOptimizerStep()) lin->InvalidateWeightCast();
  return OkStatus();
}

void CudaGptModel::InvalidateWeightCasts() {
  wte_cast_current_ = false;
  for (CudaLinear* lin : linears_) lin->InvalidateWeightCast();
}

float* CudaGptModel::mutable_params() {
  InvalidateWeightCasts();
  return params_.get();
}

Status CudaGptModel::UploadParams(const float* host) {
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(params_.get(), host, sizeof(float) * num_params_, cudaMemcpyHostToDevice));
  InvalidateWeightCasts();
  return OkStatus();
}
Status CudaGptModel::DownloadParams(float* host) const {
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(host, params_.get(), sizeof(float) * num_params_, cudaMemcpyDeviceToHost));
  return OkStatus();
}
Status CudaGptModel::DownloadGrads(float* host) const {
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(host, grads_.get(), sizeof(float) * num_params_, cudaMemcpyDeviceToHost));
  return OkStatus();
}
Status CudaGptModel::ZeroGrad() {
  for (const auto& [offset, n] : zero_ranges_)
    FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(grads_.get() + offset, 0, sizeof(float) * n, stream_));
  grads_fresh_ = true;
  return OkStatus();
}

Status CudaGptModel::AttentionForward(Block& b, int batch) {
  const int64_t t = cfg_.seq_len, h = cfg_.n_head, hd = cfg_.d_model / cfg_.n_head, bh = batch * h;
  const int64_t c = cfg_.d_model;
  if (flash_) {  // q, k, v at columns 0, C, 2C of the qkv rows; y straight into [B, T, C]
    const bf16* qkv = b.qkv_out.get();
    return FlashAttentionForward({batch, h, t, hd}, qkv, qkv + c, qkv + 2 * c, RowMajorHeads(t, hd, 3 * c), b.att_y.get(),
                                 RowMajorHeads(t, hd, c), b.att_lse.get(), stream_);
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  FP8_RETURN_IF_ERROR(SplitHeads(b.qkv_out.get(), batch, t, h, hd, q_.get(), k_.get(), v_.get(), stream_));
  // S = scale·Q·Kᵀ (fp32), P = causal softmax(S), Y = P·V
  FP8_RETURN_IF_ERROR(GemmBf16Batched(cublas_, false, true, t, t, hd, scale, q_.get(), hd, t * hd, k_.get(), hd, t * hd, 0.0f,
                                      scores_.get(), t, t * t, true, bh));
  FP8_RETURN_IF_ERROR(CausalSoftmaxForward(scores_.get(), bh * t, t, b.probs.get(), stream_));
  FP8_RETURN_IF_ERROR(GemmBf16Batched(cublas_, false, false, t, hd, t, 1.0f, b.probs.get(), t, t * t, v_.get(), hd, t * hd, 0.0f,
                                      yh_.get(), hd, t * hd, false, bh));
  return HeadsToRows(yh_.get(), batch, t, h, hd, b.att_y.get(), stream_);
}

Status CudaGptModel::AttentionBackward(Block& b, int batch, const bf16* dy, bf16* dqkv) {
  const int64_t t = cfg_.seq_len, h = cfg_.n_head, hd = cfg_.d_model / cfg_.n_head, bh = batch * h;
  const int64_t c = cfg_.d_model;
  if (flash_) {
    const bf16* qkv = b.qkv_out.get();
    const HeadLayout ql = RowMajorHeads(t, hd, 3 * c);
    return FlashAttentionBackward({batch, h, t, hd}, qkv, qkv + c, qkv + 2 * c, ql, b.att_y.get(), dy, RowMajorHeads(t, hd, c),
                                  b.att_lse.get(), att_delta_.get(), dqkv, dqkv + c, dqkv + 2 * c, stream_);
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  FP8_RETURN_IF_ERROR(SplitHeads(b.qkv_out.get(), batch, t, h, hd, q_.get(), k_.get(), v_.get(), stream_));
  FP8_RETURN_IF_ERROR(RowsToHeads(dy, batch, t, h, hd, yh_.get(), stream_));
  // dP = dY·Vᵀ, dV = Pᵀ·dY, dS = softmax'(dP), dQ = scale·dS·K, dK = scale·dSᵀ·Q
  FP8_RETURN_IF_ERROR(GemmBf16Batched(cublas_, false, true, t, t, hd, 1.0f, yh_.get(), hd, t * hd, v_.get(), hd, t * hd, 0.0f,
                                      dp_.get(), t, t * t, false, bh));
  FP8_RETURN_IF_ERROR(GemmBf16Batched(cublas_, true, false, t, hd, t, 1.0f, b.probs.get(), t, t * t, yh_.get(), hd, t * hd, 0.0f,
                                      dv_.get(), hd, t * hd, false, bh));
  FP8_RETURN_IF_ERROR(CausalSoftmaxBackward(b.probs.get(), dp_.get(), bh * t, t, dp_.get(), stream_));
  FP8_RETURN_IF_ERROR(GemmBf16Batched(cublas_, false, false, t, hd, t, scale, dp_.get(), t, t * t, k_.get(), hd, t * hd, 0.0f,
                                      dq_.get(), hd, t * hd, false, bh));
  FP8_RETURN_IF_ERROR(GemmBf16Batched(cublas_, true, false, t, hd, t, scale, dp_.get(), t, t * t, q_.get(), hd, t * hd, 0.0f,
                                      dk_.get(), hd, t * hd, false, bh));
  return MergeQkv(dq_.get(), dk_.get(), dv_.get(), batch, t, h, hd, dqkv, stream_);
}

StatusOr<double> CudaGptModel::Forward(const int32_t* inputs, const int32_t* targets, int batch,
                                       bool training, float loss_scale) {
  if (batch < 1 || batch > max_batch_)
    return InvalidArgumentError("batch " + std::to_string(batch) + " outside [1, " + std::to_string(max_batch_) + "]");
  batch_ = batch;
  const int64_t t = cfg_.seq_len, c = cfg_.d_model, v = cfg_.vocab_size;
  const int64_t n = static_cast<int64_t>(batch) * t;
  // Token ids index wte and the logits' rows: checked here, on the host, never read out of bounds.
  FP8_RETURN_IF_ERROR(CheckTokens(targets, n, v, "targets"));
  if (training) {
    FP8_RETURN_IF_ERROR(token_groups_.Build(inputs, n, v, stream_));  // checks the inputs
  } else {
    FP8_RETURN_IF_ERROR(CheckTokens(inputs, n, v, "inputs"));
  }
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(inputs_.get(), inputs, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(targets_.get(), targets, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream_));
  const float* p = params_.get();
  float* x = blocks_.empty() ? res_final_.get() : blocks_[0].x_in.get();
  FP8_RETURN_IF_ERROR(EmbeddingForward(inputs_.get(), p + wte_, p + wpe_, n, t, c, x, stream_));
  if (blocks_.empty())
    FP8_RETURN_IF_ERROR(LayerNormForward(res_final_.get(), p + lnf_w_, p + lnf_b_, n, c, lnf_out_.get(), lnf_mean_.get(), lnf_rstd_.get(), stream_));
  else
    FP8_RETURN_IF_ERROR(LayerNormForward(x, p + blocks_[0].ln1_w, p + blocks_[0].ln1_b, n, c, blocks_[0].ln1_out.get(), blocks_[0].ln1_mean.get(),
                                         blocks_[0].ln1_rstd.get(), stream_));
  // Every residual add is followed by a LayerNorm (ln_2, the next block's ln_1, or ln_f): one
  // fused pass each, with the projection's bias.
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Block& b = blocks_[l];
    FP8_RETURN_IF_ERROR(b.qkv->Forward(b.ln1_out.get(), n, b.qkv_out.get(), training));
    FP8_RETURN_IF_ERROR(AttentionForward(b, batch));
    FP8_RETURN_IF_ERROR(b.proj->ForwardNoBias(b.att_y.get(), n, d_c_.get(), training));
    FP8_RETURN_IF_ERROR(ResidualAddLayerNorm(b.x_in.get(), d_c_.get(), b.proj->bias(), n, c, b.res_mid.get(), p + b.ln2_w, p + b.ln2_b,
                                             b.ln2_out.get(), b.ln2_mean.get(), b.ln2_rstd.get(), stream_));
    FP8_RETURN_IF_ERROR(b.fc->ForwardGelu(b.ln2_out.get(), n, b.fc_out.get(), b.gelu_out.get(), training));
    FP8_RETURN_IF_ERROR(b.fc_proj->ForwardNoBias(b.gelu_out.get(), n, d_c_.get(), training));
    if (l + 1 < blocks_.size()) {
      Block& nb = blocks_[l + 1];
      FP8_RETURN_IF_ERROR(ResidualAddLayerNorm(b.res_mid.get(), d_c_.get(), b.fc_proj->bias(), n, c, nb.x_in.get(), p + nb.ln1_w, p + nb.ln1_b,
                                               nb.ln1_out.get(), nb.ln1_mean.get(), nb.ln1_rstd.get(), stream_));
    } else {
      FP8_RETURN_IF_ERROR(ResidualAddLayerNorm(b.res_mid.get(), d_c_.get(), b.fc_proj->bias(), n, c, res_final_.get(), p + lnf_w_, p + lnf_b_,
                                               lnf_out_.get(), lnf_mean_.get(), lnf_rstd_.get(), stream_));
    }
  }
  if (!wte_cast_current_) FP8_RETURN_IF_ERROR(CastF32ToBf16(p + wte_, v * c, wte_bf16_.get(), stream_));
  wte_cast_current_ = true;
  FP8_RETURN_IF_ERROR(GemmBf16(cublas_, false, true, n, v, c, 1.0f, lnf_out_.get(), c, wte_bf16_.get(), c, 0.0f, logits_.get(), vocab_ld_, false));
  FP8_RETURN_IF_ERROR(CrossEntropy(logits_.get(), targets_.get(), n, v, vocab_ld_, loss_scale / static_cast<float>(n), training,
                                   losses_.get(), stream_));
  FP8_RETURN_IF_ERROR(SumToDouble(losses_.get(), n, loss_sum_.get(), stream_));
  double sum = 0;
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(&sum, loss_sum_.get(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  return sum / static_cast<double>(n);
}

Status CudaGptModel::Backward() {
  const int64_t t = cfg_.seq_len, c = cfg_.d_model, v = cfg_.vocab_size;
  const int64_t n = static_cast<int64_t>(batch_) * t;
  const float* p = params_.get();
  float* g = grads_.get();
  // The first Backward after ZeroGrad writes the gradients ZeroGrad left (zero_ranges_).
  const bool overwrite = grads_fresh_ && overwrite_grads_;
  for (CudaLinear* lin : linears_) lin->OverwriteWeightGradNext(overwrite);
  grads_fresh_ = false;
  // Tied head: dlnf = dlogits·wte, dwte += dlogitsᵀ·lnf (the first contribution to dwte; the
  // embedding's comes last).
  FP8_RETURN_IF_ERROR(GemmBf16(cublas_, false, false, n, c, v, 1.0f, logits_.get(), vocab_ld_, wte_bf16_.get(), c, 0.0f, d_c_.get(), c, false));
  FP8_RETURN_IF_ERROR(GemmBf16(cublas_, true, false, v, c, n, 1.0f, logits_.get(), vocab_ld_, lnf_out_.get(), c, overwrite ? 0.0f : 1.0f,
                               g + wte_, c, true));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(dres_.get(), 0, sizeof(float) * n * c, stream_));
  // Each LayerNorm backward also writes the residual gradient in bf16 (dy_c_): the operand of
  // the next linear layer's backward.
  FP8_RETURN_IF_ERROR(LayerNormBackward(d_c_.get(), res_final_.get(), p + lnf_w_, lnf_mean_.get(), lnf_rstd_.get(), n, c, dres_.get(),
                                        dy_c_.get(), g + lnf_w_, g + lnf_b_, col_scratch_.get(), stream_));
  for (size_t li = blocks_.size(); li-- > 0;) {
    Block& b = blocks_[li];
    FP8_RETURN_IF_ERROR(b.fc_proj->BackwardIntoGelu(dy_c_.get(), b.gelu_out.get(), n, b.fc_out.get(), d_4c_.get(), b.fc->bias_grad()));
    FP8_RETURN_IF_ERROR(b.fc->Backward(d_4c_.get(), b.ln2_out.get(), n, d_c_.get(), /*bias_grad=*/false));
    FP8_RETURN_IF_ERROR(LayerNormBackward(d_c_.get(), b.res_mid.get(), p + b.ln2_w, b.ln2_mean.get(), b.ln2_rstd.get(), n, c, dres_.get(),
                                          dy_c_.get(), g + b.ln2_w, g + b.ln2_b, col_scratch_.get(), stream_));
    FP8_RETURN_IF_ERROR(b.proj->Backward(dy_c_.get(), b.att_y.get(), n, d_c_.get()));
    FP8_RETURN_IF_ERROR(AttentionBackward(b, batch_, d_c_.get(), d_4c_.get()));
    FP8_RETURN_IF_ERROR(b.qkv->Backward(d_4c_.get(), b.ln1_out.get(), n, d_c_.get()));
    FP8_RETURN_IF_ERROR(LayerNormBackward(d_c_.get(), b.x_in.get(), p + b.ln1_w, b.ln1_mean.get(), b.ln1_rstd.get(), n, c, dres_.get(),
                                          li > 0 ? dy_c_.get() : nullptr, g + b.ln1_w, g + b.ln1_b, col_scratch_.get(), stream_));
  }
  FP8_RETURN_IF_ERROR(token_groups_.AccumulateWteGrad(dres_.get(), g + wte_, stream_));
  FP8_RETURN_IF_ERROR(EmbeddingWpeBackward(dres_.get(), n, t, c, g + wpe_, stream_));
  if (precision_.recipe != Recipe::kFp8Tensorwise) return OkStatus();
  if (amax_reduce_) FP8_RETURN_IF_ERROR(amax_reduce_(amax_slots_.get(), static_cast<size_t>(12 * cfg_.n_layer), stream_));
  for (CudaLinear* lin : linears_) FP8_RETURN_IF_ERROR(lin->ApplyScalingUpdates());
  return OkStatus();
}

Status CudaGptModel::CollectFp8Stats(bool on) {
  ws_->collect_fp8_stats = on && ws_->fp8_stats.get() != nullptr;  // allocated for the FP8 recipes only
  ws_->fp8_stats_elements = 0;
  if (ws_->collect_fp8_stats) FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(ws_->fp8_stats.get(), 0, sizeof(DeviceFp8CastStats), stream_));
  return OkStatus();
}

Fp8CastStats CudaGptModel::TakeFp8Stats() {
  DeviceFp8CastStats d{};
  const bool collected = ws_->collect_fp8_stats && ws_->fp8_stats_elements > 0;
  ws_->collect_fp8_stats = false;
  if (collected) cudaMemcpyAsync(&d, ws_->fp8_stats.get(), sizeof(d), cudaMemcpyDeviceToHost, stream_);
  if (cudaStreamSynchronize(stream_) != cudaSuccess || !collected) return {};
  return {d.amax, static_cast<int64_t>(d.saturated), ws_->fp8_stats_elements};
}

nlohmann::json CudaGptModel::PrecisionState() const {
  if (precision_.recipe != Recipe::kFp8Tensorwise) return nlohmann::json::object();
  cudaStreamSynchronize(stream_);
  return LinearStates(cfg_.n_layer, [&](int64_t l, int k) { return linears_[static_cast<size_t>(4 * l + k)]->State(); });
}

Status CudaGptModel::RestorePrecisionState(const nlohmann::json& state) {
  if (precision_.recipe != Recipe::kFp8Tensorwise) return OkStatus();
  return RestoreLinearStates(state, cfg_.n_layer, [&](int64_t l, int k, const nlohmann::json& s) {
    return linears_[static_cast<size_t>(4 * l + k)]->Restore(s);
  });
}

}  // namespace fp8::train::cuda
