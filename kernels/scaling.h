// SPDX-License-Identifier: Apache-2.0
// Scales (docs/design.md §6): scale_inv = max(amax, kAmaxFloor) / fp8_max in FP32, or rounded
// up to a power of two (ue8m0). Quantization divides by scale_inv: q = cast(x / scale_inv);
// dequantization multiplies: x ≈ float(q) * scale_inv. (DeepSeek-V3 stores scale_inv.)
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/fp8_format.h"

namespace fp8::kernels {

enum class ScaleFormat : uint8_t {
  kFp32,   // scale_inv = amax / fp8_max
  kUe8m0,  // scale_inv = 2^ceil(log2(amax / fp8_max)): exact power of two, never saturates
};

// Floor on amax so an all-zero tile yields a finite, non-zero scale (DeepSeek uses 1e-4).
constexpr float kAmaxFloor = 1e-4f;

float ScaleInvFromAmax(float amax, Fp8Format fmt, ScaleFormat sf);

// Transformer Engine style delayed scaling for per-tensor FP8: the scale used at step t comes
// from the amax history of earlier steps.
enum class AmaxAlgo : uint8_t { kMax, kMostRecent };

struct DelayedScalingConfig {
  int history_len = 16;
  int margin = 0;  // scale_inv is multiplied by 2^margin (headroom)
  AmaxAlgo algo = AmaxAlgo::kMax;
  Fp8Format fmt = Fp8Format::kE4M3;
  ScaleFormat scale_format = ScaleFormat::kFp32;
};

class DelayedScaling {
 public:
  explicit DelayedScaling(DelayedScalingConfig cfg = {});

  // scale_inv to use for the next cast. Before any amax was recorded it is 1.
  float scale_inv() const { return scale_inv_; }
  // Records the amax observed in the cast that just used scale_inv(), rolls the history and
  // recomputes scale_inv from it.
  void Update(float amax);

  const DelayedScalingConfig& config() const { return cfg_; }
  // For checkpoints: the history, oldest first, and the current scale.
  const std::vector<float>& history() const { return history_; }
  void Restore(std::vector<float> history, float scale_inv);

 private:
  DelayedScalingConfig cfg_;
  std::vector<float> history_;  // newest last, at most history_len entries
  float scale_inv_ = 1.0f;
};

}  // namespace fp8::kernels
