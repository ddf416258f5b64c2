// SPDX-License-Identifier: Apache-2.0
#include "worker/train/moe_dispatch.h"

#include <algorithm>
#include <cmath>
#include <string>

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

Status CheckExpertParallel(const TrainSpec& spec, int degree, int world_size) {
  const std::string field = "resources.expert_parallel: ";
  const std::string got = " (got " + std::to_string(degree) + ")";
  if (degree < 1 || degree > 1024) return InvalidArgumentError(field + "must be in [0, 1024]" + got);
  if (degree == 1) return OkStatus();
  const MoeConfig& moe = spec.model.moe;
  if (!moe.enabled())
    return InvalidArgumentError(field + "more than 1 needs a mixture of experts (model.moe)" + got);
  if (world_size % degree != 0)
    return InvalidArgumentError(field + "must divide the ranks (" + std::to_string(world_size) + ")" + got);
  if (moe.num_experts % degree != 0)
    return InvalidArgumentError(field + "must divide model.moe.num_experts (" + std::to_string(moe.num_experts) + ")" +
                                got);
  // Its delayed scaling keeps one amax per expert weight, input and gradient a step, taken from
  // the one cast each rank makes of each expert; a rank that computes an expert for its whole
  // group casts it once per member.
  if (spec.precision.recipe == Recipe::kFp8Tensorwise)
    return InvalidArgumentError(field + "more than 1 runs with precision.recipe bf16 or fp8-blockwise, not "
                                "fp8-tensorwise" + got);
  return OkStatus();
}

namespace {

// `per_member[j]` for member j of the group, 0 for every other rank.
std::vector<int64_t> ForMembers(const ExpertParallel& ep, const std::vector<int64_t>& per_member) {
  std::vector<int64_t> counts(static_cast<size_t>(ep.world_size()), 0);
  for (int j = 0; j < ep.degree; ++j) counts[static_cast<size_t>(ep.group_first() + j)] = per_member[static_cast<size_t>(j)];
  return counts;
}

std::vector<int64_t> Scaled(const std::vector<int64_t>& rows, int64_t c) {
  std::vector<int64_t> out(rows);
  for (int64_t& v : out) v *= c;
  return out;
}

// Runs one exchange unless an earlier one failed; remembers the first failure.
template <typename F>
Status Guarded(ExpertParallel& ep, F exchange) {
  if (ep.status.ok()) ep.status = exchange();
  return ep.status;
}

}  // namespace

StatusOr<RowExchange> ExchangeRowCounts(ExpertParallel& ep, const Dispatch& d) {
  const int g = ep.degree, l = ep.local_experts();
  FP8_CHECK(static_cast<int>(d.offsets.size()) == ep.experts + 1);
  std::vector<int64_t> rows_per_expert(static_cast<size_t>(ep.experts));
  for (int e = 0; e < ep.experts; ++e)
    rows_per_expert[static_cast<size_t>(e)] = d.offsets[static_cast<size_t>(e + 1)] - d.offsets[static_cast<size_t>(e)];
  RowExchange ex;
  ex.member_expert_rows.assign(static_cast<size_t>(g * l), 0);
  const std::vector<int64_t> per_member(static_cast<size_t>(g), l);
  FP8_RETURN_IF_ERROR(Guarded(ep, [&] {
    return ep.collective->AllToAllV(rows_per_expert.data(), ForMembers(ep, per_member), ex.member_expert_rows.data(),
                                    ForMembers(ep, per_member));
  }));
  std::vector<int64_t> send(static_cast<size_t>(g), 0), recv(static_cast<size_t>(g), 0);
  for (int j = 0; j < g; ++j) {
    send[static_cast<size_t>(j)] = d.offsets[static_cast<size_t>((j + 1) * l)] - d.offsets[static_cast<size_t>(j * l)];
    for (int e = 0; e < l; ++e) recv[static_cast<size_t>(j)] += ex.member_expert_rows[static_cast<size_t>(j * l + e)];
    ex.received += recv[static_cast<size_t>(j)];
  }
  ex.send_rows = ForMembers(ep, send);
  ex.recv_rows = ForMembers(ep, recv);
  return ex;
}

Status SendRows(ExpertParallel& ep, const RowExchange& ex, const float* rows, int64_t c, float* received) {
  return Guarded(ep, [&] { return ep.collective->AllToAllV(rows, Scaled(ex.send_rows, c), received, Scaled(ex.recv_rows, c)); });
}

Status ReturnRows(ExpertParallel& ep, const RowExchange& ex, const float* received, int64_t c, float* rows) {
  return Guarded(ep, [&] { return ep.collective->AllToAllV(received, Scaled(ex.recv_rows, c), rows, Scaled(ex.send_rows, c)); });
}

Status ExchangeWithMembers(ExpertParallel& ep, const float* send, int64_t per_member, float* recv) {
  const std::vector<int64_t> counts = ForMembers(ep, std::vector<int64_t>(static_cast<size_t>(ep.degree), per_member));
  return Guarded(ep, [&] { return ep.collective->AllToAllV(send, counts, recv, counts); });
}

}  // namespace fp8::train::moe
