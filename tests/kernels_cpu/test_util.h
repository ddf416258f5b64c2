// SPDX-License-Identifier: Apache-2.0
// Shared helpers for the kernels CPU tests: deterministic random matrices and references.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace fp8::kernels::testing {

// Values spanning several binades (like activations with outliers), seeded per test.
inline std::vector<float> RandomMatrix(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> binade(-6.0f, 6.0f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (auto& v : x) v = scale * normal(rng) * std::exp2(std::floor(binade(rng)));
  return x;
}

inline std::vector<float> Transpose(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

// DeepGEMM's similarity check: 1 - 2Σxy / Σ(x² + y²); 0 for identical inputs.
inline double CalcDiff(const std::vector<float>& x, const std::vector<double>& y) {
  double xy = 0, sq = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xy += x[i] * y[i];
    sq += double(x[i]) * x[i] + y[i] * y[i];
  }
  return sq == 0 ? 0.0 : 1.0 - 2.0 * xy / sq;
}

}  // namespace fp8::kernels::testing
