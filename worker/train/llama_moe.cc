// SPDX-License-Identifier: Apache-2.0
// LlamaModel's mixture-of-experts MLP (llama_model.h): the FP32 router, the tokens permuted by
// expert into one contiguous layout, every expert's SwiGLU MLP on its rows through the recipe's
// linear layers, the weighted combine, the shared experts, and the same backwards. With expert
// parallelism the experts' part runs on the group's ranks (moe_dispatch.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "worker/train/layers.h"
#include "worker/train/llama_model.h"

namespace fp8::train {
namespace {

// TakeRoutingCounts' layout: [sparse layers · E] tokens routed, then these four sums.
enum CountTail { kDropped, kAssignments, kAuxSum, kForwards, kCountTail };

void Fit(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

void Add(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

void AddMoeParamTensors(const ModelConfig& cfg, const std::string& p, std::vector<ParamTensor>* out) {
  const MoeConfig& e = cfg.moe;
  const int64_t c = cfg.d_model, width = e.moe_intermediate_size;
  AddParamTensor(out, p + "gate.weight", {e.num_experts, c}, true);
  if (e.router == MoeRouter::kSigmoidBias) AddParamTensor(out, p + "gate.e_score_correction_bias", {e.num_experts}, false);
  auto mlp = [&](const std::string& q, int64_t w) {
    AddParamTensor(out, q + "gate_proj.weight", {w, c}, true);
    AddParamTensor(out, q + "up_proj.weight", {w, c}, true);
    AddParamTensor(out, q + "down_proj.weight", {c, w}, true);
  };
  for (int x = 0; x < e.num_experts; ++x) mlp(p + "experts." + std::to_string(x) + ".", width);
  if (e.num_shared_experts > 0) mlp(p + "shared_experts.", width * e.num_shared_experts);
}

void LlamaModel::RegisterMoe(MoeMlp& m, const std::string& p) {
  const MoeConfig& e = cfg_.moe;
  const int64_t c = cfg_.d_model, width = e.moe_intermediate_size;
  m.router = OffsetOf(p + "gate.weight");
  if (e.router == MoeRouter::kSigmoidBias) m.bias = OffsetOf(p + "gate.e_score_correction_bias");
  m.experts.resize(static_cast<size_t>(e.num_experts));
  m.shared.resize(e.num_shared_experts > 0 ? 1 : 0);
  auto reg = [&](Expert& x, const std::string& q, int64_t w) {
    RegisterLinear(x.gate, q + "gate_proj", c, w, false);
    RegisterLinear(x.up, q + "up_proj", c, w, false);
    RegisterLinear(x.down, q + "down_proj", w, c, false);
  };
  for (int x = 0; x < e.num_experts; ++x) reg(m.experts[static_cast<size_t>(x)], p + "experts." + std::to_string(x) + ".", width);
  if (!m.shared.empty()) reg(m.shared[0], p + "shared_experts.", width * e.num_shared_experts);
}

void LlamaModel::SwiGluMlpForward(Expert& e, const float* x, int64_t m, int64_t width, bool training, float* g,
                                  float* u, float* act, float* y) {
  LinearFwd(e.gate, x, m, g, training);
  LinearFwd(e.up, x, m, u, training);
  SwiGluForward<float>(g, u, m * width, act);
  LinearFwd(e.down, act, m, y, training);
}

void LlamaModel::SwiGluMlpBackward(Expert& e, const float* dy, const float* x, const float* g, const float* u,
                                   const float* act, int64_t m, int64_t width, float* dx) {
  const int64_t c = cfg_.d_model;
  Fit(moe_scratch_, 3 * m * width + m * c);
  float* dact = moe_scratch_.data();
  float* dg = dact + m * width;
  float* du = dg + m * width;
  float* dx_up = du + m * width;
  LinearBwd(e.down, dy, act, m, dact);
  SwiGluBackward<float>(dact, g, u, m * width, dg, du);
  LinearBwd(e.gate, dg, x, m, dx);
  LinearBwd(e.up, du, x, m, dx_up);
  Add(dx, dx_up, m * c);
}

void LlamaModel::SetExpertParallel(moe::ExpertParallel* ep) {
  const MoeConfig& e = cfg_.moe;
  FP8_CHECK(ep && ep->degree > 1 && e.num_experts == ep->experts && e.num_experts % ep->degree == 0);
  // The members' gradients travel as one block per member: expert x's three matrices must follow
  // expert x - 1's (AddMoeParamTensors' order).
  const int64_t size = 3 * e.moe_intermediate_size * static_cast<int64_t>(cfg_.d_model);
  for (Block& b : blocks_) {
    if (!b.moe) continue;
    const int64_t first = b.moe->experts[0].gate.w;
    for (int x = 0; x < e.num_experts; ++x) {
      const Expert& ex = b.moe->experts[static_cast<size_t>(x)];
      FP8_CHECK(ex.gate.w == first + x * size && ex.up.w == ex.gate.w + size / 3 && ex.down.w == ex.up.w + size / 3);
    }
  }
  ep_ = ep;
}

void LlamaModel::ExpertsForward(MoeMlp& m, bool training) {
  if (ep_) return SpreadExpertsForward(m, training);
  const int64_t c = cfg_.d_model, width = cfg_.moe.moe_intermediate_size;
  // Every expert runs, also on no rows: its FP8 casts then count in every rank's amaxes alike.
  for (int64_t ex = 0; ex < cfg_.moe.num_experts; ++ex) {
    const int64_t r0 = m.dispatch.offsets[static_cast<size_t>(ex)];
    const int64_t m_e = m.dispatch.offsets[static_cast<size_t>(ex + 1)] - r0;
    Expert& expert = m.experts[static_cast<size_t>(ex)];
    for (Linear* l : {&expert.gate, &expert.up, &expert.down}) l->xq.resize(static_cast<size_t>(m_e * l->in));
    SwiGluMlpForward(expert, m.xp.data() + r0 * c, m_e, width, training,
                     m.g.data() + r0 * width, m.u.data() + r0 * width, m.act.data() + r0 * width,
                     m.out.data() + r0 * c);
  }
}

void LlamaModel::ExpertsBackward(MoeMlp& m) {
  if (ep_) return SpreadExpertsBackward(m);
  const int64_t c = cfg_.d_model, width = cfg_.moe.moe_intermediate_size;
  for (int64_t ex = 0; ex < cfg_.moe.num_experts; ++ex) {
    const int64_t r0 = m.dispatch.offsets[static_cast<size_t>(ex)];
    const int64_t m_e = m.dispatch.offsets[static_cast<size_t>(ex + 1)] - r0;
    SwiGluMlpBackward(m.experts[static_cast<size_t>(ex)], moe_dout_.data() + r0 * c, m.xp.data() + r0 * c,
                      m.g.data() + r0 * width, m.u.data() + r0 * width, m.act.data() + r0 * width, m_e, width,
                      moe_dxp_.data() + r0 * c);
  }
}

// Each (member j, local expert l) block runs as member j would run expert l on its own rows: the
// same rows in the same order, the same FP8 blocks, the same GEMM shapes, so the same bits.
void LlamaModel::SpreadExpertsForward(MoeMlp& m, bool training) {
  const int64_t c = cfg_.d_model, width = cfg_.moe.moe_intermediate_size;
  const int g = ep_->degree, l = ep_->local_experts();
  std::fill(m.out.begin(), m.out.end(), 0.0f);  // what a failed exchange leaves (the step fails anyway)
  auto ex = moe::ExchangeRowCounts(*ep_, m.dispatch);
  if (!ex.ok()) return;
  m.exchange = std::move(ex).value();
  const int64_t rows = m.exchange.received;
  m.xr.resize(static_cast<size_t>(rows * c));
  m.outr.resize(m.xr.size());
  m.gr.resize(static_cast<size_t>(rows * width));
  m.ur.resize(m.gr.size());
  m.actr.resize(m.gr.size());
  m.kept_xq.resize(static_cast<size_t>(3 * g * l));
  if (!moe::SendRows(*ep_, m.exchange, m.xp.data(), c, m.xr.data()).ok()) return;
  int64_t r0 = 0;
  for (int j = 0; j < g; ++j) {
    for (int e = 0; e < l; ++e) {
      const int64_t m_e = m.exchange.member_expert_rows[static_cast<size_t>(j * l + e)];
      Expert& expert = m.experts[static_cast<size_t>(ep_->first_local_expert() + e)];
      Linear* linears[3] = {&expert.gate, &expert.up, &expert.down};
      for (Linear* lin : linears) lin->xq.resize(static_cast<size_t>(m_e * lin->in));
      SwiGluMlpForward(expert, m.xr.data() + r0 * c, m_e, width, training, m.gr.data() + r0 * width,
                       m.ur.data() + r0 * width, m.actr.data() + r0 * width, m.outr.data() + r0 * c);
      if (training)
        for (int k = 0; k < 3; ++k) m.kept_xq[static_cast<size_t>((j * l + e) * 3 + k)].swap(linears[k]->xq);
      r0 += m_e;
    }
  }
  (void)moe::ReturnRows(*ep_, m.exchange, m.outr.data(), c, m.out.data());
}

// The members' accumulated gradients of this rank's experts come in, each block adds its rows'
// dW to its member's, and they go back: every rank's grads() hold what it would have computed.
void LlamaModel::SpreadExpertsBackward(MoeMlp& m) {
  const int64_t c = cfg_.d_model, width = cfg_.moe.moe_intermediate_size;
  const int g = ep_->degree, l = ep_->local_experts();
  const int64_t size = 3 * width * c, rows = m.exchange.received;
  float* all_experts = grads_.data() + m.experts[0].gate.w;
  m.dr.resize(static_cast<size_t>(rows * c));
  m.dxr.resize(m.dr.size());
  m.member_grads.resize(static_cast<size_t>(g * l * size));
  std::fill_n(moe_dxp_.data(), m.dispatch.rows() * c, 0.0f);  // what a failed exchange leaves
  if (!moe::SendRows(*ep_, m.exchange, moe_dout_.data(), c, m.dr.data()).ok()) return;
  if (!moe::ExchangeWithMembers(*ep_, all_experts, l * size, m.member_grads.data()).ok()) return;
  int64_t r0 = 0;
  for (int j = 0; j < g; ++j) {
    for (int e = 0; e < l; ++e) {
      const int64_t m_e = m.exchange.member_expert_rows[static_cast<size_t>(j * l + e)];
      Expert& expert = m.experts[static_cast<size_t>(ep_->first_local_expert() + e)];
      float* dw = grads_.data() + expert.gate.w;
      float* member = m.member_grads.data() + static_cast<int64_t>(j * l + e) * size;
      std::copy_n(member, size, dw);
      Linear* linears[3] = {&expert.gate, &expert.up, &expert.down};
      for (int k = 0; k < 3; ++k) linears[k]->xq.swap(m.kept_xq[static_cast<size_t>((j * l + e) * 3 + k)]);
      SwiGluMlpBackward(expert, m.dr.data() + r0 * c, m.xr.data() + r0 * c, m.gr.data() + r0 * width,
                        m.ur.data() + r0 * width, m.actr.data() + r0 * width, m_e, width, m.dxr.data() + r0 * c);
      std::copy_n(dw, size, member);
      r0 += m_e;
    }
  }
  if (!moe::ReturnRows(*ep_, m.exchange, m.dxr.data(), c, moe_dxp_.data()).ok()) return;
  (void)moe::ExchangeWithMembers(*ep_, m.member_grads.data(), l * size, all_experts);
}

void LlamaModel::MoeForward(MoeMlp& m, int sparse_index, const float* x, int64_t n, bool training, float* y) {
  const MoeConfig& e = cfg_.moe;
  const int64_t c = cfg_.d_model, experts = e.num_experts, width = e.moe_intermediate_size, k = e.experts_per_token;
  const float* p = params_.data();
  // The router in FP32, outside the recipe.
  m.logits.resize(static_cast<size_t>(n * experts));
  Gemm<float>(false, true, n, experts, c, x, p + m.router, false, m.logits.data());
  moe::Route(e.router, m.logits.data(), m.bias >= 0 ? p + m.bias : nullptr, n, experts, e.experts_per_token,
             e.norm_topk_prob, &m.routing);
  // Capacity is a training device: evaluation is dropless, so a sequence's loss does not
  // depend on the batch it is evaluated in.
  const int64_t capacity = training ? moe::ExpertCapacity(e.capacity_factor, n, k, experts) : 0;
  m.dispatch = moe::BuildDispatch(m.routing, capacity);
  const int64_t rows = m.dispatch.rows();
  m.xp.resize(static_cast<size_t>(rows * c));
  m.g.resize(static_cast<size_t>(ep_ ? 0 : rows * width));  // spread: the group's rows are kept in gr/ur/actr
  m.u.resize(m.g.size());
  m.act.resize(m.g.size());
  m.out.resize(m.xp.size());
  moe::PermuteRows(x, m.dispatch, c, m.xp.data());
  ExpertsForward(m, training);
  std::fill_n(y, n * c, 0.0f);
  moe::Combine(m.out.data(), m.dispatch, m.routing.weight.data(), c, y);
  if (!m.shared.empty()) {
    const int64_t ws = width * e.num_shared_experts;
    m.sg.resize(static_cast<size_t>(n * ws));
    m.su.resize(m.sg.size());
    m.sact.resize(m.sg.size());
    Fit(moe_scratch_, n * c);
    SwiGluMlpForward(m.shared[0], x, n, ws, training, m.sg.data(), m.su.data(), m.sact.data(), moe_scratch_.data());
    Add(y, moe_scratch_.data(), n * c);
  }
  const double aux = e.router == MoeRouter::kSoftmaxTopK ? moe::AuxLoss(m.routing, e.aux_loss_coef) : 0.0;
  aux_loss_ += aux;
  if (!training) return;
  if (routing_counts_.empty()) routing_counts_.assign(static_cast<size_t>(sparse_layers_ * experts + kCountTail), 0.0f);
  const std::vector<int64_t> counts = moe::ExpertCounts(m.routing);
  for (int64_t ex = 0; ex < experts; ++ex)
    routing_counts_[static_cast<size_t>(sparse_index * experts + ex)] += static_cast<float>(counts[static_cast<size_t>(ex)]);
  float* tail = routing_counts_.data() + sparse_layers_ * experts;
  tail[kDropped] += static_cast<float>(m.dispatch.dropped);
  tail[kAssignments] += static_cast<float>(n * k);
  tail[kAuxSum] += static_cast<float>(aux);
  if (sparse_index == 0) tail[kForwards] += 1;
}

void LlamaModel::MoeBackward(MoeMlp& m, const float* dy, const float* x, int64_t n, float loss_scale, float* dx) {
  const MoeConfig& e = cfg_.moe;
  const int64_t c = cfg_.d_model, experts = e.num_experts, width = e.moe_intermediate_size, k = e.experts_per_token;
  const int64_t rows = m.dispatch.rows();
  Fit(moe_dout_, rows * c);
  Fit(moe_dxp_, std::max(rows, n) * c);
  Fit(moe_dweight_, n * k);
  Fit(moe_dlogits_, n * experts);
  moe::CombineBackward(dy, m.out.data(), m.dispatch, m.routing.weight.data(), c, moe_dout_.data(), moe_dweight_.data());
  ExpertsBackward(m);
  moe::PermuteRowsBackward(moe_dxp_.data(), m.dispatch, c, /*accumulate=*/false, dx);
  // The router: through the combine weights, plus the load-balancing loss (softmax-topk).
  moe::RouteBackward(e.router, m.routing, moe_dweight_.data(), e.norm_topk_prob, moe_dlogits_.data());
  if (e.router == MoeRouter::kSoftmaxTopK) moe::AuxLossBackward(m.routing, e.aux_loss_coef, loss_scale, moe_dlogits_.data());
  Gemm<float>(false, false, n, c, experts, moe_dlogits_.data(), params_.data() + m.router, true, dx);
  Gemm<float>(true, false, experts, c, n, moe_dlogits_.data(), x, true, grads_.data() + m.router);
  if (!m.shared.empty()) {
    const int64_t ws = width * e.num_shared_experts;
    SwiGluMlpBackward(m.shared[0], dy, x, m.sg.data(), m.su.data(), m.sact.data(), n, ws, moe_dxp_.data());
    Add(dx, moe_dxp_.data(), n * c);
  }
}

std::vector<float> LlamaModel::TakeRoutingCounts() { return std::exchange(routing_counts_, {}); }

void LlamaModel::FinishRoutingStep(const std::vector<float>& counts) {
  if (counts.empty()) return;
  const MoeConfig& e = cfg_.moe;
  const int64_t experts = e.num_experts;
  FP8_CHECK(counts.size() == static_cast<size_t>(sparse_layers_ * experts + kCountTail));
  MoeRoutingStats st;
  st.present = true;
  st.load_min = INFINITY;
  int sparse_index = 0;
  for (Block& b : blocks_) {
    if (!b.moe) continue;
    const float* load = counts.data() + sparse_index++ * experts;
    const moe::LoadBalance bal = moe::Balance(load, experts);
    st.load_min = std::min(st.load_min, bal.min);
    st.load_max = std::max(st.load_max, bal.max);
    st.load_cv = std::max(st.load_cv, bal.cv);
    if (e.router == MoeRouter::kSigmoidBias && e.bias_update_rate > 0)
      moe::UpdateRouterBias(load, experts, e.bias_update_rate, params_.data() + b.moe->bias);
  }
  const float* tail = counts.data() + sparse_layers_ * experts;
  st.dropped_fraction = tail[kAssignments] > 0 ? tail[kDropped] / tail[kAssignments] : 0.0;
  st.aux_loss = tail[kForwards] > 0 ? tail[kAuxSum] / tail[kForwards] : 0.0;
  routing_stats_ = st;
}

}  // namespace fp8::train
