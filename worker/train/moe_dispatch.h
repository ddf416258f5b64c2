// Tokens to experts and back, the CPU reference of the permute / unpermute the CUDA kernels will
// do: the (token, choice) assignments of a Routing are sorted by expert into one contiguous
// layout (expert 0's rows, then expert 1's, ..., tokens in order within an expert), each expert
// runs on its block of rows, and the combine adds every row back to its token weighted by the
// router. Deterministic: the gathers and sums run per token over its k choices in order.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/train/moe_router.h"

namespace fp8::train::moe {

struct Dispatch {
  int64_t k = 0;                 // choices per token
  std::vector<int64_t> offsets;  // [E + 1]: expert e's rows are [offsets[e], offsets[e+1])
  std::vector<int32_t> token;    // [rows]: the token each permuted row holds
  std::vector<int64_t> row;      // [n, k]: the permuted row of each (token, choice); -1: dropped
  int64_t dropped = 0;           // assignments past their expert's capacity
  int64_t rows() const { return static_cast<int64_t>(token.size()); }
};

// Rows an expert takes: ceil(factor · n · k / E); 0 (no limit) for factor 0.
int64_t ExpertCapacity(double capacity_factor, int64_t tokens, int64_t k, int64_t experts);

// The layout of `r`'s assignments. With capacity > 0 an expert keeps its first `capacity`
// assignments in token order and drops the rest (a token keeps its other experts).
Dispatch BuildDispatch(const Routing& r, int64_t capacity);

// out[i] = x[token[i]]: x [n, c] → out [rows, c].
void PermuteRows(const float* x, const Dispatch& d, int64_t c, float* out);
// dx[t] (+)= Σ over t's kept choices of dout[row]: the transpose of PermuteRows.
void PermuteRowsBackward(const float* dout, const Dispatch& d, int64_t c, bool accumulate, float* dx);

// y[t] += Σ_j weight[t, j] · expert_out[row[t, j]] over t's kept choices: [rows, c] → [n, c].
void Combine(const float* expert_out, const Dispatch& d, const float* weight, int64_t c, float* y);
// Its backward from dy [n, c]: dexpert_out [rows, c] (overwritten) and dweight [n, k]
// (overwritten; 0 for a dropped choice).
void CombineBackward(const float* dy, const float* expert_out, const Dispatch& d, const float* weight, int64_t c,
                     float* dexpert_out, float* dweight);

}  // namespace fp8::train::moe
