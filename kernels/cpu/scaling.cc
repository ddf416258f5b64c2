// SPDX-License-Identifier: Apache-2.0
// Scale computation and Transformer-Engine-style delayed scaling (docs/design.md §6).
#include "kernels/scaling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <utility>

namespace fp8::kernels {

float ScaleInvFromAmax(float amax, Fp8Format fmt, ScaleFormat sf) {
  // NaN/Inf amax propagates into the scale on purpose: the tile then dequantizes to NaN and
  // the trainer's non-finite check sees it instead of silently training on clamped garbage.
  if (!(amax >= kAmaxFloor) && !std::isnan(amax)) amax = kAmaxFloor;
  const float scale_inv = amax / Fp8Max(fmt);
  if (sf == ScaleFormat::kFp32 || !std::isfinite(scale_inv)) return scale_inv;
  // ue8m0: round up to a power of two on the bit pattern (exact; no log2 rounding doubts).
  // scale_inv is normal here: amax ≥ 1e-4, so amax / 57344 ≥ 1.7e-9.
  uint32_t bits = std::bit_cast<uint32_t>(scale_inv);
  if ((bits & 0x007FFFFFu) != 0) bits = (bits & 0x7F800000u) + 0x00800000u;
  return std::bit_cast<float>(bits);
}

DelayedScaling::DelayedScaling(DelayedScalingConfig cfg) : cfg_(cfg) {
  cfg_.history_len = std::max(1, cfg_.history_len);
  history_.reserve(static_cast<size_t>(cfg_.history_len));
}

void DelayedScaling::Update(float amax) {
  // A non-finite amax means this step overflowed; like TE we keep the previous scale, and we
  // keep it out of the history so it cannot poison the next history_len steps.
  if (!std::isfinite(amax)) return;
  history_.push_back(std::fabs(amax));
  if (static_cast<int>(history_.size()) > cfg_.history_len) history_.erase(history_.begin());
  const float amax_used = cfg_.algo == AmaxAlgo::kMostRecent
                              ? history_.back()
                              : *std::max_element(history_.begin(), history_.end());
  // An all-zero history carries no information about the range: keep the current scale.
  if (amax_used <= 0.0f) return;
  scale_inv_ = std::ldexp(ScaleInvFromAmax(amax_used, cfg_.fmt, cfg_.scale_format), cfg_.margin);
}

void DelayedScaling::Restore(std::vector<float> history, float scale_inv) {
  if (static_cast<int>(history.size()) > cfg_.history_len) {
    history.erase(history.begin(), history.end() - cfg_.history_len);
  }
  history_ = std::move(history);
  scale_inv_ = scale_inv;
}

}  // namespace fp8::kernels
