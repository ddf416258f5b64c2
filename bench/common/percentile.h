// SPDX-License-Identifier: Apache-2.0
// The percentile the benchmarks print: the sample nearest to rank p·(n-1), 0 for no samples.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace fp8d::bench {

// `p` in [0, 1] (0.5: the median, 0.99: p99).
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace fp8d::bench
