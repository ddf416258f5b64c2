// SPDX-License-Identifier: Apache-2.0
// The tied embedding's gradient without atomics: dwte[v] += Σ dout[i] over the positions i of
// token v, summed in an order fixed by the tokens alone, so that the same batch gives the same
// bits on every run and every GPU (atomicAdd made the order depend on scheduling; with
// fp8-tensorwise and AdamW the differing roundings grew past 1e-4 of the loss within two steps
// on one H200 and not on another).
//
// The positions are grouped by token on the host (the batch's tokens are host arrays anyway):
// token order, ascending position within a token, cut into chunks of at most kChunk positions.
// One warp sums a chunk (lanes over channels, rows read coalesced). A token with one chunk adds
// its sum straight into dwte; the chunks of a token with more write partial sums, which a second
// kernel adds up in chunk order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "worker/train/cuda/device_buffer.h"

namespace fp8::train::cuda {

// The grouping of one batch (host side; GroupTokens builds it).
struct HostTokenGroups {
  static constexpr int kChunk = 32;
  std::vector<int32_t> order;        // the n positions in (token, position) order
  std::vector<int32_t> chunk_begin;  // chunk k is order[chunk_begin[k], chunk_begin[k + 1])
  std::vector<int32_t> chunk_token;  // its token
  std::vector<int32_t> chunk_slot;   // -1: the token's only chunk; else its row of partial sums
  std::vector<int32_t> multi_begin;  // multi-chunk token g owns rows [multi_begin[g], multi_begin[g + 1])
  std::vector<int32_t> multi_token;  // its token
  std::vector<int32_t> count;        // per token of the vocabulary (scratch, kept between batches)

  int64_t num_chunks() const { return static_cast<int64_t>(chunk_token.size()); }
  int64_t num_multi() const { return static_cast<int64_t>(multi_token.size()); }
  // Upper bounds for n positions: every chunk holds a position; a token with several chunks
  // has more than kChunk positions, and ceil(m / kChunk) < 2m / kChunk rows of partial sums.
  static int64_t MaxChunks(int64_t n) { return n; }
  static int64_t MaxMulti(int64_t n) { return n / (kChunk + 1) + 1; }
  static int64_t MaxSlots(int64_t n) { return 2 * n / kChunk + 1; }
};

// InvalidArgument naming `what`[i] for the first tokens[i] outside [0, vocab).
Status CheckTokens(const int32_t* tokens, int64_t n, int64_t vocab, const char* what);
// Groups tokens[0, n) (checked as "inputs").
Status GroupTokens(const int32_t* tokens, int64_t n, int64_t vocab, HostTokenGroups* g);

// Device copy of a grouping and the scratch for the partial sums, sized once for batches of up
// to max_n positions of width c.
class TokenGroups {
 public:
  Status Allocate(int64_t max_n, int64_t c);
  // Groups the host tokens and uploads the grouping on s (the host arrays are copied before
  // this returns: pageable memory).
  Status Build(const int32_t* host_tokens, int64_t n, int64_t vocab, cudaStream_t s);
  // dwte[v·c, v·c + c) += the sum of dout rows of v's positions, for the batch of the last Build.
  Status AccumulateWteGrad(const float* dout, float* dwte, cudaStream_t s) const;

 private:
  int64_t max_n_ = 0, c_ = 0;
  HostTokenGroups host_;
  DeviceBuffer<int32_t> order_, chunk_begin_, chunk_token_, chunk_slot_, multi_begin_, multi_token_;
  DeviceBuffer<float> partial_;
};

}  // namespace fp8::train::cuda
