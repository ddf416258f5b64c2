// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/activation_histogram.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/fp8_format.h"
#include "kernels/quantize.h"
#include "kernels/scaling.h"

namespace fp8::calibrate {

namespace {
constexpr float kFp8Max = kernels::kE4M3Max;
}  // namespace

AbsHistogram::AbsHistogram() : bins_(static_cast<size_t>((kMaxExp - kMinExp + 1) * kSubBins), 0) {}

// |x| = m·2^e with m in [0.5, 1): bin (e, floor((m - 0.5)·128)). Both steps are exact in
// floating point, so a value always lies strictly below its bin's upper edge.
int AbsHistogram::BinOf(float a) {
  int e = 0;
  const double m = std::frexp(static_cast<double>(a), &e);
  if (e < kMinExp) return 0;
  const int sub = static_cast<int>((m - 0.5) * (2 * kSubBins));
  return (e - kMinExp) * kSubBins + sub;
}

double AbsHistogram::LowerEdge(int bin) {
  const int e = bin / kSubBins + kMinExp, sub = bin % kSubBins;
  return std::ldexp(static_cast<double>(kSubBins + sub), e - 7);  // (0.5 + sub/128)·2^e
}

double AbsHistogram::UpperEdge(int bin) { return LowerEdge(bin + 1); }

void AbsHistogram::Add(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (!std::isfinite(a)) {
      ++non_finite_;
      continue;
    }
    ++count_;
    if (a == 0.0f) {
      ++zeros_;
      continue;
    }
    amax_ = std::max(amax_, a);
    ++bins_[static_cast<size_t>(BinOf(a))];
  }
}

void AbsHistogram::Merge(const AbsHistogram& o) {
  for (size_t i = 0; i < bins_.size(); ++i) bins_[i] += o.bins_[i];
  zeros_ += o.zeros_;
  count_ += o.count_;
  non_finite_ += o.non_finite_;
  amax_ = std::max(amax_, o.amax_);
}

double AbsHistogram::PercentileClip(double p) const {
  if (count_ == 0 || amax_ == 0) return amax_;
  // At most this many values may lie above the clip.
  const auto allowed = static_cast<uint64_t>(std::floor((100.0 - p) / 100.0 * static_cast<double>(count_)));
  uint64_t above = 0;
  for (int b = static_cast<int>(bins_.size()) - 1; b >= 0; --b) {
    if (above + bins_[static_cast<size_t>(b)] > allowed) return std::min<double>(UpperEdge(b), amax_);
    above += bins_[static_cast<size_t>(b)];
  }
  // More than p% of the values are exactly zero: any positive clip satisfies the promise; keep
  // the smallest non-empty bin's edge so the non-zero values are not all flushed.
  for (size_t b = 0; b < bins_.size(); ++b)
    if (bins_[b]) return std::min<double>(UpperEdge(static_cast<int>(b)), amax_);
  return amax_;
}

uint64_t AbsHistogram::CountAbove(double clip) const {
  if (clip >= amax_) return 0;
  uint64_t above = 0;
  for (size_t b = 0; b < bins_.size(); ++b)
    if (UpperEdge(static_cast<int>(b)) > clip) above += bins_[b];
  return above;
}

double AbsHistogram::MseClip() const {
  if (count_ == 0 || amax_ == 0) return amax_;
  struct Rep {
    double value, count;
  };
  std::vector<Rep> reps;  // non-empty bins: centre (≤ amax) and count
  for (size_t b = 0; b < bins_.size(); ++b) {
    if (!bins_[b]) continue;
    const double centre = 0.5 * (LowerEdge(static_cast<int>(b)) + UpperEdge(static_cast<int>(b)));
    reps.push_back({std::min<double>(centre, amax_), static_cast<double>(bins_[b])});
  }
  auto error = [&](double clip) {
    const float scale = StaticScaleForClip(clip);
    double err = 0;
    for (const Rep& r : reps) {
      const float v = static_cast<float>(r.value);
      const float q = kernels::Fp8ToFloat(kernels::FloatToFp8(v / scale, kernels::Fp8Format::kE4M3), kernels::Fp8Format::kE4M3);
      const double d = static_cast<double>(v) - static_cast<double>(q) * scale;
      err += r.count * d * d;
    }
    return err;
  };
  // Coarse to fine: every 4th bin edge from amax down to amax/1024, then every edge next to
  // the best coarse one (the error is smooth on the scale of a few bins, and 4x fewer error
  // evaluations matter: each costs one FP8 cast per non-empty bin). Ties keep the larger clip
  // (fewer saturated values).
  double best_clip = amax_, best_err = error(amax_);
  auto consider = [&](int b) {
    const double e = error(UpperEdge(b));
    if (e < best_err || (e == best_err && UpperEdge(b) > best_clip)) {
      best_err = e;
      best_clip = UpperEdge(b);
    }
  };
  const int top = BinOf(amax_);
  const double floor_clip = amax_ / 1024.0;
  constexpr int kCoarse = 4;
  int best_bin = top;
  for (int b = top - 1; b >= 0 && UpperEdge(b) >= floor_clip; b -= kCoarse) {
    const double before = best_clip;
    consider(b);
    if (best_clip != before) best_bin = b;
  }
  for (int b = std::min(top - 1, best_bin + kCoarse - 1); b >= std::max(0, best_bin - kCoarse + 1); --b)
    if (b != best_bin) consider(b);
  return best_clip;
}

float StaticScaleForClip(double clip) {
  const float c = static_cast<float>(clip);
  float scale = kernels::ScaleInvFromAmax(c, kernels::Fp8Format::kE4M3, kernels::ScaleFormat::kFp32);
  while (c / scale > kFp8Max) scale = std::nextafter(scale, std::numeric_limits<float>::infinity());
  return scale;
}

int64_t FakeQuantizeStatic(const float* x, int64_t n, float scale, float* y) {
  // kTensor with a given scale cannot fail (scale is finite and > 0).
  (void)kernels::FakeQuantize(x, 1, n, kernels::Granularity::kTensor, kernels::Fp8Format::kE4M3,
                              kernels::ScaleFormat::kFp32, scale, y, nullptr);
  int64_t saturated = 0;
  for (int64_t i = 0; i < n; ++i) saturated += std::fabs(x[i]) / scale > kFp8Max;
  return saturated;
}

}  // namespace fp8::calibrate
