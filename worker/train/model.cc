// SPDX-License-Identifier: Apache-2.0
#include "worker/train/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "kernels/parallel.h"
#include "worker/data/shards.h"
#include "worker/train/layers.h"

namespace fp8::train {

std::vector<ParamTensor> GptParamLayout(const ModelConfig& cfg) {
  std::vector<ParamTensor> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool decay) {
    AddParamTensor(&out, name, std::move(shape), decay);
  };
  const int64_t c = cfg.d_model;
  add("wte.weight", {cfg.vocab_size, c}, true);
  add("wpe.weight", {cfg.seq_len, c}, true);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    auto linear = [&](const std::string& name, int64_t in, int64_t o) {
      add(p + name + ".weight", {o, in}, true);
      add(p + name + ".bias", {o}, false);
    };
    add(p + "ln_1.weight", {c}, false);
    add(p + "ln_1.bias", {c}, false);
    linear(kLinearStateNames[0], c, 3 * c);
    linear(kLinearStateNames[1], c, c);
    add(p + "ln_2.weight", {c}, false);
    add(p + "ln_2.bias", {c}, false);
    linear(kLinearStateNames[2], c, 4 * c);
    linear(kLinearStateNames[3], 4 * c, c);
  }
  add("ln_f.weight", {c}, false);
  add("ln_f.bias", {c}, false);
  return out;
}

GptModel::GptModel(const ModelConfig& cfg, const PrecisionConfig& precision)
    : CausalLm(cfg, precision, GptParamLayout(cfg)) {
  const int64_t c = cfg.d_model;
  wte_ = OffsetOf("wte.weight");
  wpe_ = OffsetOf("wpe.weight");
  blocks_.resize(static_cast<size_t>(cfg.n_layer));
  for (int l = 0; l < cfg.n_layer; ++l) {
    Block& b = blocks_[static_cast<size_t>(l)];
    const std::string p = "h." + std::to_string(l) + ".";
    b.ln1_w = OffsetOf(p + "ln_1.weight");
    b.ln1_b = OffsetOf(p + "ln_1.bias");
    RegisterLinear(b.qkv, p + kLinearStateNames[0], c, 3 * c, true);
    RegisterLinear(b.proj, p + kLinearStateNames[1], c, c, true);
    b.ln2_w = OffsetOf(p + "ln_2.weight");
    b.ln2_b = OffsetOf(p + "ln_2.bias");
    RegisterLinear(b.fc, p + kLinearStateNames[2], c, 4 * c, true);
    RegisterLinear(b.fc_proj, p + kLinearStateNames[3], 4 * c, c, true);
  }
  lnf_w_ = OffsetOf("ln_f.weight");
  lnf_b_ = OffsetOf("ln_f.bias");
}

void GptModel::InitWeights(uint64_t seed) {
  SeededNormal normal(seed);
  const double proj_std = 0.02 / std::sqrt(2.0 * cfg_.n_layer);
  for (const ParamTensor& t : tensors_) {
    float* p = params_.data() + t.offset;
    const bool is_ln_weight = t.name.find("ln_") != std::string::npos && t.name.ends_with(".weight");
    if (is_ln_weight) {
      std::fill(p, p + t.numel, 1.0f);
    } else if (t.shape.size() == 1) {
      std::fill(p, p + t.numel, 0.0f);
    } else {
      const double sd = t.name.ends_with("c_proj.weight") ? proj_std : 0.02;
      for (int64_t i = 0; i < t.numel; ++i) p[i] = static_cast<float>(normal() * sd);
    }
  }
}

void GptModel::Resize(int batch) {
  if (batch == batch_) return;
  batch_ = batch;
  const size_t n = static_cast<size_t>(batch) * cfg_.seq_len;
  const size_t c = static_cast<size_t>(cfg_.d_model);
  const size_t h = static_cast<size_t>(cfg_.n_head), t = static_cast<size_t>(cfg_.seq_len);
  for (Block& b : blocks_) {
    b.x_in.resize(n * c);
    b.ln1_out.resize(n * c);
    b.ln1_mean.resize(n);
    b.ln1_rstd.resize(n);
    b.qkv_out.resize(n * 3 * c);
    b.att.resize(static_cast<size_t>(batch) * h * t * t);
    b.att_y.resize(n * c);
    b.res_mid.resize(n * c);
    b.ln2_out.resize(n * c);
    b.ln2_mean.resize(n);
    b.ln2_rstd.resize(n);
    b.fc_out.resize(n * 4 * c);
    b.gelu_out.resize(n * 4 * c);
  }
  ResizeLinears(static_cast<int64_t>(n));
  inputs_.resize(n);
  targets_.resize(n);
  res_final_.resize(n * c);
  lnf_out_.resize(n * c);
  lnf_mean_.resize(n);
  lnf_rstd_.resize(n);
  probs_.resize(n * static_cast<size_t>(cfg_.vocab_size));
  dres_.resize(n * c);
  dtmp_.resize(n * c);
  dbig_.resize(n * std::max<size_t>(4 * c, static_cast<size_t>(cfg_.vocab_size)));
  dbig2_.resize(n * 4 * c);
}

double GptModel::Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training) {
  Resize(batch);
  const int64_t t = cfg_.seq_len, c = cfg_.d_model, h = cfg_.n_head, v = cfg_.vocab_size;
  const int64_t n = static_cast<int64_t>(batch) * t;
  std::memcpy(inputs_.data(), inputs, sizeof(int32_t) * n);
  std::memcpy(targets_.data(), targets, sizeof(int32_t) * n);
  const float* p = params_.data();

  float* x = blocks_.empty() ? res_final_.data() : blocks_[0].x_in.data();
  EmbeddingForward<float>(inputs, p + wte_, p + wpe_, n, t, c, x);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Block& b = blocks_[l];
    LayerNormForward<float>(b.x_in.data(), p + b.ln1_w, p + b.ln1_b, n, c, b.ln1_out.data(),
                            b.ln1_mean.data(), b.ln1_rstd.data());
    LinearFwd(b.qkv, b.ln1_out.data(), n, b.qkv_out.data(), training);
    AttentionForward<float>(b.qkv_out.data(), batch, t, c, h, b.att_y.data(), b.att.data());
    LinearFwd(b.proj, b.att_y.data(), n, dtmp_.data(), training);
    for (int64_t i = 0; i < n * c; ++i) b.res_mid[i] = b.x_in[i] + dtmp_[i];
    LayerNormForward<float>(b.res_mid.data(), p + b.ln2_w, p + b.ln2_b, n, c, b.ln2_out.data(),
                            b.ln2_mean.data(), b.ln2_rstd.data());
    LinearFwd(b.fc, b.ln2_out.data(), n, b.fc_out.data(), training);
    GeluForward<float>(b.fc_out.data(), n * 4 * c, b.gelu_out.data());
    LinearFwd(b.fc_proj, b.gelu_out.data(), n, dtmp_.data(), training);
    float* next = (l + 1 < blocks_.size()) ? blocks_[l + 1].x_in.data() : res_final_.data();
    for (int64_t i = 0; i < n * c; ++i) next[i] = b.res_mid[i] + dtmp_[i];
  }
  LayerNormForward<float>(res_final_.data(), p + lnf_w_, p + lnf_b_, n, c, lnf_out_.data(),
                          lnf_mean_.data(), lnf_rstd_.data());
  Gemm<float>(false, true, n, v, c, lnf_out_.data(), p + wte_, false, probs_.data());
  return LossFromLogits(probs_.data(), targets, n);
}

void GptModel::Backward(float loss_scale) {
  const int64_t t = cfg_.seq_len, c = cfg_.d_model, h = cfg_.n_head, v = cfg_.vocab_size;
  const int64_t n = static_cast<int64_t>(batch_) * t;
  const float* p = params_.data();
  float* g = grads_.data();

  float* dlogits = dbig_.data();
  CrossEntropyBackward<float>(probs_.data(), targets_.data(), n, v, loss_scale / static_cast<float>(n), dlogits);
  Gemm<float>(false, false, n, c, v, dlogits, p + wte_, false, dtmp_.data());        // dlnf
  Gemm<float>(true, false, v, c, n, dlogits, lnf_out_.data(), true, g + wte_);       // tied head
  std::fill(dres_.begin(), dres_.end(), 0.0f);
  LayerNormBackward<float>(dtmp_.data(), res_final_.data(), p + lnf_w_, lnf_mean_.data(),
                           lnf_rstd_.data(), n, c, dres_.data(), g + lnf_w_, g + lnf_b_);
  for (size_t li = blocks_.size(); li-- > 0;) {
    Block& b = blocks_[li];
    // MLP: dres is d(res_out) = d(fc_proj out).
    LinearBwd(b.fc_proj, dres_.data(), b.gelu_out.data(), n, dbig_.data());
    GeluBackward<float>(dbig_.data(), b.fc_out.data(), n * 4 * c, dbig2_.data());
    LinearBwd(b.fc, dbig2_.data(), b.ln2_out.data(), n, dtmp_.data());
    LayerNormBackward<float>(dtmp_.data(), b.res_mid.data(), p + b.ln2_w, b.ln2_mean.data(),
                             b.ln2_rstd.data(), n, c, dres_.data(), g + b.ln2_w, g + b.ln2_b);
    // Attention: dres is now d(res_mid).
    LinearBwd(b.proj, dres_.data(), b.att_y.data(), n, dtmp_.data());
    AttentionBackward<float>(dtmp_.data(), b.qkv_out.data(), b.att.data(), batch_, t, c, h, dbig_.data());
    LinearBwd(b.qkv, dbig_.data(), b.ln1_out.data(), n, dtmp_.data());
    LayerNormBackward<float>(dtmp_.data(), b.x_in.data(), p + b.ln1_w, b.ln1_mean.data(),
                             b.ln1_rstd.data(), n, c, dres_.data(), g + b.ln1_w, g + b.ln1_b);
  }
  EmbeddingBackward<float>(dres_.data(), inputs_.data(), n, t, c, g + wte_, g + wpe_);
  FinishBackward();
}

}  // namespace fp8::train
