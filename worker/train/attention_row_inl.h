// SPDX-License-Identifier: Apache-2.0
// The per-row pieces of the CPU attention that GPT-2's (layers.cc) and the Llama family's
// (llama_layers.cc) forward and backward share; each lays out q, k and v its own way.
#pragma once

#include <cmath>
#include <cstdint>

namespace fp8::train {

// Dot product with 8 independent partial sums: the compiler can vectorize it without
// -ffast-math, and the summation order is still fixed (deterministic).
template <typename T>
inline T Dot8(const T* a, const T* b, int64_t n) {
  T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  T s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Row `ti` of causal attention weights: a[0..ti] (scores, whose maximum is `mx`) becomes their
// softmax, a[ti+1..t) zero.
template <typename T>
inline void CausalSoftmaxRow(T* a, int64_t ti, int64_t t, T mx) {
  T sum = 0;
  for (int64_t s = 0; s <= ti; ++s) {
    a[s] = std::exp(a[s] - mx);
    sum += a[s];
  }
  const T inv = static_cast<T>(1) / sum;
  for (int64_t s = 0; s <= ti; ++s) a[s] *= inv;
  for (int64_t s = ti + 1; s < t; ++s) a[s] = 0;
}

}  // namespace fp8::train
