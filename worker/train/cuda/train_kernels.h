// SPDX-License-Identifier: Apache-2.0
// Device kernels of the CUDA trainer (everything that is not a GEMM): embeddings, LayerNorm,
// GELU, causal softmax, attention head permutes, fused softmax cross-entropy, column sums,
// AdamW, norms, FP8 byte transposes and the delayed-scaling update. Plain C++ declarations so
// the host code (.cc, C++20) can call them; the launchers live in one .cu per layer (embedding,
// layernorm, bias_gelu, attention_plain, cross_entropy, adamw, delayed_scaling, elementwise).
//
// Layouts follow worker/train/layers.h: activations row-major [N, C], N = B·T, weights
// [out, in]. Every launcher checks the launch and returns a Status naming file:line.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace fp8::train::cuda {

using bf16 = __nv_bfloat16;

// fp8-blockwise's cast of a linear layer's input X [m, k] (device pointers), made once for the
// forward GEMM and the backward's weight gradient, as Sm90Fp8Quantize1x128AndTransposed128x128
// writes it: q [m, k] E4M3 in 1x128 tiles with scales s MN-major [k/128, m], and qt = Xᵀ [k, m]
// E4M3 in 128x128 blocks with scales st [k/128, Sm90BlockScaleLd(m)]. The stage that produces X
// (RMSNorm, SwiGLU) writes it instead of X itself (llama_kernels.h); CudaLinear reads it.
struct Fp8BlockOperand {
  uint8_t* q = nullptr;
  float* s = nullptr;
  uint8_t* qt = nullptr;
  float* st = nullptr;
};

// out[n, c] = wte[tokens[n]] + wpe[n % t]   (fp32 residual stream)
Status EmbeddingForward(const int32_t* tokens, const float* wte, const float* wpe, int64_t n,
                        int64_t t, int64_t c, float* out, cudaStream_t s);
// out[n, c] = wte[tokens[n]]   (the Llama family: no position embedding)
Status TokenEmbeddingForward(const int32_t* tokens, const float* wte, int64_t n, int64_t c, float* out,
                             cudaStream_t s);
// dwpe[p] += Σ_b dout[b·t + p] (fixed order). The wte gradient: TokenGroups (token_groups.h).
Status EmbeddingWpeBackward(const float* dout, int64_t n, int64_t t, int64_t c, float* dwpe, cudaStream_t s);

// eps 1e-5 like the CPU. out bf16 (a GEMM operand), mean/rstd fp32 [n].
Status LayerNormForward(const float* x, const float* w, const float* b, int64_t n, int64_t c,
                        bf16* out, float* mean, float* rstd, cudaStream_t s);
// out = res + y + b[j], then LayerNormForward(out, w, lb) into ln_out / mean / rstd: ResidualAdd
// and LayerNormForward in one pass, bitwise equal to the two (every residual add of the model is
// followed by a LayerNorm).
Status ResidualAddLayerNorm(const float* res, const bf16* y, const float* b, int64_t n, int64_t c,
                            float* out, const float* w, const float* lb, bf16* ln_out, float* mean,
                            float* rstd, cudaStream_t s);
// dx += (residual gradient); dw, db += ; scratch ≥ 2·ceil(n/kColChunk)·c floats. dx_bf16 (may
// be null): also writes the updated dx rounded to bf16, the next GEMM's operand, so the residual
// gradient needs no separate cast pass.
Status LayerNormBackward(const bf16* dout, const float* x, const float* w, const float* mean,
                         const float* rstd, int64_t n, int64_t c, float* dx, bf16* dx_bf16,
                         float* dw, float* db, float* scratch, cudaStream_t s);
// The fused LayerNorm backward (c % 4 == 0, aligned pointers) keeps its dw/db partials per
// kLnRows rows.
constexpr int64_t kColChunk = 256;  // rows per partial sum of the column reductions
constexpr int kLnRows = 32;         // rows per block of the fused LayerNorm backward
inline int64_t ColumnScratchFloats(int64_t rows, int64_t cols) {
  return 2 * ((rows + kLnRows - 1) / kLnRows) * cols;
}

// db[j] += Σ_i dy[i, j]   (fixed order; scratch ≥ ColumnScratchFloats(m, n)/2)
Status ColumnSumAccumulate(const bf16* dy, int64_t m, int64_t n, float* db, float* scratch,
                           cudaStream_t s);
// y[i, j] += b[j]
Status AddBias(bf16* y, const float* b, int64_t m, int64_t n, cudaStream_t s);
// out = res + y + b[j]  (fp32 residual add of a projection's output)
Status ResidualAdd(const float* res, const bf16* y, const float* b, int64_t m, int64_t n,
                   float* out, cudaStream_t s);

Status GeluForward(const bf16* x, int64_t n, bf16* y, cudaStream_t s);
// pre[i, j] += b[j] (kept: GeluBackward's input), out = gelu(pre): AddBias + GeluForward in one pass.
Status BiasGeluForward(bf16* pre, const float* b, int64_t m, int64_t n, bf16* out, cudaStream_t s);
Status GeluBackward(const bf16* dy, const bf16* x, int64_t n, bf16* dx, cudaStream_t s);

Status CastF32ToBf16(const float* x, int64_t n, bf16* y, cudaStream_t s);
Status CastBf16ToF32(const bf16* x, int64_t n, float* y, cudaStream_t s);
// y += x (fp32)
Status Accumulate(const float* x, int64_t n, float* y, cudaStream_t s);
// y = bf16(y + x), the sum in fp32 (input gradients of two layers that read the same activation)
Status AccumulateBf16(const bf16* x, int64_t n, bf16* y, cudaStream_t s);

Status Scale(float* x, int64_t n, float factor, cudaStream_t s);

// qkv [B, T, 3, H, hd] → q, k, v each [B, H, T, hd]
Status SplitHeads(const bf16* qkv, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* q, bf16* k,
                  bf16* v, cudaStream_t s);
// the inverse: dq, dk, dv [B, H, T, hd] → dqkv [B, T, 3C]
Status MergeQkv(const bf16* dq, const bf16* dk, const bf16* dv, int64_t b, int64_t t, int64_t h,
                int64_t hd, bf16* dqkv, cudaStream_t s);
// y [B, H, T, hd] ↔ out [B, T, H·hd]
Status HeadsToRows(const bf16* y, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* out,
                   cudaStream_t s);
Status RowsToHeads(const bf16* x, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* out,
                   cudaStream_t s);
// Row-wise causal softmax of scores [rows = BH·T, T] (row r is query position r % T); masked
// entries become 0.
Status CausalSoftmaxForward(const float* scores, int64_t rows, int64_t t, bf16* probs,
                            cudaStream_t s);
// ds = p ∘ (dp − Σ p∘dp)
Status CausalSoftmaxBackward(const bf16* probs, const bf16* dprobs, int64_t rows, int64_t t,
                             bf16* ds, cudaStream_t s);

// Softmax cross-entropy over logits [n, v] (row pitch ld): losses[i] = −log p[target]; when
// `write_grad`, logits are overwritten by (p − onehot)·grad_scale.
Status CrossEntropy(bf16* logits, const int32_t* targets, int64_t n, int64_t v, int64_t ld,
                    float grad_scale, bool write_grad, float* losses, cudaStream_t s);

// *out = Σ x (double, one block, fixed order)
Status SumToDouble(const float* x, int64_t n, double* out, cudaStream_t s);
// *out = Σ x² (double; partial ≥ 1024 doubles)
Status SumSquares(const float* x, int64_t n, double* partial, double* out, cudaStream_t s);

struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale;
};
// Values of AdamWStep's per-parameter mask.
constexpr uint8_t kAdamWNoDecay = 0, kAdamWDecay = 1;
constexpr uint8_t kAdamWSkip = 2;  // not updated by AdamWStep: another step (below) updates it
// p −= lr·(m̂/(√v̂+eps) + wd·p·[decay[i] == kAdamWDecay]); grads multiplied by grad_scale
// (clipping) first; parameters marked kAdamWSkip are left alone.
Status AdamWStep(float* p, const float* g, float* m, float* v, const uint8_t* decay, int64_t n,
             const AdamWArgs& a, cudaStream_t s);
// The same update for one tensor whose parameters all decay or all do not, also writing `copy`
// (if not null): the updated values rounded to BF16 (the bf16 recipe's GEMM operand, written
// while the value is in registers instead of by a second pass over p).
Status AdamWStepTensor(float* p, const float* g, float* m, float* v, int64_t n, bool decay, const AdamWArgs& a,
                       bf16* copy, cudaStream_t s);

// out[c, r] = in[r, c] (row pitches ld_in ≥ cols, ld_out ≥ rows), 1-byte elements (the
// fp8-tensorwise casts' transposes for cuBLASLt's TN-only FP8 GEMMs).
Status TransposeU8(const uint8_t* in, int64_t rows, int64_t cols, int64_t ld_in, uint8_t* out,
                   int64_t ld_out, cudaStream_t s);

// Delayed scaling (kernels/scaling.h), on the device so a step never waits for the host:
// state = [history_len floats (newest last), count, scale_inv]. Records *amax, recomputes
// scale_inv exactly like DelayedScaling::Update.
struct DelayedScalingParams {
  int history_len;
  int margin;
  bool most_recent;
  bool ue8m0;
  float fp8_max;
};
inline int64_t DelayedStateFloats(int history_len) { return history_len + 2; }
Status DelayedScalingUpdate(float* state, const float* amax, DelayedScalingParams p, cudaStream_t s);

// What a reported step's FP8 casts saw (progress's fp8_amax_max and fp8_saturation_fraction, as
// LinearPrecision counts them on the CPU), from a read-only pass over each cast's input.
struct DeviceFp8CastStats {
  unsigned long long saturated;  // elements with |x| > fp8_max · scale_inv
  float amax;                    // max |x|
};
// stats += the cast of x[0..n) (T: float or bf16) by *scale_inv (device; null: a blockwise cast,
// whose per-block scales clip nothing, so only the amax counts).
template <typename T>
Status AccumulateFp8CastStats(const T* x, int64_t n, const float* scale_inv, float fp8_max,
                              DeviceFp8CastStats* stats, cudaStream_t s);
// Pointer to the scale_inv inside a state block.
inline float* DelayedScaleInv(float* state, int history_len) { return state + history_len + 1; }

// Benchmarks (no host model): x[i] = N(0, stddev) from a counter-based hash of (seed, i);
// Fill sets a constant.
Status InitNormal(float* x, int64_t n, uint64_t seed, float stddev, cudaStream_t s);
Status Fill(float* x, int64_t n, float value, cudaStream_t s);

}  // namespace fp8::train::cuda
