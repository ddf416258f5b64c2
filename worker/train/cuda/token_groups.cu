// SPDX-License-Identifier: Apache-2.0
// GroupTokens (host counting sort) and the two gradient kernels of token_groups.h.
#include "worker/train/cuda/token_groups.h"

#include <algorithm>
#include <climits>
#include <string>

#include "kernels/cuda/sm90_cuda_check.h"

namespace fp8::train::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kUnroll = 4;
// Enough resident warps for the H200's 132 SMs without one block per chunk (a batch of mostly
// distinct tokens has a chunk per position).
constexpr unsigned kMaxBlocks = 132 * 8;

// One warp: dst[j] = (accumulate ? dst[j] : 0) + Σ_{i in [begin, end)} row_of(i)[j] for j < c,
// rows added in order. Lane l takes channels l, l + 32, ..., kUnroll of them at a time
// (independent sums, more loads in flight); each step reads 128 contiguous bytes of a row.
template <class RowOf>
__device__ __forceinline__ void WarpSumRows(RowOf row_of, int begin, int end, int64_t c, bool accumulate,
                                            float* __restrict__ dst) {
  const int lane = threadIdx.x % 32;
  for (int64_t j0 = lane; j0 < c; j0 += 32 * kUnroll) {
    float sum[kUnroll] = {};
    for (int i = begin; i < end; ++i) {
      const float* row = row_of(i);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (j0 + 32 * u < c) sum[u] += row[j0 + 32 * u];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = j0 + 32 * u;
      if (j >= c) break;
      dst[j] = accumulate ? dst[j] + sum[u] : sum[u];
    }
  }
}

// One warp per chunk (grid-stride over chunks): its rows in position order, into dwte (the
// token's only chunk) or its row of partial sums.
__global__ void ChunkSumKernel(const float* __restrict__ dout, int64_t c, int64_t num_chunks,
                               const int32_t* __restrict__ order, const int32_t* __restrict__ chunk_begin,
                               const int32_t* __restrict__ chunk_token, const int32_t* __restrict__ chunk_slot,
                               float* __restrict__ partial, float* __restrict__ dwte) {
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; k < num_chunks;
       k += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int slot = chunk_slot[k];
    float* dst = slot < 0 ? dwte + static_cast<int64_t>(chunk_token[k]) * c : partial + static_cast<int64_t>(slot) * c;
    WarpSumRows([&](int i) { return dout + static_cast<int64_t>(order[i]) * c; }, chunk_begin[k], chunk_begin[k + 1], c,
                slot < 0, dst);
  }
}

// One warp per multi-chunk token: its partial rows added in chunk order.
__global__ void MultiChunkSumKernel(int64_t c, int64_t num_multi, const int32_t* __restrict__ multi_begin,
                                    const int32_t* __restrict__ multi_token, const float* __restrict__ partial,
                                    float* __restrict__ dwte) {
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; g < num_multi;
       g += static_cast<int64_t>(gridDim.x) * kWarps) {
    WarpSumRows([&](int r) { return partial + static_cast<int64_t>(r) * c; }, multi_begin[g], multi_begin[g + 1], c, true,
                dwte + static_cast<int64_t>(multi_token[g]) * c);
  }
}

unsigned WarpBlocks(int64_t items) {
  return static_cast<unsigned>(std::min<int64_t>((items + kWarps - 1) / kWarps, kMaxBlocks));
}

template <typename T>
Status Upload(DeviceBuffer<T>& dst, const std::vector<T>& src, cudaStream_t s) {
  if (src.empty()) return OkStatus();
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(dst.get(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  return OkStatus();
}

}  // namespace

Status CheckTokens(const int32_t* tokens, int64_t n, int64_t vocab, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return InvalidArgumentError(std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(tokens[i]) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
  return OkStatus();
}

Status GroupTokens(const int32_t* tokens, int64_t n, int64_t vocab, HostTokenGroups* g) {
  if (n < 0 || n > INT32_MAX) return InvalidArgumentError("token count out of range: " + std::to_string(n));
  FP8_RETURN_IF_ERROR(CheckTokens(tokens, n, vocab, "inputs"));
  g->count.assign(static_cast<size_t>(vocab), 0);
  for (int64_t i = 0; i < n; ++i) ++g->count[static_cast<size_t>(tokens[i])];
  g->chunk_begin.clear();
  g->chunk_token.clear();
  g->chunk_slot.clear();
  g->multi_begin.assign(1, 0);
  g->multi_token.clear();
  // Chunks in token order; count[v] becomes the first index of v's positions in `order`.
  int32_t start = 0, slots = 0;
  for (int32_t v = 0; v < vocab; ++v) {
    const int32_t m = g->count[static_cast<size_t>(v)];
    g->count[static_cast<size_t>(v)] = start;
    if (m == 0) continue;
    const bool multi = m > HostTokenGroups::kChunk;
    for (int32_t off = 0; off < m; off += HostTokenGroups::kChunk) {
      g->chunk_begin.push_back(start + off);
      g->chunk_token.push_back(v);
      g->chunk_slot.push_back(multi ? slots++ : -1);
    }
    if (multi) {
      g->multi_begin.push_back(slots);
      g->multi_token.push_back(v);
    }
    start += m;
  }
  g->chunk_begin.push_back(static_cast<int32_t>(n));
  g->order.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g->order[static_cast<size_t>(g->count[static_cast<size_t>(tokens[i])]++)] = static_cast<int32_t>(i);
  return OkStatus();
}

Status TokenGroups::Allocate(int64_t max_n, int64_t c) {
  max_n_ = max_n;
  c_ = c;
  FP8_RETURN_IF_ERROR(order_.Allocate(static_cast<size_t>(max_n), "token order"));
  FP8_RETURN_IF_ERROR(chunk_begin_.Allocate(static_cast<size_t>(HostTokenGroups::MaxChunks(max_n) + 1), "token chunks"));
  FP8_RETURN_IF_ERROR(chunk_token_.Allocate(static_cast<size_t>(HostTokenGroups::MaxChunks(max_n)), "token chunks"));
  FP8_RETURN_IF_ERROR(chunk_slot_.Allocate(static_cast<size_t>(HostTokenGroups::MaxChunks(max_n)), "token chunks"));
  FP8_RETURN_IF_ERROR(multi_begin_.Allocate(static_cast<size_t>(HostTokenGroups::MaxMulti(max_n) + 1), "multi-chunk tokens"));
  FP8_RETURN_IF_ERROR(multi_token_.Allocate(static_cast<size_t>(HostTokenGroups::MaxMulti(max_n)), "multi-chunk tokens"));
  return partial_.Allocate(static_cast<size_t>(HostTokenGroups::MaxSlots(max_n) * c), "embedding partial sums");
}

Status TokenGroups::Build(const int32_t* host_tokens, int64_t n, int64_t vocab, cudaStream_t s) {
  if (n > max_n_) return InvalidArgumentError("batch of " + std::to_string(n) + " tokens exceeds " + std::to_string(max_n_));
  FP8_RETURN_IF_ERROR(GroupTokens(host_tokens, n, vocab, &host_));
  FP8_RETURN_IF_ERROR(Upload(order_, host_.order, s));
  FP8_RETURN_IF_ERROR(Upload(chunk_begin_, host_.chunk_begin, s));
  FP8_RETURN_IF_ERROR(Upload(chunk_token_, host_.chunk_token, s));
  FP8_RETURN_IF_ERROR(Upload(chunk_slot_, host_.chunk_slot, s));
  FP8_RETURN_IF_ERROR(Upload(multi_begin_, host_.multi_begin, s));
  return Upload(multi_token_, host_.multi_token, s);
}

Status TokenGroups::AccumulateWteGrad(const float* dout, float* dwte, cudaStream_t s) const {
  if (host_.num_chunks() > 0) {
    ChunkSumKernel<<<WarpBlocks(host_.num_chunks()), kThreads, 0, s>>>(dout, c_, host_.num_chunks(), order_.get(), chunk_begin_.get(),
                                                                        chunk_token_.get(), chunk_slot_.get(), partial_.get(), dwte);
    FP8_RETURN_IF_LAUNCH_FAILED();
  }
  if (host_.num_multi() > 0) {
    MultiChunkSumKernel<<<WarpBlocks(host_.num_multi()), kThreads, 0, s>>>(c_, host_.num_multi(), multi_begin_.get(),
                                                                            multi_token_.get(), partial_.get(), dwte);
    FP8_RETURN_IF_LAUNCH_FAILED();
  }
  return OkStatus();
}

}  // namespace fp8::train::cuda
