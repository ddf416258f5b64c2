// SPDX-License-Identifier: Apache-2.0
#include "worker/train/llama_model.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "worker/train/layers.h"

namespace fp8::train {
namespace {

std::string LayerPrefix(int l) { return "model.layers." + std::to_string(l) + "."; }

void AddTo(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

std::vector<ParamTensor> LlamaParamLayout(const ModelConfig& cfg) {
  std::vector<ParamTensor> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    const bool matrix = shape.size() == 2;
    AddParamTensor(&out, name, std::move(shape), matrix);
  };
  const int64_t c = cfg.d_model, d = cfg.head_dim, qw = cfg.n_head * d, kvw = cfg.n_kv_head * d;
  add("model.embed_tokens.weight", {cfg.vocab_size, c});
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = LayerPrefix(l);
    add(p + "input_layernorm.weight", {c});
    for (const auto& [name, width] : {std::pair<const char*, int64_t>{"q_proj", qw}, {"k_proj", kvw}, {"v_proj", kvw}}) {
      add(p + "self_attn." + name + ".weight", {width, c});
      if (cfg.attention_bias) add(p + "self_attn." + name + ".bias", {width});
    }
    add(p + "self_attn.o_proj.weight", {c, qw});
    if (cfg.qk_norm) {
      add(p + "self_attn.q_norm.weight", {d});
      add(p + "self_attn.k_norm.weight", {d});
    }
    add(p + "post_attention_layernorm.weight", {c});
    if (cfg.moe.SparseLayer(l)) {
      AddMoeParamTensors(cfg, p + "mlp.", &out);
      continue;
    }
    add(p + "mlp.gate_proj.weight", {cfg.intermediate_size, c});
    add(p + "mlp.up_proj.weight", {cfg.intermediate_size, c});
    add(p + "mlp.down_proj.weight", {c, cfg.intermediate_size});
  }
  add("model.norm.weight", {c});
  if (!cfg.tie_word_embeddings) add("lm_head.weight", {cfg.vocab_size, c});
  return out;
}

LlamaModel::LlamaModel(const ModelConfig& cfg, const PrecisionConfig& precision)
    : CausalLm(cfg, precision, LlamaParamLayout(cfg)), rope_(MakeRopeTables(cfg)) {
  const int64_t c = cfg.d_model, in = cfg.intermediate_size;
  q_width_ = static_cast<int64_t>(cfg.n_head) * cfg.head_dim;
  kv_width_ = static_cast<int64_t>(cfg.n_kv_head) * cfg.head_dim;
  embed_ = OffsetOf("model.embed_tokens.weight");
  blocks_.resize(static_cast<size_t>(cfg.n_layer));
  for (int l = 0; l < cfg.n_layer; ++l) {
    Block& b = blocks_[static_cast<size_t>(l)];
    const std::string p = LayerPrefix(l);
    b.norm1 = OffsetOf(p + "input_layernorm.weight");
    RegisterLinear(b.q, p + "self_attn.q_proj", c, q_width_, cfg.attention_bias);
    RegisterLinear(b.k, p + "self_attn.k_proj", c, kv_width_, cfg.attention_bias);
    RegisterLinear(b.v, p + "self_attn.v_proj", c, kv_width_, cfg.attention_bias);
    RegisterLinear(b.o, p + "self_attn.o_proj", q_width_, c, false);
    if (cfg.qk_norm) {
      b.q_norm = OffsetOf(p + "self_attn.q_norm.weight");
      b.k_norm = OffsetOf(p + "self_attn.k_norm.weight");
    }
    b.norm2 = OffsetOf(p + "post_attention_layernorm.weight");
    if (cfg.moe.SparseLayer(l)) {
      b.moe = std::make_unique<MoeMlp>();
      RegisterMoe(*b.moe, p + "mlp.");
      ++sparse_layers_;
      continue;
    }
    RegisterLinear(b.gate, p + "mlp.gate_proj", c, in, false);
    RegisterLinear(b.up, p + "mlp.up_proj", c, in, false);
    RegisterLinear(b.down, p + "mlp.down_proj", in, c, false);
  }
  norm_ = OffsetOf("model.norm.weight");
  head_ = cfg.tie_word_embeddings ? embed_ : OffsetOf("lm_head.weight");
}

void LlamaModel::InitWeights(uint64_t seed) {
  SeededNormal normal(seed);
  for (const ParamTensor& t : tensors_) {
    float* p = params_.data() + t.offset;
    if (t.shape.size() == 2) {
      for (int64_t i = 0; i < t.numel; ++i) p[i] = static_cast<float>(normal() * 0.02);
    } else {
      std::fill(p, p + t.numel, t.name.ends_with("norm.weight") ? 1.0f : 0.0f);  // norms 1, biases 0
    }
  }
}

void LlamaModel::Resize(int batch) {
  if (batch == batch_) return;
  batch_ = batch;
  const size_t n = static_cast<size_t>(batch) * cfg_.seq_len, c = static_cast<size_t>(cfg_.d_model);
  const size_t qw = static_cast<size_t>(q_width_), kvw = static_cast<size_t>(kv_width_);
  const size_t in = static_cast<size_t>(cfg_.intermediate_size), t = static_cast<size_t>(cfg_.seq_len);
  const bool qk = cfg_.qk_norm;
  for (Block& b : blocks_) {
    b.x_in.resize(n * c);
    b.ln1.resize(n * c);
    b.rstd1.resize(n);
    b.q_raw.resize(qk ? n * qw : 0);
    b.q_rstd.resize(qk ? n * static_cast<size_t>(cfg_.n_head) : 0);
    b.k_raw.resize(qk ? n * kvw : 0);
    b.k_rstd.resize(qk ? n * static_cast<size_t>(cfg_.n_kv_head) : 0);
    b.qr.resize(n * qw);
    b.kr.resize(n * kvw);
    b.vv.resize(n * kvw);
    b.att.resize(static_cast<size_t>(batch) * static_cast<size_t>(cfg_.n_head) * t * t);
    b.att_y.resize(n * qw);
    b.res_mid.resize(n * c);
    b.ln2.resize(n * c);
    b.rstd2.resize(n);
    const size_t dense = b.moe ? 0 : n * in;
    b.g.resize(dense);
    b.u.resize(dense);
    b.act.resize(dense);
  }
  ResizeLinears(static_cast<int64_t>(n));
  // A routed expert sees only its own rows: MoeForward sizes its operands by them.
  for (Block& b : blocks_)
    if (b.moe)
      for (Expert& e : b.moe->experts)
        for (Linear* l : {&e.gate, &e.up, &e.down}) std::vector<float>().swap(l->xq);
  inputs_.resize(n);
  targets_.resize(n);
  res_final_.resize(n * c);
  lnf_out_.resize(n * c);
  lnf_rstd_.resize(n);
  probs_.resize(n * static_cast<size_t>(cfg_.vocab_size));
  dres_.resize(n * c);
  dc_.resize(n * c);
  dc2_.resize(n * c);
  dq_.resize(n * qw);
  dk_.resize(n * kvw);
  dv_.resize(n * kvw);
  dqw_.resize(n * std::max(qw, kvw));
  dwide_.resize(n * std::max(in, static_cast<size_t>(cfg_.vocab_size)));
  dwide2_.resize(n * in);
  dwide3_.resize(n * in);
}

double LlamaModel::Forward(const int32_t* inputs, const int32_t* targets, int batch, bool training) {
  Resize(batch);
  const int64_t t = cfg_.seq_len, c = cfg_.d_model, h = cfg_.n_head, kv = cfg_.n_kv_head, d = cfg_.head_dim;
  const int64_t v = cfg_.vocab_size, in = cfg_.intermediate_size;
  const int64_t n = static_cast<int64_t>(batch) * t;
  const double eps = cfg_.rms_norm_eps;
  std::memcpy(inputs_.data(), inputs, sizeof(int32_t) * n);
  std::memcpy(targets_.data(), targets, sizeof(int32_t) * n);
  const float* p = params_.data();
  aux_loss_ = 0;
  int sparse_index = 0;

  float* x = blocks_.empty() ? res_final_.data() : blocks_[0].x_in.data();
  TokenEmbeddingForward<float>(inputs, p + embed_, n, c, x);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Block& b = blocks_[l];
    RmsNormForward<float>(b.x_in.data(), p + b.norm1, n, c, eps, b.ln1.data(), b.rstd1.data());
    if (cfg_.qk_norm) {
      LinearFwd(b.q, b.ln1.data(), n, b.q_raw.data(), training);
      LinearFwd(b.k, b.ln1.data(), n, b.k_raw.data(), training);
      // Heads are contiguous in a row: [n, heads·d] is [n·heads, d] for the per-head norm.
      RmsNormForward<float>(b.q_raw.data(), p + b.q_norm, n * h, d, eps, b.qr.data(), b.q_rstd.data());
      RmsNormForward<float>(b.k_raw.data(), p + b.k_norm, n * kv, d, eps, b.kr.data(), b.k_rstd.data());
    } else {
      LinearFwd(b.q, b.ln1.data(), n, b.qr.data(), training);
      LinearFwd(b.k, b.ln1.data(), n, b.kr.data(), training);
    }
    LinearFwd(b.v, b.ln1.data(), n, b.vv.data(), training);
    RopeForward<float>(rope_, n, h, b.qr.data());
    RopeForward<float>(rope_, n, kv, b.kr.data());
    GqaAttentionForward<float>(b.qr.data(), b.kr.data(), b.vv.data(), batch, t, h, kv, d, b.att_y.data(), b.att.data());
    LinearFwd(b.o, b.att_y.data(), n, dc_.data(), training);
    for (int64_t i = 0; i < n * c; ++i) b.res_mid[i] = b.x_in[i] + dc_[i];
    RmsNormForward<float>(b.res_mid.data(), p + b.norm2, n, c, eps, b.ln2.data(), b.rstd2.data());
    if (b.moe) {
      MoeForward(*b.moe, sparse_index++, b.ln2.data(), n, training, dc_.data());
    } else {
      LinearFwd(b.gate, b.ln2.data(), n, b.g.data(), training);
      LinearFwd(b.up, b.ln2.data(), n, b.u.data(), training);
      SwiGluForward<float>(b.g.data(), b.u.data(), n * in, b.act.data());
      LinearFwd(b.down, b.act.data(), n, dc_.data(), training);
    }
    float* next = (l + 1 < blocks_.size()) ? blocks_[l + 1].x_in.data() : res_final_.data();
    for (int64_t i = 0; i < n * c; ++i) next[i] = b.res_mid[i] + dc_[i];
  }
  RmsNormForward<float>(res_final_.data(), p + norm_, n, c, eps, lnf_out_.data(), lnf_rstd_.data());
  Gemm<float>(false, true, n, v, c, lnf_out_.data(), p + head_, false, probs_.data());
  return LossFromLogits(probs_.data(), targets, n);
}

void LlamaModel::Backward(float loss_scale) {
  const int64_t t = cfg_.seq_len, c = cfg_.d_model, h = cfg_.n_head, kv = cfg_.n_kv_head, d = cfg_.head_dim;
  const int64_t v = cfg_.vocab_size, in = cfg_.intermediate_size;
  const int64_t n = static_cast<int64_t>(batch_) * t;
  const float* p = params_.data();
  float* g = grads_.data();

  float* dlogits = dwide_.data();
  CrossEntropyBackward<float>(probs_.data(), targets_.data(), n, v, loss_scale / static_cast<float>(n), dlogits);
  Gemm<float>(false, false, n, c, v, dlogits, p + head_, false, dc_.data());  // d(final norm out)
  Gemm<float>(true, false, v, c, n, dlogits, lnf_out_.data(), true, g + head_);
  RmsNormBackward<float>(dc_.data(), res_final_.data(), p + norm_, lnf_rstd_.data(), n, c, /*accumulate=*/false,
                         dres_.data(), g + norm_);
  for (size_t li = blocks_.size(); li-- > 0;) {
    Block& b = blocks_[li];
    // MLP: dres is d(block output) = d(MLP out).
    if (b.moe) {
      MoeBackward(*b.moe, dres_.data(), b.ln2.data(), n, loss_scale, dc_.data());
    } else {
      LinearBwd(b.down, dres_.data(), b.act.data(), n, dwide_.data());
      SwiGluBackward<float>(dwide_.data(), b.g.data(), b.u.data(), n * in, dwide2_.data(), dwide3_.data());
      LinearBwd(b.gate, dwide2_.data(), b.ln2.data(), n, dc_.data());
      LinearBwd(b.up, dwide3_.data(), b.ln2.data(), n, dc2_.data());
      AddTo(dc_.data(), dc2_.data(), n * c);
    }
    RmsNormBackward<float>(dc_.data(), b.res_mid.data(), p + b.norm2, b.rstd2.data(), n, c, true, dres_.data(),
                           g + b.norm2);
    // Attention: dres is now d(res_mid).
    LinearBwd(b.o, dres_.data(), b.att_y.data(), n, dqw_.data());
    GqaAttentionBackward<float>(dqw_.data(), b.qr.data(), b.kr.data(), b.vv.data(), b.att.data(), batch_, t, h, kv, d,
                                dq_.data(), dk_.data(), dv_.data());
    RopeBackward<float>(rope_, n, h, dq_.data());
    RopeBackward<float>(rope_, n, kv, dk_.data());
    if (cfg_.qk_norm) {
      RmsNormBackward<float>(dq_.data(), b.q_raw.data(), p + b.q_norm, b.q_rstd.data(), n * h, d, false, dqw_.data(),
                             g + b.q_norm);
      std::copy_n(dqw_.data(), n * q_width_, dq_.data());
      RmsNormBackward<float>(dk_.data(), b.k_raw.data(), p + b.k_norm, b.k_rstd.data(), n * kv, d, false, dqw_.data(),
                             g + b.k_norm);
      std::copy_n(dqw_.data(), n * kv_width_, dk_.data());
    }
    LinearBwd(b.q, dq_.data(), b.ln1.data(), n, dc_.data());
    LinearBwd(b.k, dk_.data(), b.ln1.data(), n, dc2_.data());
    AddTo(dc_.data(), dc2_.data(), n * c);
    LinearBwd(b.v, dv_.data(), b.ln1.data(), n, dc2_.data());
    AddTo(dc_.data(), dc2_.data(), n * c);
    RmsNormBackward<float>(dc_.data(), b.x_in.data(), p + b.norm1, b.rstd1.data(), n, c, true, dres_.data(),
                           g + b.norm1);
  }
  TokenEmbeddingBackward<float>(dres_.data(), inputs_.data(), n, c, g + embed_);
  FinishBackward();
}

}  // namespace fp8::train
