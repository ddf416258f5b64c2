// SPDX-License-Identifier: Apache-2.0
#include "worker/train/optimizer.h"

#include <cmath>

#include "kernels/fp8_format.h"
#include "kernels/parallel.h"

namespace fp8::train {

double LearningRateAt(const TrainingConfig& t, int64_t step) {
  if (step < t.warmup_steps) return t.learning_rate * static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, t.warmup_steps));
  const double progress = static_cast<double>(step - t.warmup_steps) /
                          static_cast<double>(std::max<int64_t>(1, t.max_steps - t.warmup_steps));
  switch (t.lr_scheduler_type) {
    case LrSchedule::kConstant: return t.learning_rate;
    case LrSchedule::kLinear: return t.learning_rate * std::max(0.0, 1.0 - progress);
    case LrSchedule::kCosine: return t.learning_rate * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  }
  return t.learning_rate;
}

AdamW::AdamW(const TrainingConfig& cfg, bool bf16_moments, const std::vector<ParamTensor>& tensors,
             int64_t num_params)
    : cfg_(cfg), bf16_(bf16_moments), decay_mask_(static_cast<size_t>(num_params), 0) {
  for (const ParamTensor& t : tensors)
    if (t.weight_decay) std::fill(decay_mask_.begin() + t.offset, decay_mask_.begin() + t.offset + t.numel, 1);
  if (bf16_) {
    m16_.assign(static_cast<size_t>(num_params), 0);
    v16_.assign(static_cast<size_t>(num_params), 0);
  } else {
    m32_.assign(static_cast<size_t>(num_params), 0.0f);
    v32_.assign(static_cast<size_t>(num_params), 0.0f);
  }
}

void AdamW::Step(float* params, const float* grads, double lr, int64_t step) {
  const float b1 = static_cast<float>(cfg_.adam_beta1), b2 = static_cast<float>(cfg_.adam_beta2);
  const float bc1 = static_cast<float>(1.0 - std::pow(cfg_.adam_beta1, static_cast<double>(step)));
  const float bc2 = static_cast<float>(1.0 - std::pow(cfg_.adam_beta2, static_cast<double>(step)));
  const float lrf = static_cast<float>(lr), eps = static_cast<float>(cfg_.adam_epsilon);
  const float wd = static_cast<float>(cfg_.weight_decay);
  const int64_t n = static_cast<int64_t>(decay_mask_.size());
  kernels::ParallelFor(n, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float g = grads[i];
      float m = bf16_ ? kernels::Bf16ToFloat(m16_[i]) : m32_[i];
      float v = bf16_ ? kernels::Bf16ToFloat(v16_[i]) : v32_[i];
      m = b1 * m + (1.0f - b1) * g;
      v = b2 * v + (1.0f - b2) * g * g;
      if (bf16_) {
        m16_[i] = kernels::FloatToBf16(m);
        v16_[i] = kernels::FloatToBf16(v);
      } else {
        m32_[i] = m;
        v32_[i] = v;
      }
      const float mhat = m / bc1, vhat = v / bc2;
      float p = params[i];
      if (decay_mask_[i]) p -= lrf * wd * p;
      params[i] = p - lrf * mhat / (std::sqrt(vhat) + eps);
    }
  });
}

std::vector<float> AdamW::m() const {
  if (!bf16_) return m32_;
  std::vector<float> out(m16_.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = kernels::Bf16ToFloat(m16_[i]);
  return out;
}

std::vector<float> AdamW::v() const {
  if (!bf16_) return v32_;
  std::vector<float> out(v16_.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = kernels::Bf16ToFloat(v16_[i]);
  return out;
}

void AdamW::Restore(const std::vector<float>& m, const std::vector<float>& v) {
  if (!bf16_) {
    m32_ = m;
    v32_ = v;
    return;
  }
  // Exact: the values came from BF16 in the first place.
  for (size_t i = 0; i < m.size(); ++i) {
    m16_[i] = kernels::FloatToBf16(m[i]);
    v16_[i] = kernels::FloatToBf16(v[i]);
  }
}

double GlobalNorm(const float* g, int64_t n) {
  // Fixed-size chunks summed in chunk order: the same result for any thread count.
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  kernels::ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) s += static_cast<double>(g[i]) * g[i];
      partial[static_cast<size_t>(c)] = s;
    }
  });
  double total = 0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

}  // namespace fp8::train
