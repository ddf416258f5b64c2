// SPDX-License-Identifier: Apache-2.0
// Per-layer statistics of |x| for static activation scales: a fine histogram with bounded
// memory (the calibration data can be far larger than memory), and the three ways of turning it
// into a clip value (the activation the scale maps to FP8's largest value, 448 for E4M3):
//   max         clip = amax, nothing saturates;
//   percentile  clip = the upper edge of the bin holding the p-th percentile of |x|, so at most
//               (100 - p)% of the values exceed it (bins are 1/64 of a power of two wide: the
//               clip overshoots the exact percentile by less than 1.6%, never undershoots);
//   mse         the clip ≤ amax minimising the quantize→dequantize squared error of the values,
//               searched over the bin edges from amax down to amax/1024 (every 4th, then the
//               neighbours of the best), each bin's values stood in for by its centre. E4M3's relative precision is the same from 2^-6 to
//               448, so a smaller clip only pays where it lifts small values out of the
//               subnormals: on typical activations the mse clip is amax or a little below.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8::calibrate {

class AbsHistogram {
 public:
  AbsHistogram();

  // Adds |x[i]| for every element; NaN/Inf are counted apart (see non_finite()).
  void Add(const float* x, int64_t n);
  void Merge(const AbsHistogram& other);

  uint64_t count() const { return count_; }  // finite values added
  uint64_t non_finite() const { return non_finite_; }
  float amax() const { return amax_; }

  double MaxClip() const { return amax_; }
  // p in (0, 100].
  double PercentileClip(double p) const;
  double MseClip() const;
  // Values possibly above `clip`: exact for clip = amax (0) and for clips on bin edges (all
  // the clips above produce), an upper bound otherwise.
  uint64_t CountAbove(double clip) const;

 private:
  static constexpr int kMinExp = -64;  // frexp exponents below: lumped with the smallest bin
  static constexpr int kMaxExp = 128;
  static constexpr int kSubBins = 64;  // per power of two
  static int BinOf(float a);
  static double LowerEdge(int bin);
  static double UpperEdge(int bin);

  std::vector<uint64_t> bins_;
  uint64_t zeros_ = 0, count_ = 0, non_finite_ = 0;
  float amax_ = 0;
};

// The FP32 input_scale for a clip: max(clip, kernels::kAmaxFloor) / 448 as the kernels compute
// dynamic scales, nudged up so that clip / scale ≤ 448 holds in FP32 arithmetic, hence no
// value ≤ clip saturates. (The floor gives an all-zero input a usable scale.)
float StaticScaleForClip(double clip);

// Quantize → dequantize with a static per-tensor scale (E4M3, saturating): what an FP8 GEMM
// with a static input scale sees. Returns how many elements saturated (|x| / scale > 448).
int64_t FakeQuantizeStatic(const float* x, int64_t n, float scale, float* y);

}  // namespace fp8::calibrate
