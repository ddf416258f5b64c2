// SPDX-License-Identifier: Apache-2.0
// AdamW over the flat parameter buffer (decoupled weight decay on 2-D tensors only), FP32
// moments or BF16 moments (rounded to nearest even after every update), and the learning-rate
// schedules of Hugging Face's get_scheduler (linear warmup, then cosine/linear decay to 0, or
// constant).
#pragma once

#include <cstdint>
#include <vector>

#include "worker/train/model.h"
#include "worker/train/spec.h"

namespace fp8::train {

double LearningRateAt(const TrainingConfig& t, int64_t step);  // step: 0-based, before update

class AdamW {
 public:
  AdamW(const TrainingConfig& cfg, bool bf16_moments, const std::vector<ParamTensor>& tensors,
        int64_t num_params);

  // One update with learning rate `lr`; `step` is 1-based (bias correction).
  void Step(float* params, const float* grads, double lr, int64_t step);

  // Moments as FP32 arrays (converted from BF16 when stored that way), for checkpoints.
  std::vector<float> m() const;
  std::vector<float> v() const;
  void Restore(const std::vector<float>& m, const std::vector<float>& v);
  bool bf16_moments() const { return bf16_; }

 private:
  TrainingConfig cfg_;
  bool bf16_;
  std::vector<uint8_t> decay_mask_;
  std::vector<float> m32_, v32_;
  std::vector<uint16_t> m16_, v16_;
};

// sqrt(Σ g²), summed in double in a fixed order.
double GlobalNorm(const float* g, int64_t n);

}  // namespace fp8::train
