// SPDX-License-Identifier: Apache-2.0
#include "worker/train/cuda/cuda_llama_model.h"

#include <algorithm>
#include <cstddef>
#include <map>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "worker/train/cuda/cuda_model.h"
#include "worker/train/cuda/llama_kernels.h"
#include "worker/train/cuda/sm90_flash_attention.h"
#include "worker/train/llama_layers.h"

namespace fp8::train::cuda {

namespace {

std::string LayerPrefix(int l) { return "model.layers." + std::to_string(l) + "."; }

// LlamaModel's linear layers of a block, in its registration order (the scaling state's keys).
constexpr const char* kLinearNames[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                         "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

Status CublasStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return OkStatus();
  return InternalError(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(st)));
}

// Every linear layer's in/out width must suit the recipe's GEMMs (sm90_fp8_gemm_cublaslt.h):
// BF16 multiples of 8, tensorwise FP8 of 16, blockwise FP8 of 128 (whole scale blocks), and the
// rows (batch·seq_len) of 16 / 128 for the FP8 recipes.
Status CheckWidths(const ModelConfig& cfg, const PrecisionConfig& precision, int64_t rows) {
  const int64_t multiple = precision.recipe == Recipe::kFp8Blockwise ? 128 : precision.recipe == Recipe::kFp8Tensorwise ? 16 : 8;
  const std::string recipe = RecipeName(precision.recipe);
  const std::pair<const char*, int64_t> widths[] = {
      {"model.d_model", cfg.d_model},
      {"model.head_dim (n_head·head_dim)", static_cast<int64_t>(cfg.n_head) * cfg.head_dim},
      {"model.num_key_value_heads (num_key_value_heads·head_dim)", static_cast<int64_t>(cfg.n_kv_head) * cfg.head_dim},
      {"model.intermediate_size", cfg.intermediate_size}};
  for (const auto& [field, w] : widths)
    if (w % multiple != 0)
      return InvalidArgumentError(std::string(field) + ": " + std::to_string(w) + " must be a multiple of " + std::to_string(multiple) +
                                  " for " + recipe + " on CUDA");
  if (multiple > 8 && rows % multiple != 0)
    return InvalidArgumentError("training.per_device_train_batch_size: batch·seq_len (" + std::to_string(rows) + ") must be a multiple of " +
                                std::to_string(multiple) + " for " + recipe + " on CUDA");
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<CudaLlamaModel>> CudaLlamaModel::Create(const ModelConfig& cfg, const PrecisionConfig& precision,
                                                                 const std::vector<ParamTensor>& tensors, int max_batch,
                                                                 cudaStream_t stream, const CudaModelOptions& options) {
  if (cfg.architecture != Architecture::kLlama) return InvalidArgumentError("model.architecture: CudaLlamaModel runs llama");
  if (!FlashAttentionSupportsHeadDim(cfg.head_dim))
    return InvalidArgumentError("model.head_dim: " + std::to_string(cfg.head_dim) + " is not one the CUDA flash attention runs (32, 64, 128)");
  if (cfg.n_kv_head < 1 || cfg.n_head % cfg.n_kv_head != 0)
    return InvalidArgumentError("model.num_key_value_heads: must divide model.n_head");
  FP8_RETURN_IF_ERROR(CheckWidths(cfg, precision, static_cast<int64_t>(max_batch) * cfg.seq_len));
  std::unique_ptr<CudaLlamaModel> model(new CudaLlamaModel());
  model->cfg_ = cfg;
  model->precision_ = precision;
  model->tensors_ = tensors;
  model->stream_ = stream;
  model->options_ = options;
  FP8_RETURN_IF_ERROR(model->Init(max_batch));
  return model;
}

CudaLlamaModel::~CudaLlamaModel() {
  blocks_.clear();
  if (cublas_) cublasDestroy(cublas_);
}

Status CudaLlamaModel::Init(int max_batch) {
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

  const int64_t c = cfg_.d_model, t = cfg_.seq_len, v = cfg_.vocab_size, h = cfg_.n_head, hd = cfg_.head_dim;
  const int64_t in = cfg_.intermediate_size;
  const int64_t n = static_cast<int64_t>(max_batch) * t;
  q_width_ = h * hd;
  kv_width_ = static_cast<int64_t>(cfg_.n_kv_head) * hd;
  FP8_RETURN_IF_ERROR(params_.Allocate(static_cast<size_t>(num_params_), "parameters"));
  FP8_RETURN_IF_ERROR(grads_.Allocate(static_cast<size_t>(num_params_), "gradients"));
  FP8_ASSIGN_OR_RETURN(embed_, at("model.embed_tokens.weight"));
  FP8_ASSIGN_OR_RETURN(norm_, at("model.norm.weight"));
  if (cfg_.tie_word_embeddings) {
    head_ = embed_;
  } else {
    FP8_ASSIGN_OR_RETURN(head_, at("lm_head.weight"));
  }
  precast_ = precision_.recipe == Recipe::kFp8Blockwise;
  FP8_ASSIGN_OR_RETURN(const bool contiguous, WeightsMergeable(off));
  merged_ = contiguous && !cfg_.attention_bias && precision_.recipe != Recipe::kFp8Tensorwise;
  const int64_t qkv_w = q_width_ + 2 * kv_width_;
  q_ld_ = merged_ ? qkv_w : q_width_;
  kv_ld_ = merged_ ? qkv_w : kv_width_;
  gu_ld_ = merged_ ? 2 * in : in;
  const int64_t widest = merged_ ? std::max({c, qkv_w, 2 * in}) : std::max({c, q_width_, in});
  FP8_ASSIGN_OR_RETURN(ws_, LinearWorkspace::Create(precision_, n, widest, widest));
  float* p = params_.get();
  float* g = grads_.get();
  FP8_RETURN_IF_ERROR(amax_slots_.Allocate(static_cast<size_t>(3 * kLinearsPerBlock * cfg_.n_layer), "amax slots"));
  blocks_.resize(static_cast<size_t>(cfg_.n_layer));
  for (int l = 0; l < cfg_.n_layer; ++l) {
    Block& b = blocks_[static_cast<size_t>(l)];
    const std::string pre = LayerPrefix(l);
    FP8_ASSIGN_OR_RETURN(b.norm1, at(pre + "input_layernorm.weight"));
    FP8_ASSIGN_OR_RETURN(b.norm2, at(pre + "post_attention_layernorm.weight"));
    if (cfg_.qk_norm) {
      FP8_ASSIGN_OR_RETURN(b.q_norm, at(pre + "self_attn.q_norm.weight"));
      FP8_ASSIGN_OR_RETURN(b.k_norm, at(pre + "self_attn.k_norm.weight"));
    }
    // Linear layer k of block l has amax slots 3·(7·l + k) .. +2.
    auto linear = [&](std::unique_ptr<CudaLinear>& lin, int k, int64_t in_w, int64_t out_w, bool bias) -> Status {
      const std::string name = pre + kLinearNames[k];
      FP8_ASSIGN_OR_RETURN(int64_t w, at(name + ".weight"));
      int64_t bb = -1;
      if (bias) {
        FP8_ASSIGN_OR_RETURN(bb, at(name + ".bias"));
      }
      lin = std::make_unique<CudaLinear>(in_w, out_w, p + w, bias ? p + bb : nullptr, g + w, bias ? g + bb : nullptr, precision_,
                                         ws_.get(), cublas_, lt_.get(), options_.fused_epilogues ? epilogue_gemm_.get() : nullptr,
                                         stream_);
      linear_names_.push_back(name);
      // Under precast_ every layer but o_proj (whose input is the attention's bf16 output) reads
      // a cast the norm or SwiGLU made.
      return lin->Init(n, amax_slots_.get() + 3 * (kLinearsPerBlock * l + k), precast_ && k != 3);
    };
    const bool qkv_bias = cfg_.attention_bias;
    const size_t nc = static_cast<size_t>(n * c), nq = static_cast<size_t>(n * q_width_), nkv = static_cast<size_t>(n * kv_width_);
    const size_t ni = static_cast<size_t>(n * in), nqkv = static_cast<size_t>(n * qkv_w);
    if (merged_) {
      // q_proj's and gate_proj's weights start the merged ones (WeightsMergeable).
      FP8_RETURN_IF_ERROR(linear(b.qkv, 0, c, qkv_w, false));
      FP8_RETURN_IF_ERROR(linear(b.o, 3, q_width_, c, false));
      FP8_RETURN_IF_ERROR(linear(b.gate_up, 4, c, 2 * in, false));
      FP8_RETURN_IF_ERROR(b.qkv_out.Allocate(nqkv, "qkv"));
      FP8_RETURN_IF_ERROR(b.gate_up_out.Allocate(2 * ni, "gate/up out"));
      b.q_act = b.qkv_out.get(), b.k_act = b.q_act + q_width_, b.v_act = b.k_act + kv_width_;
      b.gate_act = b.gate_up_out.get(), b.up_act = b.gate_act + in;
      if (cfg_.qk_norm) {
        FP8_RETURN_IF_ERROR(b.qkv_in.Allocate(nqkv, "q/k norm input"));
        b.q_norm_in = b.qkv_in.get(), b.k_norm_in = b.q_norm_in + q_width_;
      }
    } else {
      FP8_RETURN_IF_ERROR(linear(b.q, 0, c, q_width_, qkv_bias));
      FP8_RETURN_IF_ERROR(linear(b.k, 1, c, kv_width_, qkv_bias));
      FP8_RETURN_IF_ERROR(linear(b.v, 2, c, kv_width_, qkv_bias));
      FP8_RETURN_IF_ERROR(linear(b.o, 3, q_width_, c, false));
      FP8_RETURN_IF_ERROR(linear(b.gate, 4, c, in, false));
      FP8_RETURN_IF_ERROR(linear(b.up, 5, c, in, false));
      FP8_RETURN_IF_ERROR(b.q_out.Allocate(nq, "q"));
      FP8_RETURN_IF_ERROR(b.k_out.Allocate(nkv, "k"));
      FP8_RETURN_IF_ERROR(b.v_out.Allocate(nkv, "v"));
      FP8_RETURN_IF_ERROR(b.gate_out.Allocate(ni, "gate out"));
      FP8_RETURN_IF_ERROR(b.up_out.Allocate(ni, "up out"));
      b.q_act = b.q_out.get(), b.k_act = b.k_out.get(), b.v_act = b.v_out.get();
      b.gate_act = b.gate_out.get(), b.up_act = b.up_out.get();
      if (cfg_.qk_norm) {
        FP8_RETURN_IF_ERROR(b.q_in.Allocate(nq, "q norm input"));
        FP8_RETURN_IF_ERROR(b.k_in.Allocate(nkv, "k norm input"));
        b.q_norm_in = b.q_in.get(), b.k_norm_in = b.k_in.get();
      }
    }
    FP8_RETURN_IF_ERROR(linear(b.down, 6, in, c, false));
    FP8_RETURN_IF_ERROR(b.x_in.Allocate(nc, "x_in"));
    FP8_RETURN_IF_ERROR(b.res_mid.Allocate(nc, "res_mid"));
    FP8_RETURN_IF_ERROR(b.rstd1.Allocate(static_cast<size_t>(n), "rstd1"));
    FP8_RETURN_IF_ERROR(b.rstd2.Allocate(static_cast<size_t>(n), "rstd2"));
    if (cfg_.qk_norm) {
      FP8_RETURN_IF_ERROR(b.q_rstd.Allocate(static_cast<size_t>(n * h), "q norm rstd"));
      FP8_RETURN_IF_ERROR(b.k_rstd.Allocate(static_cast<size_t>(n * cfg_.n_kv_head), "k norm rstd"));
    }
    FP8_RETURN_IF_ERROR(b.att_lse.Allocate(static_cast<size_t>(max_batch * h * t), "attention logsumexp"));
    if (precast_) {
      const size_t ld = static_cast<size_t>(kernels::cuda::Sm90BlockScaleLd(n));
      FP8_RETURN_IF_ERROR(b.ln1_qt.Allocate(nc, "ln1 out cast, transposed"));
      FP8_RETURN_IF_ERROR(b.ln2_qt.Allocate(nc, "ln2 out cast, transposed"));
      FP8_RETURN_IF_ERROR(b.act_qt.Allocate(ni, "swiglu out cast, transposed"));
      FP8_RETURN_IF_ERROR(b.ln1_st.Allocate(static_cast<size_t>(c / 128) * ld, "ln1 out cast scales"));
      FP8_RETURN_IF_ERROR(b.ln2_st.Allocate(static_cast<size_t>(c / 128) * ld, "ln2 out cast scales"));
      FP8_RETURN_IF_ERROR(b.act_st.Allocate(static_cast<size_t>(in / 128) * ld, "swiglu out cast scales"));
    } else {
      FP8_RETURN_IF_ERROR(b.ln1_out.Allocate(nc, "ln1 out"));
      FP8_RETURN_IF_ERROR(b.ln2_out.Allocate(nc, "ln2 out"));
      FP8_RETURN_IF_ERROR(b.act.Allocate(ni, "swiglu out"));
    }
    FP8_RETURN_IF_ERROR(b.att_y.Allocate(nq, "attention out"));
  }
  if (precast_) {
    const int64_t wide = std::max(c, in);
    FP8_RETURN_IF_ERROR(op_q_.Allocate(static_cast<size_t>(n * wide), "fp8 activation cast"));
    FP8_RETURN_IF_ERROR(op_s_.Allocate(static_cast<size_t>(wide / 128 * n), "fp8 activation cast scales"));
  }
  for (Block& b : blocks_)
    for (CudaLinear* lin : {b.q.get(), b.k.get(), b.v.get(), b.qkv.get(), b.o.get(), b.gate.get(), b.up.get(), b.gate_up.get(), b.down.get()})
      if (lin) linears_.push_back(lin);

  // The rotation tables in double on the host (the CPU model's), used as float.
  const RopeTables rope = MakeRopeTables(cfg_);
  const std::vector<float> cosf(rope.cos.begin(), rope.cos.end()), sinf(rope.sin.begin(), rope.sin.end());
  FP8_RETURN_IF_ERROR(rope_cos_.Allocate(cosf.size(), "rope cos"));
  FP8_RETURN_IF_ERROR(rope_sin_.Allocate(sinf.size(), "rope sin"));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(rope_cos_.get(), cosf.data(), cosf.size() * sizeof(float), cudaMemcpyHostToDevice));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(rope_sin_.get(), sinf.data(), sinf.size() * sizeof(float), cudaMemcpyHostToDevice));

  vocab_ld_ = (v + 7) / 8 * 8;
  const size_t nc = static_cast<size_t>(n * c), nq = static_cast<size_t>(n * q_width_), nkv = static_cast<size_t>(n * kv_width_);
  const size_t ni = static_cast<size_t>(n * in);
  FP8_RETURN_IF_ERROR(head_bf16_.Allocate(static_cast<size_t>(v * c), "bf16 head"));
  FP8_RETURN_IF_ERROR(inputs_.Allocate(static_cast<size_t>(n), "inputs"));
  FP8_RETURN_IF_ERROR(token_groups_.Allocate(n, c));
  FP8_RETURN_IF_ERROR(targets_.Allocate(static_cast<size_t>(n), "targets"));
  FP8_RETURN_IF_ERROR(res_final_.Allocate(nc, "res_final"));
  FP8_RETURN_IF_ERROR(lnf_rstd_.Allocate(static_cast<size_t>(n), "final norm rstd"));
  FP8_RETURN_IF_ERROR(losses_.Allocate(static_cast<size_t>(n), "losses"));
  // The RMSNorm backwards' column partials: over [n, C] rows, and over the n·H heads of hd (q/k norm).
  const int64_t scratch = std::max(ColumnScratchFloats(n, c), ColumnScratchFloats(n * h, hd));
  FP8_RETURN_IF_ERROR(col_scratch_.Allocate(static_cast<size_t>(scratch), "column scratch"));
  FP8_RETURN_IF_ERROR(lnf_out_.Allocate(nc, "final norm out"));
  FP8_RETURN_IF_ERROR(logits_.Allocate(static_cast<size_t>(n * vocab_ld_), "logits"));
  const AttentionDims dims{max_batch, h, t, hd, cfg_.n_kv_head};
  FP8_RETURN_IF_ERROR(att_delta_.Allocate(static_cast<size_t>(FlashAttentionBackwardScratchFloats(dims)), "attention backward scratch"));
  FP8_RETURN_IF_ERROR(dres_.Allocate(nc, "residual gradient"));
  for (DeviceBuffer<bf16>* buf : {&dy_c_, &d_c_, &d_c2_}) FP8_RETURN_IF_ERROR(buf->Allocate(nc, "d [n, C]"));
  FP8_RETURN_IF_ERROR(d_att_.Allocate(nq, "d [n, q width]"));
  FP8_RETURN_IF_ERROR(d_act_.Allocate(ni, "d [n, intermediate]"));
  if (merged_) {
    FP8_RETURN_IF_ERROR(dq_.Allocate(static_cast<size_t>(n * (q_width_ + 2 * kv_width_)), "d [n, q + 2·kv width]"));
    FP8_RETURN_IF_ERROR(d_gate_.Allocate(2 * ni, "d [n, 2·intermediate]"));
    dq_v_ = dq_.get(), dk_v_ = dq_v_ + q_width_, dv_v_ = dk_v_ + kv_width_;
    dgate_v_ = d_gate_.get(), dup_v_ = dgate_v_ + in;
  } else {
    FP8_RETURN_IF_ERROR(dq_.Allocate(nq, "d [n, q width]"));
    for (DeviceBuffer<bf16>* buf : {&dk_, &dv_}) FP8_RETURN_IF_ERROR(buf->Allocate(nkv, "d [n, kv width]"));
    for (DeviceBuffer<bf16>* buf : {&d_gate_, &d_up_}) FP8_RETURN_IF_ERROR(buf->Allocate(ni, "d [n, intermediate]"));
    dq_v_ = dq_.get(), dk_v_ = dk_.get(), dv_v_ = dv_.get(), dgate_v_ = d_gate_.get(), dup_v_ = d_up_.get();
  }
  FP8_RETURN_IF_ERROR(loss_sum_.Allocate(1, "loss sum"));
  fuse_optimizer_ = options_.fused_optimizer;
  FP8_RETURN_IF_ERROR(InitDecayMask());
  InitZeroRanges();
  return ZeroGrad();
}

// The first Backward after ZeroGrad writes the head's and every linear weight's gradient (beta
// 0); ZeroGrad clears the rest. Untied, the embedding's gradient is only the TokenGroups sum,
// which adds: it is cleared.
void CudaLlamaModel::InitZeroRanges() {
  std::vector<std::pair<int64_t, int64_t>> overwritten;  // [begin, end)
  if (options_.overwrite_grads) {
    overwritten.emplace_back(head_, head_ + HeadNumel());
    for (CudaLinear* lin : linears_) overwritten.emplace_back(OffsetOf(lin), OffsetOf(lin) + lin->in() * lin->out());
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

Status CudaLlamaModel::InitDecayMask() {
  std::vector<uint8_t> mask(static_cast<size_t>(num_params_), kAdamWNoDecay);
  auto fill = [&](int64_t offset, int64_t n, uint8_t value) { std::fill_n(mask.begin() + offset, n, value); };
  for (const ParamTensor& t : tensors_) fill(t.offset, t.numel, t.weight_decay ? kAdamWDecay : kAdamWNoDecay);
  head_decays_ = mask[static_cast<size_t>(head_)] == kAdamWDecay;
  linear_decays_.clear();
  for (CudaLinear* lin : linears_) linear_decays_.push_back(mask[static_cast<size_t>(OffsetOf(lin))] == kAdamWDecay);
  if (fuse_optimizer_) {
    fill(head_, HeadNumel(), kAdamWSkip);
    for (CudaLinear* lin : linears_)
      if (lin->FusesOptimizerStep()) fill(OffsetOf(lin), lin->in() * lin->out(), kAdamWSkip);
  }
  // The runs between the skipped ranges (from the ranges, not a scan of the mask's bytes).
  std::vector<std::pair<int64_t, int64_t>> skipped;
  if (fuse_optimizer_) {
    skipped.emplace_back(head_, HeadNumel());
    for (CudaLinear* lin : linears_)
      if (lin->FusesOptimizerStep()) skipped.emplace_back(OffsetOf(lin), lin->in() * lin->out());
  }
  std::sort(skipped.begin(), skipped.end());
  adamw_runs_.clear();
  int64_t at = 0;
  for (const auto& [off, len] : skipped) {
    if (off > at) adamw_runs_.emplace_back(at, off - at);
    at = std::max(at, off + len);
  }
  if (at < num_params_) adamw_runs_.emplace_back(at, num_params_ - at);
  FP8_RETURN_IF_ERROR(decay_mask_.Allocate(mask.size(), "AdamW decay mask"));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(decay_mask_.get(), mask.data(), mask.size(), cudaMemcpyHostToDevice));
  return OkStatus();
}

Status CudaLlamaModel::OptimizerStep(const AdamWArgs& a, float* m, float* v) {
  float* p = params_.get();
  if (fuse_optimizer_) {
    Mark("(host gap before optimizer)");
    FP8_RETURN_IF_ERROR(AdamWStepTensor(p + head_, grads_.get() + head_, m + head_, v + head_, HeadNumel(), head_decays_, a,
                                        head_bf16_.get(), stream_));
    Mark("adamw head (+ bf16 copy)");
    head_cast_current_ = true;
    for (size_t i = 0; i < linears_.size(); ++i) {
      CudaLinear* lin = linears_[i];
      if (!lin->FusesOptimizerStep()) continue;
      const int64_t off = OffsetOf(lin);
      FP8_RETURN_IF_ERROR(lin->OptimizerStep(a, m + off, v + off, linear_decays_[i]));
    }
    Mark("adamw linears (+ W casts)");
  }
  // Everything else (all of it when not fused); the skipped tensors are the ones stepped above.
  for (const auto& [off, len] : adamw_runs_)
    FP8_RETURN_IF_ERROR(AdamWStep(p + off, grads_.get() + off, m + off, v + off, decay_mask_.get() + off, len, a, stream_));
  Mark("adamw rest (norm weights)");
  if (!fuse_optimizer_) head_cast_current_ = false;
  for (CudaLinear* lin : linears_)
    if (!fuse_optimizer_ || !lin->FusesOptimizerStep()) lin->InvalidateWeightCast();
  return OkStatus();
}

void CudaLlamaModel::InvalidateWeightCasts() {
  head_cast_current_ = false;
  for (CudaLinear* lin : linears_) lin->InvalidateWeightCast();
}

float* CudaLlamaModel::mutable_params() {
  InvalidateWeightCasts();
  return params_.get();
}

Status CudaLlamaModel::UploadParams(const float* host) {
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(params_.get(), host, sizeof(float) * num_params_, cudaMemcpyHostToDevice));
  InvalidateWeightCasts();
  return OkStatus();
}
Status CudaLlamaModel::DownloadParams(float* host) const {
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(host, params_.get(), sizeof(float) * num_params_, cudaMemcpyDeviceToHost));
  return OkStatus();
}
Status CudaLlamaModel::DownloadGrads(float* host) const {
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(host, grads_.get(), sizeof(float) * num_params_, cudaMemcpyDeviceToHost));
  return OkStatus();
}
Status CudaLlamaModel::ZeroGrad() {
  for (const auto& [offset, n] : zero_ranges_)
    FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(grads_.get() + offset, 0, sizeof(float) * n, stream_));
  Mark("memset/copies");
  grads_fresh_ = true;
  return OkStatus();
}

Status CudaLlamaModel::LinearForward(CudaLinear& lin, const bf16* x, const Fp8BlockOperand& op, int64_t n, bf16* y,
                                     bool training) {
  if (precast_) return lin.Forward(op, n, y, training);
  return lin.bias() != nullptr ? lin.Forward(x, n, y, training) : lin.ForwardNoBias(x, n, y, training);
}

Status CudaLlamaModel::LinearBackward(CudaLinear& lin, const bf16* dy, const bf16* x, const Fp8BlockOperand& op, int64_t n, bf16* dx,
                                      bool bias_grad) {
  return precast_ ? lin.Backward(dy, op, n, dx, bias_grad) : lin.Backward(dy, x, n, dx, bias_grad);
}

unsigned int* CudaLlamaModel::CastAmax(bool training) const {
  if (!training || !ws_->collect_fp8_stats) return nullptr;
  // The float's bits: non-negative floats order as unsigned integers (the cast's atomicMax).
  return reinterpret_cast<unsigned int*>(reinterpret_cast<char*>(ws_->fp8_stats.get()) + offsetof(DeviceFp8CastStats, amax));
}

Status CudaLlamaModel::AddNorm(const float* res, const bf16* y, float* x_out, const float* w, float* rstd, bf16* ln,
                               const Fp8BlockOperand& op, bool training) {
  const int64_t n = static_cast<int64_t>(batch_) * cfg_.seq_len, c = cfg_.d_model;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  if (!precast_) {
    FP8_RETURN_IF_ERROR(y ? ResidualAddRmsNorm(res, y, n, c, x_out, w, eps, ln, rstd, stream_)
                          : RmsNormForward(res, w, n, c, eps, ln, rstd, stream_));
    Mark("rmsnorm fwd (+ residual add)");
    return OkStatus();
  }
  FP8_RETURN_IF_ERROR(y ? ResidualAddRmsRstd(res, y, n, c, x_out, eps, rstd, stream_) : RmsNormRstd(res, n, c, eps, rstd, stream_));
  Mark("rmsnorm fwd stats (+ residual add)");
  const kernels::ScaleFormat sf = precision_.ue8m0 ? kernels::ScaleFormat::kUe8m0 : kernels::ScaleFormat::kFp32;
  FP8_RETURN_IF_ERROR(RmsNormCastBlockwise(y ? x_out : res, rstd, w, n, c, sf, op, CastAmax(training), stream_));
  Mark("rmsnorm fwd + fp8 cast (fused)");
  return OkStatus();
}

void CudaLlamaModel::SetOpTimer(OpTimer* timer) {
  timer_ = timer;
  for (Block& b : blocks_) {
    for (CudaLinear* lin : {b.q.get(), b.k.get(), b.v.get(), b.qkv.get()})
      if (lin) lin->SetOpTimer(timer, "qkv");
    b.o->SetOpTimer(timer, "o_proj");
    for (CudaLinear* lin : {b.gate.get(), b.up.get(), b.gate_up.get()})
      if (lin) lin->SetOpTimer(timer, "gate/up");
    b.down->SetOpTimer(timer, "down");
  }
}

StatusOr<bool> CudaLlamaModel::WeightsMergeable(const std::map<std::string, int64_t>& offsets) const {
  const int64_t c = cfg_.d_model, in = cfg_.intermediate_size;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    int64_t w[kLinearsPerBlock];
    for (int k = 0; k < kLinearsPerBlock; ++k) {
      const std::string name = LayerPrefix(l) + kLinearNames[k] + ".weight";
      auto it = offsets.find(name);
      if (it == offsets.end()) return InvalidArgumentError("parameter layout lacks " + name);
      w[k] = it->second;
    }
    if (w[1] != w[0] + q_width_ * c || w[2] != w[1] + kv_width_ * c || w[5] != w[4] + in * c) return false;
  }
  return true;
}

StatusOr<double> CudaLlamaModel::Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training,
                                         float loss_scale) {
  if (batch < 1 || batch > max_batch_)
    return InvalidArgumentError("batch " + std::to_string(batch) + " outside [1, " + std::to_string(max_batch_) + "]");
  batch_ = batch;
  const int64_t t = cfg_.seq_len, c = cfg_.d_model, v = cfg_.vocab_size, h = cfg_.n_head, kv = cfg_.n_kv_head, hd = cfg_.head_dim;
  const int64_t n = static_cast<int64_t>(batch) * t, in = cfg_.intermediate_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  // Token ids index the embedding and the logits' rows: checked here, on the host.
  FP8_RETURN_IF_ERROR(CheckTokens(targets, n, v, "targets"));
  if (training) {
    FP8_RETURN_IF_ERROR(token_groups_.Build(inputs, n, v, stream_));  // checks the inputs
  } else {
    FP8_RETURN_IF_ERROR(CheckTokens(inputs, n, v, "inputs"));
  }
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(inputs_.get(), inputs, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(targets_.get(), targets, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream_));
  Mark("tokens in (+ host gap)");
  const float* p = params_.get();
  const float *cs = rope_cos_.get(), *sn = rope_sin_.get();
  const AttentionDims dims{batch, h, t, hd, kv};
  const HeadLayout ql = RowMajorHeads(t, hd, q_ld_), kvl = RowMajorHeads(t, hd, kv_ld_), yl = RowMajorHeads(t, hd, q_width_);
  float* x = blocks_.empty() ? res_final_.get() : blocks_[0].x_in.get();
  FP8_RETURN_IF_ERROR(TokenEmbeddingForward(inputs_.get(), p + embed_, n, c, x, stream_));
  Mark("embedding fwd");
  if (blocks_.empty()) {
    FP8_RETURN_IF_ERROR(RmsNormForward(x, p + norm_, n, c, eps, lnf_out_.get(), lnf_rstd_.get(), stream_));
  } else {
    Block& b0 = blocks_[0];
    FP8_RETURN_IF_ERROR(AddNorm(x, nullptr, nullptr, p + b0.norm1, b0.rstd1.get(), b0.ln1_out.get(), Operand(b0.ln1_qt, b0.ln1_st), training));
  }
  // Every residual add is followed by an RMSNorm (post_attention_layernorm, the next block's
  // input_layernorm, or the final norm): one fused pass each.
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Block& b = blocks_[l];
    const Fp8BlockOperand ln1 = Operand(b.ln1_qt, b.ln1_st), ln2 = Operand(b.ln2_qt, b.ln2_st), act = Operand(b.act_qt, b.act_st);
    if (merged_) {
      FP8_RETURN_IF_ERROR(LinearForward(*b.qkv, b.ln1_out.get(), ln1, n, b.qkv_out.get(), training));
    } else {
      FP8_RETURN_IF_ERROR(LinearForward(*b.q, b.ln1_out.get(), ln1, n, b.q_act, training));
      FP8_RETURN_IF_ERROR(LinearForward(*b.k, b.ln1_out.get(), ln1, n, b.k_act, training));
      FP8_RETURN_IF_ERROR(LinearForward(*b.v, b.ln1_out.get(), ln1, n, b.v_act, training));
    }
    if (cfg_.qk_norm) {
      FP8_RETURN_IF_ERROR(HeadRmsNormForward(b.q_act, n, h, hd, q_ld_, p + b.q_norm, eps, b.q_norm_in, b.q_rstd.get(), stream_));
      FP8_RETURN_IF_ERROR(HeadRmsNormForward(b.k_act, n, kv, hd, kv_ld_, p + b.k_norm, eps, b.k_norm_in, b.k_rstd.get(), stream_));
      Mark("q/k norm fwd");
    }
    if (merged_) {  // k's heads follow q's in each row of qkv_out: one pass rotates both
      FP8_RETURN_IF_ERROR(RopeForward(b.q_act, n, t, h + kv, hd, q_ld_, cs, sn, stream_));
    } else {
      FP8_RETURN_IF_ERROR(RopeForward(b.q_act, n, t, h, hd, q_ld_, cs, sn, stream_));
      FP8_RETURN_IF_ERROR(RopeForward(b.k_act, n, t, kv, hd, kv_ld_, cs, sn, stream_));
    }
    Mark("rope fwd");
    FP8_RETURN_IF_ERROR(FlashAttentionForward(dims, b.q_act, ql, b.k_act, b.v_act, kvl, b.att_y.get(), yl, b.att_lse.get(), stream_));
    Mark("attention fwd");
    FP8_RETURN_IF_ERROR(b.o->ForwardNoBias(b.att_y.get(), n, d_c_.get(), training));
    FP8_RETURN_IF_ERROR(AddNorm(b.x_in.get(), d_c_.get(), b.res_mid.get(), p + b.norm2, b.rstd2.get(), b.ln2_out.get(), ln2, training));
    if (merged_) {
      FP8_RETURN_IF_ERROR(LinearForward(*b.gate_up, b.ln2_out.get(), ln2, n, b.gate_up_out.get(), training));
    } else {
      FP8_RETURN_IF_ERROR(LinearForward(*b.gate, b.ln2_out.get(), ln2, n, b.gate_act, training));
      FP8_RETURN_IF_ERROR(LinearForward(*b.up, b.ln2_out.get(), ln2, n, b.up_act, training));
    }
    if (precast_) {
      const kernels::ScaleFormat sf = precision_.ue8m0 ? kernels::ScaleFormat::kUe8m0 : kernels::ScaleFormat::kFp32;
      FP8_RETURN_IF_ERROR(SwiGluCastBlockwise(b.gate_act, b.up_act, n, in, gu_ld_, sf, act, CastAmax(training), stream_));
      Mark("swiglu fwd + fp8 cast (fused)");
    } else {
      FP8_RETURN_IF_ERROR(SwiGluForwardRows(b.gate_act, b.up_act, n, in, gu_ld_, b.act.get(), stream_));
      Mark("swiglu fwd");
    }
    FP8_RETURN_IF_ERROR(LinearForward(*b.down, b.act.get(), act, n, d_c_.get(), training));
    if (l + 1 < blocks_.size()) {
      Block& nb = blocks_[l + 1];
      FP8_RETURN_IF_ERROR(AddNorm(b.res_mid.get(), d_c_.get(), nb.x_in.get(), p + nb.norm1, nb.rstd1.get(), nb.ln1_out.get(),
                                  Operand(nb.ln1_qt, nb.ln1_st), training));
    } else {
      FP8_RETURN_IF_ERROR(ResidualAddRmsNorm(b.res_mid.get(), d_c_.get(), n, c, res_final_.get(), p + norm_, eps, lnf_out_.get(),
                                             lnf_rstd_.get(), stream_));
    }
  }
  Mark("final rmsnorm fwd");
  if (!head_cast_current_) FP8_RETURN_IF_ERROR(CastF32ToBf16(p + head_, v * c, head_bf16_.get(), stream_));
  head_cast_current_ = true;
  FP8_RETURN_IF_ERROR(GemmBf16(cublas_, false, true, n, v, c, 1.0f, lnf_out_.get(), c, head_bf16_.get(), c, 0.0f, logits_.get(), vocab_ld_, false));
  Mark("head fwd GEMM (bf16)");
  FP8_RETURN_IF_ERROR(CrossEntropy(logits_.get(), targets_.get(), n, v, vocab_ld_, loss_scale / static_cast<float>(n), training,
                                   losses_.get(), stream_));
  FP8_RETURN_IF_ERROR(SumToDouble(losses_.get(), n, loss_sum_.get(), stream_));
  Mark("cross-entropy fwd+bwd");
  double sum = 0;
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(&sum, loss_sum_.get(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  return sum / static_cast<double>(n);
}

// dres_ holds d(block output) and dy_c_ its bf16 copy; leaves d(block input) in dres_ and (but
// for the first block) its bf16 copy in dy_c_.
Status CudaLlamaModel::BlockBackward(Block& b, int64_t li) {
  const int64_t t = cfg_.seq_len, c = cfg_.d_model, h = cfg_.n_head, kv = cfg_.n_kv_head, hd = cfg_.head_dim;
  const int64_t n = static_cast<int64_t>(batch_) * t, in = cfg_.intermediate_size;
  const float* p = params_.get();
  float* g = grads_.get();
  const float *cs = rope_cos_.get(), *sn = rope_sin_.get();
  const Fp8BlockOperand ln1 = Operand(b.ln1_qt, b.ln1_st), ln2 = Operand(b.ln2_qt, b.ln2_st), act = Operand(b.act_qt, b.act_st);
  // MLP: gate and up both read ln2_out, so its gradient is the sum of their input gradients (merged_:
  // summed by the one dgrad GEMM).
  FP8_RETURN_IF_ERROR(LinearBackward(*b.down, dy_c_.get(), b.act.get(), act, n, d_act_.get(), /*bias_grad=*/false));
  // SwiGLU's gradient [dgate | dup] is gate_up's dy, written in bf16 and cast by its backward: two
  // passes at the memory's speed beat one CTA computing and casting a tile pair
  // (bench_trainer_cuda --profile: 331 against 432 µs at llama-3b).
  if (merged_) {
    FP8_RETURN_IF_ERROR(SwiGluBackwardRows(d_act_.get(), b.gate_act, b.up_act, n, in, gu_ld_, dgate_v_, dup_v_, stream_));
    Mark("swiglu bwd");
    FP8_RETURN_IF_ERROR(LinearBackward(*b.gate_up, d_gate_.get(), b.ln2_out.get(), ln2, n, d_c_.get(), false));
  } else {
    FP8_RETURN_IF_ERROR(SwiGluBackwardRows(d_act_.get(), b.gate_act, b.up_act, n, in, gu_ld_, dgate_v_, dup_v_, stream_));
    Mark("swiglu bwd");
    FP8_RETURN_IF_ERROR(LinearBackward(*b.gate, dgate_v_, b.ln2_out.get(), ln2, n, d_c_.get(), false));
    FP8_RETURN_IF_ERROR(LinearBackward(*b.up, dup_v_, b.ln2_out.get(), ln2, n, d_c2_.get(), false));
    FP8_RETURN_IF_ERROR(AccumulateBf16(d_c2_.get(), n * c, d_c_.get(), stream_));
    Mark("dx sums (bf16 accumulate)");
  }
  FP8_RETURN_IF_ERROR(RmsNormBackward(d_c_.get(), b.res_mid.get(), p + b.norm2, b.rstd2.get(), n, c, dres_.get(), dy_c_.get(), g + b.norm2,
                                      col_scratch_.get(), stream_));
  Mark("rmsnorm bwd");
  // Attention: dres_ is now d(res_mid).
  FP8_RETURN_IF_ERROR(b.o->Backward(dy_c_.get(), b.att_y.get(), n, d_att_.get(), false));
  const AttentionDims dims{batch_, h, t, hd, kv};
  const HeadLayout ql = RowMajorHeads(t, hd, q_ld_), kvl = RowMajorHeads(t, hd, kv_ld_), yl = RowMajorHeads(t, hd, q_width_);
  FP8_RETURN_IF_ERROR(FlashAttentionBackward(dims, b.q_act, ql, b.k_act, b.v_act, kvl, b.att_y.get(), d_att_.get(), yl, b.att_lse.get(),
                                             att_delta_.get(), dq_v_, dk_v_, dv_v_, stream_));
  Mark("attention bwd");
  if (merged_) {  // dk's heads follow dq's in each row of dq_: one pass
    FP8_RETURN_IF_ERROR(RopeBackward(dq_v_, n, t, h + kv, hd, q_ld_, cs, sn, stream_));
  } else {
    FP8_RETURN_IF_ERROR(RopeBackward(dq_v_, n, t, h, hd, q_ld_, cs, sn, stream_));
    FP8_RETURN_IF_ERROR(RopeBackward(dk_v_, n, t, kv, hd, kv_ld_, cs, sn, stream_));
  }
  Mark("rope bwd");
  if (cfg_.qk_norm) {
    FP8_RETURN_IF_ERROR(HeadRmsNormBackward(dq_v_, b.q_norm_in, n, h, hd, q_ld_, p + b.q_norm, b.q_rstd.get(), g + b.q_norm,
                                            col_scratch_.get(), stream_));
    FP8_RETURN_IF_ERROR(HeadRmsNormBackward(dk_v_, b.k_norm_in, n, kv, hd, kv_ld_, p + b.k_norm, b.k_rstd.get(), g + b.k_norm,
                                            col_scratch_.get(), stream_));
    Mark("q/k norm bwd");
  }
  if (merged_) {
    FP8_RETURN_IF_ERROR(LinearBackward(*b.qkv, dq_.get(), b.ln1_out.get(), ln1, n, d_c_.get(), false));
  } else {
    const bool bias = cfg_.attention_bias;
    FP8_RETURN_IF_ERROR(LinearBackward(*b.q, dq_v_, b.ln1_out.get(), ln1, n, d_c_.get(), bias));
    FP8_RETURN_IF_ERROR(LinearBackward(*b.k, dk_v_, b.ln1_out.get(), ln1, n, d_c2_.get(), bias));
    FP8_RETURN_IF_ERROR(AccumulateBf16(d_c2_.get(), n * c, d_c_.get(), stream_));
    Mark("dx sums (bf16 accumulate)");
    FP8_RETURN_IF_ERROR(LinearBackward(*b.v, dv_v_, b.ln1_out.get(), ln1, n, d_c2_.get(), bias));
    FP8_RETURN_IF_ERROR(AccumulateBf16(d_c2_.get(), n * c, d_c_.get(), stream_));
    Mark("dx sums (bf16 accumulate)");
  }
  FP8_RETURN_IF_ERROR(RmsNormBackward(d_c_.get(), b.x_in.get(), p + b.norm1, b.rstd1.get(), n, c, dres_.get(), li > 0 ? dy_c_.get() : nullptr,
                                      g + b.norm1, col_scratch_.get(), stream_));
  Mark("rmsnorm bwd");
  return OkStatus();
}

Status CudaLlamaModel::Backward() {
  const int64_t t = cfg_.seq_len, c = cfg_.d_model, v = cfg_.vocab_size;
  const int64_t n = static_cast<int64_t>(batch_) * t;
  const float* p = params_.get();
  float* g = grads_.get();
  // The first Backward after ZeroGrad writes the gradients ZeroGrad left (zero_ranges_).
  const bool overwrite = grads_fresh_ && options_.overwrite_grads;
  for (CudaLinear* lin : linears_) lin->OverwriteWeightGradNext(overwrite);
  grads_fresh_ = false;
  // Head: dlnf = dlogits·W_head, dW_head (+)= dlogitsᵀ·lnf (tied: the embedding's first
  // contribution; the lookup's comes last).
  Mark("(host gap before backward)");
  FP8_RETURN_IF_ERROR(GemmBf16(cublas_, false, false, n, c, v, 1.0f, logits_.get(), vocab_ld_, head_bf16_.get(), c, 0.0f, d_c_.get(), c, false));
  Mark("head dgrad GEMM (bf16)");
  FP8_RETURN_IF_ERROR(GemmBf16(cublas_, true, false, v, c, n, 1.0f, logits_.get(), vocab_ld_, lnf_out_.get(), c, overwrite ? 0.0f : 1.0f,
                               g + head_, c, true));
  Mark("head wgrad GEMM (bf16)");
  FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(dres_.get(), 0, sizeof(float) * n * c, stream_));
  Mark("memset/copies");
  // Each RMSNorm backward also writes the residual gradient in bf16 (dy_c_): the operand of the
  // next linear layer's backward.
  FP8_RETURN_IF_ERROR(RmsNormBackward(d_c_.get(), res_final_.get(), p + norm_, lnf_rstd_.get(), n, c, dres_.get(), dy_c_.get(), g + norm_,
                                      col_scratch_.get(), stream_));
  Mark("rmsnorm bwd");
  for (size_t li = blocks_.size(); li-- > 0;) FP8_RETURN_IF_ERROR(BlockBackward(blocks_[li], static_cast<int64_t>(li)));
  FP8_RETURN_IF_ERROR(token_groups_.AccumulateWteGrad(dres_.get(), g + embed_, stream_));
  Mark("embedding bwd");
  if (precision_.recipe != Recipe::kFp8Tensorwise) return OkStatus();
  if (amax_reduce_) FP8_RETURN_IF_ERROR(amax_reduce_(amax_slots_.get(), amax_slots_.size(), stream_));
  for (CudaLinear* lin : linears_) FP8_RETURN_IF_ERROR(lin->ApplyScalingUpdates());
  return OkStatus();
}

Status CudaLlamaModel::CollectFp8Stats(bool on) {
  ws_->collect_fp8_stats = on && ws_->fp8_stats.get() != nullptr;  // allocated for the FP8 recipes only
  ws_->fp8_stats_elements = 0;
  if (ws_->collect_fp8_stats) FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(ws_->fp8_stats.get(), 0, sizeof(DeviceFp8CastStats), stream_));
  return OkStatus();
}

Fp8CastStats CudaLlamaModel::TakeFp8Stats() {
  DeviceFp8CastStats d{};
  const bool collected = ws_->collect_fp8_stats && ws_->fp8_stats_elements > 0;
  ws_->collect_fp8_stats = false;
  if (collected) cudaMemcpyAsync(&d, ws_->fp8_stats.get(), sizeof(d), cudaMemcpyDeviceToHost, stream_);
  if (cudaStreamSynchronize(stream_) != cudaSuccess || !collected) return {};
  return {d.amax, static_cast<int64_t>(d.saturated), ws_->fp8_stats_elements};
}

nlohmann::json CudaLlamaModel::PrecisionState() const {
  nlohmann::json out = nlohmann::json::object();
  if (precision_.recipe != Recipe::kFp8Tensorwise) return out;
  cudaStreamSynchronize(stream_);
  for (size_t i = 0; i < linears_.size(); ++i) out[linear_names_[i]] = linears_[i]->State();
  return out;
}

Status CudaLlamaModel::RestorePrecisionState(const nlohmann::json& state) {
  if (precision_.recipe != Recipe::kFp8Tensorwise) return OkStatus();
  for (size_t i = 0; i < linears_.size(); ++i) {
    if (!state.contains(linear_names_[i])) return DataLossError("fp8 scaling state lacks " + linear_names_[i]);
    FP8_RETURN_IF_ERROR(linears_[i]->Restore(state[linear_names_[i]]));
  }
  return OkStatus();
}

}  // namespace fp8::train::cuda
