// SPDX-License-Identifier: Apache-2.0
// Numerics statistics of a quantize→dequantize round trip, for reports (calibration, trainer).
#pragma once

#include <cstdint>

#include "kernels/quantize.h"

namespace fp8::kernels {

struct QuantStats {
  double amax = 0;             // max |x|
  double frac_saturated = 0;   // fraction of elements clamped to ±fp8 max (see CountSaturated)
  double frac_flushed = 0;     // fraction of non-zero x that became 0
  double rel_error = 0;        // ||x - deq(q(x))|| / ||x||  (0 when x is all zero)
  double snr_db = 0;           // 10·log10(Σx² / Σ(x-x̂)²); +inf when exact
  double scale_inv_min = 0;
  double scale_inv_max = 0;
};

// `x` original, `x_hat` its round trip, `n_saturated` counted by the caller (CountSaturated
// below), scale_inv the scales used (min/max reported; may be null).
QuantStats ComputeQuantStats(const float* x, const float* x_hat, int64_t n,
                             int64_t n_saturated, const float* scale_inv, int64_t n_scales);

// Elements the saturating cast clamped: |x / scale_inv| rounds beyond the format's max (or is
// infinite). scale_inv in the layout of `g` (see quantize.h; one value for kTensor).
int64_t CountSaturated(const float* x, int64_t rows, int64_t cols, Granularity g, Fp8Format fmt,
                       const float* scale_inv);

}  // namespace fp8::kernels
