// SPDX-License-Identifier: Apache-2.0
// Fused causal self-attention for the CUDA trainer, flash-attention-2 style: BF16 q/k/v in, FP32
// softmax statistics, BF16 out. No T×T matrix ever reaches device memory: the forward keeps a
// running max/sum per query row and saves only the row's logsumexp; the backward recomputes the
// probabilities from it. Tiles wholly above the causal diagonal are never visited.
//
// Head dims 32, 64 and 128. At 64 and 128 the wgmma kernels run (TMA producer warp, two consumer
// warpgroups, FA3 style); elsewhere mma.sync m16n8k16 kernels with operands staged by cp.async.
// Measured against PyTorch SDPA by bench/trainer_cuda/bench_attention_cuda.cc
// (docs/performance.md).
//
// Layout: element (b, h, t, d) of q, k, v, y (and their gradients) sits at
//   ptr[b·batch_stride + h·head_stride + t·row_stride + d]
// so the kernels read q/k/v straight out of the fused qkv GEMM output [B, T, 3, H, hd] and write
// y into the [B, T, H·hd] rows the projection GEMM consumes: no permute passes. Grouped-query
// attention (Llama, Qwen3: AttentionDims::kv_heads < heads) takes k/v in a layout of their own;
// a dk/dv CTA walks its key/value head's group of query heads, so dk/dv stay deterministic.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace fp8::train::cuda {

struct HeadLayout {
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
};
// [B, T, H, hd] rows of width `ld` (ld = H·hd for y; ld = 3·H·hd for the fused qkv buffer, whose
// k and v start C and 2C elements after q).
inline HeadLayout RowMajorHeads(int64_t seq, int64_t head_dim, int64_t ld) {
  return {seq * ld, head_dim, ld};
}
// [B, H, T, hd], contiguous.
inline HeadLayout HeadMajor(int64_t heads, int64_t seq, int64_t head_dim) {
  return {heads * seq * head_dim, seq * head_dim, head_dim};
}

// Grouped-query attention (Llama, Qwen3): kv_heads key/value heads, heads % kv_heads == 0, query
// head h reading key/value head h / (heads / kv_heads).
struct AttentionDims {
  int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  int64_t kv_heads = 0;  // 0: = heads
};
inline int64_t KvHeads(const AttentionDims& d) { return d.kv_heads == 0 ? d.heads : d.kv_heads; }

bool FlashAttentionSupportsHeadDim(int64_t head_dim);

// Which kernel runs each part. The trainer passes the default: at head dims 64 and 128 with
// 16-byte aligned q/k/v/dy (TMA) the wgmma kernels (sm90_flash_attention_wgmma{,_dkdv}.cu: a TMA
// producer warp, two consumer warpgroups), anywhere else the mma.sync ones
// (sm90_flash_attention.cu). Tests and the attention bench turn a wgmma kernel off to compare
// the two.
struct AttentionKernelChoice {
  bool wgmma_forward = true;
  bool wgmma_dq = true;
  bool wgmma_dkdv = true;
};

// y = softmax(q·kᵀ/√hd, causal)·v. `lse` [B·H, T] receives each row's logsumexp (base 2, of the
// scores scaled by log2(e)/√hd): the only thing the backward needs besides q, k, v, y.
Status FlashAttentionForward(const AttentionDims& dims, const __nv_bfloat16* q,
                             const __nv_bfloat16* k, const __nv_bfloat16* v, HeadLayout qkv,
                             __nv_bfloat16* y, HeadLayout yl, float* lse, cudaStream_t s,
                             AttentionKernelChoice choice = {});

// Grouped-query forms: q (and y, yl as above) with `heads` heads in layout ql, k and v with
// kv_heads heads in layout kvl. The single-layout functions are kvl == ql, kv_heads == heads.
Status FlashAttentionForward(const AttentionDims& dims, const __nv_bfloat16* q, HeadLayout ql,
                             const __nv_bfloat16* k, const __nv_bfloat16* v, HeadLayout kvl,
                             __nv_bfloat16* y, HeadLayout yl, float* lse, cudaStream_t s,
                             AttentionKernelChoice choice = {});

// Whether the forward, the dq and the dk/dv kernel of these arguments are the wgmma ones (tests
// and benches use it to know which kernel they measured).
bool FlashAttentionForwardUsesWgmma(const AttentionDims& dims, HeadLayout qkv, const void* q, const void* k,
                                    const void* v, AttentionKernelChoice choice = {});
bool FlashAttentionBackwardUsesWgmmaDq(const AttentionDims& dims, HeadLayout qkv, HeadLayout yl, const void* q,
                                       const void* k, const void* v, const void* dy, AttentionKernelChoice choice = {});
bool FlashAttentionBackwardUsesWgmmaDkDv(const AttentionDims& dims, HeadLayout qkv, HeadLayout yl, const void* q,
                                         const void* k, const void* v, const void* dy,
                                         AttentionKernelChoice choice = {});

namespace internal {
// The wgmma forward (sm90_flash_attention_wgmma.cu), called by FlashAttentionForward after its
// argument checks. Handles: head dim 64 or 128, 16-byte aligned q/k/v (TMA), strides of `qkv`
// that TMA takes (a grouped-query call checks its q and its k/v layout). The kernels take q (dq)
// in layout ql and k, v (dk, dv) in kvl, KvHeads(dims) of them.
bool FlashAttentionForwardWgmmaHandles(const AttentionDims& dims, HeadLayout qkv, const void* q, const void* k,
                                       const void* v);
Status FlashAttentionForwardWgmma(const AttentionDims& dims, const __nv_bfloat16* q, HeadLayout ql,
                                  const __nv_bfloat16* k, const __nv_bfloat16* v, HeadLayout kvl, __nv_bfloat16* y,
                                  HeadLayout yl, float* lse, cudaStream_t s);
bool FlashAttentionDqWgmmaHandles(const AttentionDims& dims, HeadLayout qkv, HeadLayout yl, const void* q, const void* k,
                                  const void* v, const void* dy);
// dq (layout ql) of the two-kernel backward; delta = rowsum(dy∘y) [B·H, T], lse as the forward writes it.
Status FlashAttentionBackwardDqWgmma(const AttentionDims& dims, const __nv_bfloat16* q, HeadLayout ql,
                                     const __nv_bfloat16* k, const __nv_bfloat16* v, HeadLayout kvl,
                                     const __nv_bfloat16* dy, HeadLayout yl, const float* lse, const float* delta,
                                     __nv_bfloat16* dq, cudaStream_t s);
// dk, dv (layout kvl) of the two-kernel backward by the wgmma kernel; same arguments and handled
// cases as the dQ kernel (FlashAttentionDqWgmmaHandles). A CTA owns a key tile of one key/value
// head and walks its group's query heads in turn, so the group's sum stays in registers.
Status FlashAttentionBackwardDkDvWgmma(const AttentionDims& dims, const __nv_bfloat16* q, HeadLayout ql,
                                       const __nv_bfloat16* k, const __nv_bfloat16* v, HeadLayout kvl,
                                       const __nv_bfloat16* dy, HeadLayout yl, const float* lse, const float* delta,
                                       __nv_bfloat16* dk, __nv_bfloat16* dv, cudaStream_t s);
// The backward's two kernels one at a time, each the one FlashAttentionBackward picks for
// `choice`, so that a bench can time them alone. `delta` = rowsum(dy∘y), as a
// FlashAttentionBackward call leaves it in its scratch.
Status FlashAttentionBackwardDkDvAlone(const AttentionDims& dims, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                       const __nv_bfloat16* v, HeadLayout qkv, const __nv_bfloat16* dy, HeadLayout yl,
                                       const float* lse, const float* delta, __nv_bfloat16* dk, __nv_bfloat16* dv,
                                       cudaStream_t s, AttentionKernelChoice choice = {});
Status FlashAttentionBackwardDqAlone(const AttentionDims& dims, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                     const __nv_bfloat16* v, HeadLayout qkv, const __nv_bfloat16* dy, HeadLayout yl,
                                     const float* lse, const float* delta, __nv_bfloat16* dq, cudaStream_t s,
                                     AttentionKernelChoice choice = {});
}  // namespace internal

// Floats of device scratch FlashAttentionBackward needs at `dims` (a smaller batch fits in a
// larger batch's scratch): rowsum(dy∘y), B·H·T.
int64_t FlashAttentionBackwardScratchFloats(const AttentionDims& dims);

// dq, dk, dv (layout `qkv`, overwritten) from dy (layout `yl`, like y); `scratch` holds
// FlashAttentionBackwardScratchFloats(dims) floats. Two kernels, one owning a key tile (dk, dv),
// one a query tile (dq): no atomics, bitwise reproducible run to run.
Status FlashAttentionBackward(const AttentionDims& dims, const __nv_bfloat16* q,
                              const __nv_bfloat16* k, const __nv_bfloat16* v, HeadLayout qkv,
                              const __nv_bfloat16* y, const __nv_bfloat16* dy, HeadLayout yl,
                              const float* lse, float* scratch, __nv_bfloat16* dq,
                              __nv_bfloat16* dk, __nv_bfloat16* dv, cudaStream_t s,
                              AttentionKernelChoice choice = {});
// Grouped-query form: dq in layout ql, dk/dv in kvl; dk/dv of a key/value head are the sums over
// its group's query heads, accumulated inside the dk/dv kernel (no atomics, deterministic).
Status FlashAttentionBackward(const AttentionDims& dims, const __nv_bfloat16* q, HeadLayout ql,
                              const __nv_bfloat16* k, const __nv_bfloat16* v, HeadLayout kvl,
                              const __nv_bfloat16* y, const __nv_bfloat16* dy, HeadLayout yl,
                              const float* lse, float* scratch, __nv_bfloat16* dq,
                              __nv_bfloat16* dk, __nv_bfloat16* dv, cudaStream_t s,
                              AttentionKernelChoice choice = {});

}  // namespace fp8::train::cuda
