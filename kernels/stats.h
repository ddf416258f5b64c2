// Numerics statistics of a quantize→dequantize round trip, for reports (calibration, trainer).
#pragma once

#include <cstdint>

namespace fp8::kernels {

struct QuantStats {
  double amax = 0;             // max |x|
  double frac_saturated = 0;   // fraction of elements whose |x/scale_inv| exceeded fp8 max
  double frac_flushed = 0;     // fraction of non-zero x that became 0
  double rel_error = 0;        // ||x - deq(q(x))|| / ||x||  (0 when x is all zero)
  double snr_db = 0;           // 10·log10(Σx² / Σ(x-x̂)²); +inf when exact
  double scale_inv_min = 0;
  double scale_inv_max = 0;
};

// `x` original, `x_hat` its round trip, `scaled_abs_max_exceeded` counted by the caller or via
// ComputeQuantStats below.
QuantStats ComputeQuantStats(const float* x, const float* x_hat, int64_t n,
                             int64_t n_saturated, const float* scale_inv, int64_t n_scales);

}  // namespace fp8::kernels
