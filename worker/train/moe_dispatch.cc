#include "worker/train/moe_dispatch.h"

#include <algorithm>
#include <cmath>

#include "kernels/parallel.h"

namespace fp8::train::moe {

using kernels::ParallelFor;

int64_t ExpertCapacity(double capacity_factor, int64_t tokens, int64_t k, int64_t experts) {
  if (capacity_factor <= 0) return 0;
  const double rows = std::ceil(capacity_factor * static_cast<double>(tokens * k) / static_cast<double>(experts));
  return std::max<int64_t>(1, static_cast<int64_t>(rows));
}

Dispatch BuildDispatch(const Routing& r, int64_t capacity) {
  const int64_t n = r.tokens, k = r.k, experts = r.experts;
  Dispatch d;
  d.k = k;
  d.row.assign(static_cast<size_t>(n * k), -1);
  // Kept assignments per expert, in token order (a counting sort).
  std::vector<int64_t> kept(static_cast<size_t>(experts), 0);
  std::vector<char> keep(static_cast<size_t>(n * k), 0);
  for (int64_t i = 0; i < n * k; ++i) {
    int64_t& c = kept[static_cast<size_t>(r.expert[static_cast<size_t>(i)])];
    if (capacity > 0 && c >= capacity) {
      ++d.dropped;
      continue;
    }
    ++c;
    keep[static_cast<size_t>(i)] = 1;
  }
  d.offsets.assign(static_cast<size_t>(experts + 1), 0);
  for (int64_t e = 0; e < experts; ++e) d.offsets[static_cast<size_t>(e + 1)] = d.offsets[static_cast<size_t>(e)] + kept[static_cast<size_t>(e)];
  d.token.resize(static_cast<size_t>(d.offsets.back()));
  std::vector<int64_t> next(d.offsets.begin(), d.offsets.end() - 1);
  for (int64_t i = 0; i < n * k; ++i) {
    if (!keep[static_cast<size_t>(i)]) continue;
    const int64_t row = next[static_cast<size_t>(r.expert[static_cast<size_t>(i)])]++;
    d.token[static_cast<size_t>(row)] = static_cast<int32_t>(i / k);
    d.row[static_cast<size_t>(i)] = row;
  }
  return d;
}

void PermuteRows(const float* x, const Dispatch& d, int64_t c, float* out) {
  ParallelFor(d.rows(), 64, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) std::copy_n(x + static_cast<int64_t>(d.token[static_cast<size_t>(i)]) * c, c, out + i * c);
  });
}

void PermuteRowsBackward(const float* dout, const Dispatch& d, int64_t c, bool accumulate, float* dx) {
  const int64_t k = d.k, n = k > 0 ? static_cast<int64_t>(d.row.size()) / k : 0;
  ParallelFor(n, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* g = dx + t * c;
      if (!accumulate) std::fill(g, g + c, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = d.row[static_cast<size_t>(t * k + j)];
        if (row < 0) continue;
        const float* src = dout + row * c;
        for (int64_t i = 0; i < c; ++i) g[i] += src[i];
      }
    }
  });
}

void Combine(const float* expert_out, const Dispatch& d, const float* weight, int64_t c, float* y) {
  const int64_t k = d.k, n = k > 0 ? static_cast<int64_t>(d.row.size()) / k : 0;
  ParallelFor(n, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* out = y + t * c;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = d.row[static_cast<size_t>(t * k + j)];
        if (row < 0) continue;
        const float w = weight[t * k + j];
        const float* src = expert_out + row * c;
        for (int64_t i = 0; i < c; ++i) out[i] += w * src[i];
      }
    }
  });
}

void CombineBackward(const float* dy, const float* expert_out, const Dispatch& d, const float* weight, int64_t c,
                     float* dexpert_out, float* dweight) {
  const int64_t k = d.k, n = k > 0 ? static_cast<int64_t>(d.row.size()) / k : 0;
  ParallelFor(n, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* g = dy + t * c;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = d.row[static_cast<size_t>(t * k + j)];
        if (row < 0) {
          dweight[t * k + j] = 0;
          continue;
        }
        const float w = weight[t * k + j];
        const float* out = expert_out + row * c;
        float* dout = dexpert_out + row * c;
        double dot = 0;
        for (int64_t i = 0; i < c; ++i) {
          dout[i] = w * g[i];
          dot += static_cast<double>(g[i]) * out[i];
        }
        dweight[t * k + j] = static_cast<float>(dot);
      }
    }
  });
}

}  // namespace fp8::train::moe
