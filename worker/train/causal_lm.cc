// SPDX-License-Identifier: Apache-2.0
#include "worker/train/causal_lm.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "worker/data/shards.h"
#include "worker/train/layers.h"
#include "worker/train/llama_model.h"
#include "worker/train/model.h"

namespace fp8::train {

void AddParamTensor(std::vector<ParamTensor>* layout, const std::string& name, std::vector<int64_t> shape, bool decay) {
  ParamTensor t;
  t.name = name;
  t.numel = 1;
  for (int64_t d : shape) t.numel *= d;
  t.shape = std::move(shape);
  t.offset = layout->empty() ? 0 : layout->back().offset + layout->back().numel;
  t.weight_decay = decay;
  layout->push_back(std::move(t));
}

double SeededNormal::Uniform() {
  return (static_cast<double>(data::Mix64(data::Mix64(seed_) + counter_++) >> 11) + 0.5) * 0x1.0p-53;
}

double SeededNormal::operator()() {
  const double u1 = Uniform(), u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

CausalLm::CausalLm(const ModelConfig& cfg, const PrecisionConfig& precision, std::vector<ParamTensor> layout)
    : cfg_(cfg), precision_(precision), tensors_(std::move(layout)) {
  params_.assign(static_cast<size_t>(tensors_.back().offset + tensors_.back().numel), 0.0f);
  grads_.assign(params_.size(), 0.0f);
}

int64_t CausalLm::OffsetOf(const std::string& name) const {
  const auto it = std::find_if(tensors_.begin(), tensors_.end(), [&](const ParamTensor& t) { return t.name == name; });
  FP8_CHECK(it != tensors_.end());
  return it->offset;
}

void CausalLm::RegisterLinear(Linear& l, const std::string& name, int64_t in, int64_t out, bool bias) {
  l.name = name;
  l.in = in;
  l.out = out;
  l.w = OffsetOf(name + ".weight");
  l.b = bias ? OffsetOf(name + ".bias") : -1;
  l.precision = LinearPrecision(precision_);
  linears_.push_back(&l);
}

void CausalLm::ResizeLinears(int64_t rows) {
  for (Linear* l : linears_) {
    l->xq.resize(static_cast<size_t>(rows * l->in));
    l->wq.resize(static_cast<size_t>(l->in * l->out));
  }
}

void CausalLm::ZeroGrad() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void CausalLm::LinearFwd(Linear& l, const float* x, int64_t m, float* y, bool training) {
  // Evaluation must not move the delayed-scaling history: quantize with a copy of the state.
  std::optional<LinearPrecision> frozen;
  LinearPrecision& precision = training ? l.precision : frozen.emplace(l.precision);
  const bool hooked = input_hook_ && input_hook_(l.name, x, m, l.in, l.xq.data());
  if (!hooked) precision.InputFwd(x, m, l.in, l.xq.data());
  precision.WeightFwd(params_.data() + l.w, l.out, l.in, l.wq.data());
  LinearForward<float>(l.xq.data(), l.wq.data(), l.b >= 0 ? params_.data() + l.b : nullptr, m, l.in, l.out, y);
}

void CausalLm::LinearBwd(Linear& l, const float* dy, const float* x, int64_t m, float* dx) {
  auto fit = [](std::vector<float>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  };
  fit(gq_, m * l.out);
  l.precision.GradForDx(dy, m, l.out, gq_.data());
  const float* dy_w = gq_.data();
  const float* x_w = l.xq.data();
  if (l.precision.NeedsSeparateDw()) {
    fit(gw_, m * l.out);
    fit(xw_, m * l.in);
    l.precision.GradForDw(dy, m, l.out, gw_.data());
    l.precision.InputForDw(x, m, l.in, xw_.data());
    dy_w = gw_.data();
    x_w = xw_.data();
  }
  // The bias gradient is a plain FP32 sum of dy: no GEMM involved.
  LinearBackward<float>(gq_.data(), l.wq.data(), dy_w, x_w, dy, m, l.in, l.out, dx, grads_.data() + l.w,
                        l.b >= 0 ? grads_.data() + l.b : nullptr);
}

void CausalLm::FinishBackward() {
  if (!defer_scaling_updates_)
    for (Linear* l : linears_) l->precision.ApplyPendingAmaxes(nullptr);
}

double CausalLm::LossFromLogits(float* logits, const int32_t* targets, int64_t n) {
  const int64_t v = cfg_.vocab_size;
  if (keep_logits_) logits_.assign(logits, logits + n * v);
  return CrossEntropyForward<float>(logits, targets, n, v);
}

std::vector<std::string> CausalLm::LinearLayerNames() const {
  std::vector<std::string> out;
  for (const Linear* l : linears_) out.push_back(l->name);
  return out;
}

std::vector<float> CausalLm::PendingAmaxes() const {
  std::vector<float> out;
  for (const Linear* l : linears_) l->precision.AppendPendingAmaxes(&out);
  return out;
}

void CausalLm::ApplyPendingAmaxes(const std::vector<float>& reduced) {
  const float* next = reduced.data();
  for (Linear* l : linears_) next = l->precision.ApplyPendingAmaxes(next);
  FP8_CHECK(next == reduced.data() + reduced.size());  // one value per waiting amax, no more
}

Fp8CastStats CausalLm::TakeFp8CastStats() {
  Fp8CastStats all;
  for (Linear* l : linears_) all.Merge(l->precision.TakeCastStats());
  return all;
}

nlohmann::json CausalLm::PrecisionState() const {
  nlohmann::json out = nlohmann::json::object();
  if (precision_.recipe != Recipe::kFp8Tensorwise) return out;
  for (const Linear* l : linears_) out[l->name] = l->precision.State();
  return out;
}

Status CausalLm::RestorePrecisionState(const nlohmann::json& state) {
  if (precision_.recipe != Recipe::kFp8Tensorwise) return OkStatus();
  for (Linear* l : linears_) {
    if (!state.contains(l->name)) return DataLossError("fp8 scaling state lacks " + l->name);
    FP8_RETURN_IF_ERROR(l->precision.Restore(state[l->name]));
  }
  return OkStatus();
}

std::unique_ptr<CausalLm> MakeCausalLm(const ModelConfig& cfg, const PrecisionConfig& precision) {
  switch (cfg.architecture) {
    case Architecture::kGpt2: return std::make_unique<GptModel>(cfg, precision);
    case Architecture::kLlama: return std::make_unique<LlamaModel>(cfg, precision);
  }
  return nullptr;
}

std::vector<ParamTensor> CausalLmParamLayout(const ModelConfig& cfg) {
  return cfg.architecture == Architecture::kLlama ? LlamaParamLayout(cfg) : GptParamLayout(cfg);
}

}  // namespace fp8::train
