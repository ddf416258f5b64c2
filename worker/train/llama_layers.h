// SPDX-License-Identifier: Apache-2.0
// The layers the Llama family adds to layers.h, forward and backward, CPU: token embedding
// without positions, RMSNorm, rotary position embedding (transformers' rotate_half layout),
// grouped-query causal attention and the SwiGLU gate. Conventions as in layers.h: templated on
// the scalar type, row-major [N, C] activations with N = B·T rows (row i at position i % T),
// fixed reduction order whatever the thread count; parameter gradients ACCUMULATE.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/train/spec.h"

namespace fp8::train {

// out[n, c] = wte[tokens[n], c]; dwte[tokens[n], c] += dout[n, c].
template <typename T>
void TokenEmbeddingForward(const int32_t* tokens, const T* wte, int64_t n, int64_t c, T* out);
template <typename T>
void TokenEmbeddingBackward(const T* dout, const int32_t* tokens, int64_t n, int64_t c, T* dwte);

// out = x · rsqrt(mean(x²) + eps) · w over rows of c; rstd [n] kept for backward.
template <typename T>
void RmsNormForward(const T* x, const T* w, int64_t n, int64_t c, double eps, T* out, T* rstd);
// dx = (accumulate ? dx + : ) ∂/∂x; dw += ∂/∂w.
template <typename T>
void RmsNormBackward(const T* dout, const T* x, const T* w, const T* rstd, int64_t n, int64_t c, bool accumulate,
                     T* dx, T* dw);

// The rotation angles of every position: cos/sin [seq_len, head_dim/2], from rope_theta and,
// with llama3 scaling, Llama-3's rescaled frequencies (transformers'
// _compute_llama3_parameters).
struct RopeTables {
  int64_t seq_len = 0, half = 0;
  std::vector<double> cos, sin;
};
RopeTables MakeRopeTables(const ModelConfig& cfg);
// The rotary frequencies alone (head_dim/2 of them), for tests.
std::vector<double> RopeInverseFrequencies(const ModelConfig& cfg);

// In place on x [n, heads·head_dim] (heads contiguous in a row, row i at position i % seq_len):
// each head's halves (a, b) become (a·cos − b·sin, b·cos + a·sin). Backward applies the inverse
// rotation to the gradient, in place.
template <typename T>
void RopeForward(const RopeTables& rope, int64_t n, int64_t heads, T* x);
template <typename T>
void RopeBackward(const RopeTables& rope, int64_t n, int64_t heads, T* dx);

// Causal attention, q [B·T, H·D], k and v [B·T, KV·D], query head h reading key/value head
// h / (H/KV), scores scaled by 1/sqrt(D) → out [B·T, H·D]; att [B, H, T, T] keeps the softmax
// probabilities for backward. Backward overwrites dq, dk, dv.
template <typename T>
void GqaAttentionForward(const T* q, const T* k, const T* v, int64_t b, int64_t t, int64_t h, int64_t kv,
                         int64_t d, T* out, T* att);
template <typename T>
void GqaAttentionBackward(const T* dout, const T* q, const T* k, const T* v, const T* att, int64_t b, int64_t t,
                          int64_t h, int64_t kv, int64_t d, T* dq, T* dk, T* dv);

// out = silu(gate) · up, elementwise; backward overwrites dgate and dup.
template <typename T>
void SwiGluForward(const T* gate, const T* up, int64_t n, T* out);
template <typename T>
void SwiGluBackward(const T* dout, const T* gate, const T* up, int64_t n, T* dgate, T* dup);

}  // namespace fp8::train
