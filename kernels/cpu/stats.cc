// SPDX-License-Identifier: Apache-2.0
// Round-trip statistics in double precision (reports, not hot paths).
#include "kernels/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/quantize.h"

namespace fp8::kernels {

QuantStats ComputeQuantStats(const float* x, const float* x_hat, int64_t n,
                             int64_t n_saturated, const float* scale_inv, int64_t n_scales) {
  QuantStats s;
  if (n <= 0) return s;
  double sum_sq = 0, err_sq = 0;
  int64_t nonzero = 0, flushed = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i], h = x_hat[i];
    s.amax = std::max(s.amax, std::fabs(v));
    sum_sq += v * v;
    err_sq += (v - h) * (v - h);
    if (v != 0) {
      ++nonzero;
      if (h == 0) ++flushed;
    }
  }
  s.frac_saturated = static_cast<double>(n_saturated) / static_cast<double>(n);
  s.frac_flushed = nonzero > 0 ? static_cast<double>(flushed) / static_cast<double>(nonzero) : 0.0;
  s.rel_error = sum_sq > 0 ? std::sqrt(err_sq / sum_sq) : 0.0;
  if (err_sq == 0) {
    s.snr_db = std::numeric_limits<double>::infinity();
  } else {
    s.snr_db = 10.0 * std::log10(sum_sq / err_sq);
  }
  if (scale_inv != nullptr && n_scales > 0) {
    const auto [lo, hi] = std::minmax_element(scale_inv, scale_inv + n_scales);
    s.scale_inv_min = *lo;
    s.scale_inv_max = *hi;
  }
  return s;
}

int64_t CountSaturated(const float* x, int64_t rows, int64_t cols, Granularity g, Fp8Format fmt,
                       const float* scale_inv) {
  const int64_t col_tiles = CeilDiv(cols, kTile);
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float s = 0;
      switch (g) {
        case Granularity::kTensor: s = scale_inv[0]; break;
        case Granularity::k1x128: s = scale_inv[r * col_tiles + c / kTile]; break;
        case Granularity::k128x1: s = scale_inv[(r / kTile) * cols + c]; break;
        case Granularity::k128x128: s = scale_inv[(r / kTile) * col_tiles + c / kTile]; break;
      }
      // Saturated = the clamp changed the result: the satfinite and the non-saturating casts of
      // the same FP32 quotient differ (so 448.00003, which rounds to 448 anyway, does not count).
      const float v = x[r * cols + c] / s;
      count += FloatToFp8(v, fmt, Saturation::kSatFinite) != FloatToFp8(v, fmt, Saturation::kNoSat);
    }
  }
  return count;
}

}  // namespace fp8::kernels
