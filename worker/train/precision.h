// SPDX-License-Identifier: Apache-2.0
// How a recipe turns the operands of one linear layer's three GEMMs into what the GEMM sees
// (docs/design.md §6). On the CPU an FP8 GEMM is FakeQuantize (FP8 cast, scales) + FP32 Sgemm:
// the same numbers an FP8 tensor-core GEMM with FP32 accumulation produces, up to summation order.
//
//   forward   y  = x·Wᵀ      x: E4M3 (tensor | 1x128)   W: E4M3 (tensor | 128x128)
//   backward  dx = dy·W      dy: E5M2 tensor | E4M3 1x128 along N;  W as forward
//             dW = dyᵀ·x     dy: E5M2 tensor | E4M3 128x1 along M;  x: forward cast | E4M3 128x1
// bf16 rounds every operand to bf16; fp32 (tests only) passes them through.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kernels/scaling.h"
#include "worker/train/spec.h"

namespace fp8::train {

// What the FP8 casts of a span of steps saw, for the worker's progress events: the largest
// amax of any cast, and how many elements were clipped to the format's max (saturated).
struct Fp8CastStats {
  float amax_max = 0;
  int64_t saturated = 0;
  int64_t elements = 0;
  void Merge(const Fp8CastStats& o) {
    amax_max = amax_max > o.amax_max ? amax_max : o.amax_max;
    saturated += o.saturated;
    elements += o.elements;
  }
};

class LinearPrecision {
 public:
  LinearPrecision() = default;
  explicit LinearPrecision(const PrecisionConfig& cfg);

  // Each writes the GEMM operand into `out` (same shape as the input). The *Fwd calls must
  // come before the backward calls of the same micro-step (tensorwise reuses their scales).
  void InputFwd(const float* x, int64_t m, int64_t k, float* out);
  void WeightFwd(const float* w, int64_t n, int64_t k, float* out);
  void GradForDx(const float* dy, int64_t m, int64_t n, float* out);
  // Only for recipes where dW's operands differ from the dx/forward ones (NeedsSeparateDw()).
  void GradForDw(const float* dy, int64_t m, int64_t n, float* out);
  void InputForDw(const float* x, int64_t m, int64_t k, float* out);
  bool NeedsSeparateDw() const { return cfg_.recipe == Recipe::kFp8Blockwise; }

  // fp8-tensorwise: a cast is scaled from the history as it stood before the step, and its amax
  // waits here until ApplyPendingAmaxes feeds it in, so data-parallel ranks can first reduce
  // the amaxes (max) and keep one history. Appends the waiting amaxes (x, W, dy order) to *out.
  void AppendPendingAmaxes(std::vector<float>* out) const;
  // Feeds the waiting amaxes into the histories: the values from `amaxes` (consumed in the
  // order AppendPendingAmaxes gave them; returns the position after them), or the layer's own
  // when `amaxes` is null.
  const float* ApplyPendingAmaxes(const float* amaxes);

  // The FP8 casts since the last TakeCastStats (empty for the bf16/fp32 recipes). Blockwise
  // scales come from each block's own amax, so nothing saturates; tensorwise scales come from
  // the history, so a growing tensor clips.
  Fp8CastStats TakeCastStats() { return std::exchange(cast_stats_, {}); }

  // Delayed-scaling state (tensorwise), for checkpoints.
  nlohmann::json State() const;
  Status Restore(const nlohmann::json& state);

 private:
  enum Slot { kX, kW, kDy };
  void Tensorwise(Slot slot, const float* x, int64_t n, float* out);
  void Blockwise(const float* x, int64_t rows, int64_t cols, int granularity, float* out);

  PrecisionConfig cfg_;
  kernels::DelayedScaling x_scale_, w_scale_, dy_scale_;
  struct PendingAmax {
    float amax = 0;
    bool set = false;
  };
  PendingAmax pending_[3];
  Fp8CastStats cast_stats_;
  kernels::DelayedScaling& Scaling(Slot slot) { return slot == kX ? x_scale_ : slot == kW ? w_scale_ : dy_scale_; }
};

// Round to bf16 and back (round to nearest even), elementwise.
void RoundToBf16(const float* x, int64_t n, float* out);

}  // namespace fp8::train
