// SPDX-License-Identifier: Apache-2.0
// The layers of the GPT-2 style decoder, forward and backward, CPU. Templated on the scalar type:
// the trainer runs them in float, the gradient tests in double (against double finite
// differences). Every reduction runs in a fixed order, whatever the thread count, so a run is
// bitwise reproducible (resume equals an uninterrupted run).
//
// Layout: activations are row-major [N, C] with N = B·T rows; linear weights are [out, in]
// (PyTorch nn.Linear), y = x·Wᵀ + b. Backward functions ACCUMULATE (+=) into parameter
// gradients and, unless said otherwise, OVERWRITE the input gradient.
#pragma once

#include <cstdint>

namespace fp8::train {

// C[M,N] (= or +=) op(A)·op(B); float goes to kernels::Sgemm, double to a plain loop.
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, const T* b,
          bool accumulate, T* c);

// out[n, c] = wte[tokens[n], c] + wpe[n % seq_len, c]
template <typename T>
void EmbeddingForward(const int32_t* tokens, const T* wte, const T* wpe, int64_t n, int64_t seq_len,
                      int64_t c, T* out);
template <typename T>
void EmbeddingBackward(const T* dout, const int32_t* tokens, int64_t n, int64_t seq_len, int64_t c,
                       T* dwte, T* dwpe);

// y = x·Wᵀ + b   (x [M,K], W [N,K], b [N] or null, y [M,N])
template <typename T>
void LinearForward(const T* x, const T* w, const T* b, int64_t m, int64_t k, int64_t n, T* y);
// dx = dy·W (overwritten; skipped when dx is null); dW += dyᵀ·x; db += Σ_rows dy.
// x_for_dw / dy_for_dw may differ from the operands of dx (FP8 recipes quantize each GEMM's
// operands along its own contraction dimension).
template <typename T>
void LinearBackward(const T* dy_for_dx, const T* w, const T* dy_for_dw, const T* x_for_dw,
                    const T* dy_for_db, int64_t m, int64_t k, int64_t n, T* dx, T* dw, T* db);

template <typename T>
void LayerNormForward(const T* x, const T* w, const T* b, int64_t n, int64_t c, T* out, T* mean,
                      T* rstd);
// dx += (accumulates: it is the residual stream's gradient).
template <typename T>
void LayerNormBackward(const T* dout, const T* x, const T* w, const T* mean, const T* rstd,
                       int64_t n, int64_t c, T* dx, T* dw, T* db);

// GPT-2's tanh approximation.
template <typename T>
void GeluForward(const T* x, int64_t n, T* y);
template <typename T>
void GeluBackward(const T* dy, const T* x, int64_t n, T* dx);

// Causal self-attention on qkv [B·T, 3C] (q | k | v, heads contiguous inside each) → out
// [B·T, C]; att [B, H, T, T] keeps the softmax probabilities for backward.
template <typename T>
void AttentionForward(const T* qkv, int64_t b, int64_t t, int64_t c, int64_t h, T* out, T* att);
template <typename T>
void AttentionBackward(const T* dout, const T* qkv, const T* att, int64_t b, int64_t t, int64_t c,
                       int64_t h, T* dqkv);

// Softmax cross-entropy over logits [N, V]; returns the mean loss over rows. `logits` is turned
// into probabilities in place (kept for backward).
template <typename T>
double CrossEntropyForward(T* logits, const int32_t* targets, int64_t n, int64_t v);
// dlogits = (probs - onehot) · scale   (scale = 1/N_total for a mean loss)
template <typename T>
void CrossEntropyBackward(const T* probs, const int32_t* targets, int64_t n, int64_t v, T scale,
                          T* dlogits);

}  // namespace fp8::train
