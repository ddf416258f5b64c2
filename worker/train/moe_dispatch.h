// SPDX-License-Identifier: Apache-2.0
// Tokens to experts and back, the CPU reference of the permute / unpermute the CUDA kernels will
// do: the (token, choice) assignments of a Routing are sorted by expert into one contiguous
// layout (expert 0's rows, then expert 1's, ..., tokens in order within an expert), each expert
// runs on its block of rows, and the combine adds every row back to its token weighted by the
// router. Deterministic: the gathers and sums run per token over its k choices in order.
//
// Expert parallelism on the CPU (resources.expert_parallel = G): the ranks form groups of G
// consecutive ranks, and member p of a group computes experts [p·L, (p+1)·L), L = E / G, for the
// tokens of all G members. Every rank routes and permutes its own tokens as with G = 1; the rows
// of each member's experts travel to it by an all-to-all and their outputs come back by another,
// then the combine runs as before (and the same for the backward).
//
// The member runs every (source rank, expert) block on its own, with the source's rows in the
// source's order, and takes the source's accumulated weight gradient of that expert in and hands
// it back: so each rank ends a step with the very expert gradients it would have computed itself,
// and the unchanged all-reduce over all ranks sums them in the same order as with G = 1. The
// losses of G = 1, 2, 4 are the same bits. Parameters, moments and checkpoints keep every expert
// on every rank (stored by expert id); only the expert MLPs' compute is spread. fp8-tensorwise
// is refused: its delayed scaling takes one amax per expert and rank a micro-step, and a member
// casts each of its experts once per member.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "worker/train/collective.h"
#include "worker/train/moe_router.h"
#include "worker/train/spec.h"

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

// --- expert parallelism -------------------------------------------------------------------------

// This rank's place in its group, over the attempt's collective (owned by the backend).
struct ExpertParallel {
  Collective* collective = nullptr;
  int degree = 1;  // G
  int experts = 0;  // E
  // The first exchange that failed (a peer gone): later exchanges are skipped, and the backend
  // fails the step with it.
  Status status;

  int rank() const { return collective->rank(); }
  int world_size() const { return collective->world_size(); }
  int group_first() const { return rank() / degree * degree; }
  int position() const { return rank() % degree; }
  int local_experts() const { return experts / degree; }
  int first_local_expert() const { return position() * local_experts(); }
};

// resources.expert_parallel (`degree`, already defaulted: 0 reads as 1) against the resolved spec
// (a model from init_from included) and the ranks: INVALID_ARGUMENT naming the field.
Status CheckExpertParallel(const TrainSpec& spec, int degree, int world_size);

// Where one MoE layer's permuted rows travel (zero for every rank outside the group).
struct RowExchange {
  std::vector<int64_t> send_rows, recv_rows;  // [world]: rows to and from each rank
  std::vector<int64_t> member_expert_rows;    // [G, L]: rows of local expert l from member j
  int64_t received = 0;                       // Σ recv_rows
};

// Each member learns how many rows of each of its experts every member sends (`d`: this rank's
// dispatch over all E experts).
StatusOr<RowExchange> ExchangeRowCounts(ExpertParallel& ep, const Dispatch& d);
// The rows [rows, c] of each member's experts to it → received [ex.received, c] (members in
// order, each member's rows by expert); ReturnRows is the way back.
Status SendRows(ExpertParallel& ep, const RowExchange& ex, const float* rows, int64_t c, float* received);
Status ReturnRows(ExpertParallel& ep, const RowExchange& ex, const float* received, int64_t c, float* rows);
// `per_member` floats to each member in order (send [G · per_member]) and as many from each
// (recv [G · per_member]).
Status ExchangeWithMembers(ExpertParallel& ep, const float* send, int64_t per_member, float* recv);

}  // namespace fp8::train::moe
