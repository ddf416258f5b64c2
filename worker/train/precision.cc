// SPDX-License-Identifier: Apache-2.0
#include "worker/train/precision.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/fp8_format.h"
#include "kernels/parallel.h"
#include "kernels/quantize.h"

namespace fp8::train {

using kernels::Fp8Format;
using kernels::Granularity;

namespace {
kernels::DelayedScalingConfig ScalingConfig(const PrecisionConfig& cfg, Fp8Format fmt) {
  kernels::DelayedScalingConfig c;
  c.history_len = cfg.amax_history_len;
  c.margin = cfg.margin;
  c.algo = cfg.amax_most_recent ? kernels::AmaxAlgo::kMostRecent : kernels::AmaxAlgo::kMax;
  c.fmt = fmt;
  c.scale_format = cfg.ue8m0 ? kernels::ScaleFormat::kUe8m0 : kernels::ScaleFormat::kFp32;
  return c;
}
}  // namespace

LinearPrecision::LinearPrecision(const PrecisionConfig& cfg)
    : cfg_(cfg),
      x_scale_(ScalingConfig(cfg, Fp8Format::kE4M3)),
      w_scale_(ScalingConfig(cfg, Fp8Format::kE4M3)),
      dy_scale_(ScalingConfig(cfg, Fp8Format::kE5M2)) {}

void RoundToBf16(const float* x, int64_t n, float* out) {
  // kernels::FloatToBf16 bit for bit (tested), written branch-free so the loop vectorizes: the
  // out-of-line call per element made the bf16 recipe slower than fp32.
  kernels::ParallelFor(n, 8192, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const uint32_t b = std::bit_cast<uint32_t>(x[i]);
      const uint32_t rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
      const bool nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
      out[i] = std::bit_cast<float>(nan ? 0x7FFF0000u : rounded);
    }
  });
}

void LinearPrecision::Tensorwise(Slot slot, const float* x, int64_t n, float* out) {
  kernels::DelayedScaling& ds = Scaling(slot);
  const float amax = kernels::Amax(x, n);
  float scale_inv = ds.scale_inv();
  // The very first cast has no history: use the current amax rather than the initial scale of 1,
  // which would flush every gradient below E5M2's smallest subnormal on step 0.
  if (ds.history().empty()) {
    kernels::DelayedScaling first = ds;
    first.Update(amax);
    scale_inv = first.scale_inv();
  }
  FP8_CHECK_OK(kernels::FakeQuantize(x, 1, n, Granularity::kTensor, ds.config().fmt, ds.config().scale_format, scale_inv,
                                     out, nullptr));
  pending_[slot] = {amax, true};
  // Clipped: |x| / scale_inv beyond the format's max. One compare per element, next to a GEMM.
  const float limit = kernels::Fp8Max(ds.config().fmt) * scale_inv;
  int64_t clipped = 0;
  for (int64_t i = 0; i < n; ++i) clipped += std::fabs(x[i]) > limit;
  cast_stats_.Merge({amax, clipped, n});
}

void LinearPrecision::AppendPendingAmaxes(std::vector<float>* out) const {
  for (const PendingAmax& p : pending_)
    if (p.set) out->push_back(p.amax);
}

const float* LinearPrecision::ApplyPendingAmaxes(const float* amaxes) {
  for (Slot slot : {kX, kW, kDy}) {
    PendingAmax& p = pending_[slot];
    if (!p.set) continue;
    Scaling(slot).Update(amaxes ? *amaxes++ : p.amax);
    p.set = false;
  }
  return amaxes;
}

void LinearPrecision::Blockwise(const float* x, int64_t rows, int64_t cols, int granularity, float* out) {
  const auto sf = cfg_.ue8m0 ? kernels::ScaleFormat::kUe8m0 : kernels::ScaleFormat::kFp32;
  FP8_CHECK_OK(kernels::FakeQuantize(x, rows, cols, static_cast<Granularity>(granularity), Fp8Format::kE4M3,
                                     sf, 1.0f, out, nullptr));
  cast_stats_.Merge({kernels::Amax(x, rows * cols), 0, rows * cols});
}

void LinearPrecision::InputFwd(const float* x, int64_t m, int64_t k, float* out) {
  switch (cfg_.recipe) {
    case Recipe::kFp32: std::memcpy(out, x, sizeof(float) * m * k); break;
    case Recipe::kBf16: RoundToBf16(x, m * k, out); break;
    case Recipe::kFp8Tensorwise: Tensorwise(kX, x, m * k, out); break;
    case Recipe::kFp8Blockwise: Blockwise(x, m, k, static_cast<int>(Granularity::k1x128), out); break;
  }
}

void LinearPrecision::WeightFwd(const float* w, int64_t n, int64_t k, float* out) {
  switch (cfg_.recipe) {
    case Recipe::kFp32: std::memcpy(out, w, sizeof(float) * n * k); break;
    case Recipe::kBf16: RoundToBf16(w, n * k, out); break;
    case Recipe::kFp8Tensorwise: Tensorwise(kW, w, n * k, out); break;
    case Recipe::kFp8Blockwise: Blockwise(w, n, k, static_cast<int>(Granularity::k128x128), out); break;
  }
}

void LinearPrecision::GradForDx(const float* dy, int64_t m, int64_t n, float* out) {
  switch (cfg_.recipe) {
    case Recipe::kFp32: std::memcpy(out, dy, sizeof(float) * m * n); break;
    case Recipe::kBf16: RoundToBf16(dy, m * n, out); break;
    case Recipe::kFp8Tensorwise: Tensorwise(kDy, dy, m * n, out); break;
    case Recipe::kFp8Blockwise: Blockwise(dy, m, n, static_cast<int>(Granularity::k1x128), out); break;
  }
}

void LinearPrecision::GradForDw(const float* dy, int64_t m, int64_t n, float* out) {
  FP8_CHECK(NeedsSeparateDw());
  Blockwise(dy, m, n, static_cast<int>(Granularity::k128x1), out);
}

void LinearPrecision::InputForDw(const float* x, int64_t m, int64_t k, float* out) {
  FP8_CHECK(NeedsSeparateDw());
  Blockwise(x, m, k, static_cast<int>(Granularity::k128x1), out);
}

nlohmann::json LinearPrecision::State() const {
  if (cfg_.recipe != Recipe::kFp8Tensorwise) return nlohmann::json::object();
  auto one = [](const kernels::DelayedScaling& ds) {
    return nlohmann::json{{"amax_history", ds.history()}, {"scale_inv", ds.scale_inv()}};
  };
  return {{"x", one(x_scale_)}, {"w", one(w_scale_)}, {"dy", one(dy_scale_)}};
}

Status LinearPrecision::Restore(const nlohmann::json& state) {
  if (cfg_.recipe != Recipe::kFp8Tensorwise) return OkStatus();
  for (auto [key, ds] : {std::pair{"x", &x_scale_}, std::pair{"w", &w_scale_}, std::pair{"dy", &dy_scale_}}) {
    if (!state.contains(key) || !state[key].contains("amax_history") || !state[key].contains("scale_inv"))
      return DataLossError(std::string("fp8 scaling state lacks '") + key + "'");
    ds->Restore(state[key]["amax_history"].get<std::vector<float>>(), state[key]["scale_inv"].get<float>());
  }
  return OkStatus();
}

}  // namespace fp8::train
