// SPDX-License-Identifier: Apache-2.0
// Device kernels the Llama family (Llama, Qwen3) adds to train_kernels.h: RMSNorm (also fused
// with the residual add before it, and per head for Qwen3's q/k norm), rotary position embedding
// and the SwiGLU gate, forward and backward. Launchers in rmsnorm.cu, rope.cu and swiglu.cu; the
// CPU reference is worker/train/llama_layers.h. Grouped-query attention is the flash attention's
// kv_heads (sm90_flash_attention.h).
//
// Layouts as train_kernels.h: activations row-major [N, C], N = B·T, row i at position i % T.
// Reductions run in a fixed order (bitwise repeatable); parameter gradients ACCUMULATE.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/scaling.h"
#include "worker/train/cuda/train_kernels.h"

namespace fp8::train::cuda {

// RMSNorm over rows of c: out = x · rstd · w, rstd = rsqrt(mean(x²) + eps) kept [n] (fp32).
Status RmsNormForward(const float* x, const float* w, int64_t n, int64_t c, float eps, bf16* out,
                      float* rstd, cudaStream_t s);
// out = res + y (fp32 residual add of a projection output that has no bias), then
// RmsNormForward(out) into ln_out/rstd, in one pass, bitwise equal to the two.
Status ResidualAddRmsNorm(const float* res, const bf16* y, int64_t n, int64_t c, float* out,
                          const float* w, float eps, bf16* ln_out, float* rstd, cudaStream_t s);
// fp8-blockwise: the norm's output goes straight into the next linear layers' cast operand
// (Fp8BlockOperand, train_kernels.h) and is never written in bf16. First the statistics:
// RmsNormRstd writes the rstd RmsNormForward computes, ResidualAddRmsRstd the out and rstd of
// ResidualAddRmsNorm (same bits). Then RmsNormCastBlockwise casts x·rstd·w, rounded to bf16 as
// RmsNormForward writes it, into op: the bytes and scales Sm90Fp8Quantize1x128AndTransposed128x128
// (E4M3) gives on RmsNormForward's output. n, c multiples of 16; x 16-byte aligned; amax_bits
// (may be null) takes max |output| (DeviceFp8CastStats::amax's bits).
Status RmsNormRstd(const float* x, int64_t n, int64_t c, float eps, float* rstd, cudaStream_t s);
Status ResidualAddRmsRstd(const float* res, const bf16* y, int64_t n, int64_t c, float* out, float eps,
                          float* rstd, cudaStream_t s);
Status RmsNormCastBlockwise(const float* x, const float* rstd, const float* w, int64_t n, int64_t c,
                            kernels::ScaleFormat sf, const Fp8BlockOperand& op, unsigned int* amax_bits,
                            cudaStream_t s);
// dx += ∂loss/∂x (fp32 residual gradient ACCUMULATES), dx_bf16 (may be null) = the updated dx
// rounded to bf16, dw += ∂/∂w; scratch ≥ ColumnScratchFloats(n, c) floats (train_kernels.h).
Status RmsNormBackward(const bf16* dout, const float* x, const float* w, const float* rstd,
                       int64_t n, int64_t c, float* dx, bf16* dx_bf16, float* dw, float* scratch,
                       cudaStream_t s);

// Qwen3's q/k norm: in place on x [n rows, pitch ld] holding `heads` heads of head_dim each,
// every head RMS-normalised with the shared w [head_dim]; x_in (same layout, may alias nothing)
// receives the input for backward, rstd [n·heads].
Status HeadRmsNormForward(bf16* x, int64_t n, int64_t heads, int64_t head_dim, int64_t ld,
                          const float* w, float eps, bf16* x_in, float* rstd, cudaStream_t s);
// dx (in place on dout, same layout) and dw += ; scratch ≥ ColumnScratchFloats(n·heads, head_dim).
Status HeadRmsNormBackward(bf16* dout, const bf16* x_in, int64_t n, int64_t heads, int64_t head_dim,
                           int64_t ld, const float* w, const float* rstd, float* dw, float* scratch,
                           cudaStream_t s);

// Rotary embedding, transformers' rotate_half layout, in place on x [n rows = B·T, pitch ld],
// `heads` heads of head_dim from column 0; row i is position i % t; cos/sin [t, head_dim/2] fp32
// (device, from the CPU MakeRopeTables). Each head's halves (a, b) become
// (a·cos − b·sin, b·cos + a·sin). Backward: the inverse rotation of the gradient, in place.
Status RopeForward(bf16* x, int64_t n, int64_t t, int64_t heads, int64_t head_dim, int64_t ld,
                   const float* cos, const float* sin, cudaStream_t s);
Status RopeBackward(bf16* dx, int64_t n, int64_t t, int64_t heads, int64_t head_dim, int64_t ld,
                    const float* cos, const float* sin, cudaStream_t s);

// out = silu(gate) · up over n elements; backward overwrites dgate and dup.
Status SwiGluForward(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t s);
Status SwiGluBackward(const bf16* dout, const bf16* gate, const bf16* up, int64_t n, bf16* dgate,
                      bf16* dup, cudaStream_t s);
// The same over rows: gate and up [rows, cols] at row pitch ld (the merged gate/up projection's
// output [rows, 2·cols] has gate in its first cols columns and up in the rest: ld = 2·cols),
// out and dout dense [rows, cols], dgate and dup at pitch ld like gate and up. The flat forms
// are one row of these.
Status SwiGluForwardRows(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int64_t ld,
                         bf16* out, cudaStream_t s);
Status SwiGluBackwardRows(const bf16* dout, const bf16* gate, const bf16* up, int64_t rows,
                          int64_t cols, int64_t ld, bf16* dgate, bf16* dup, cudaStream_t s);
// fp8-blockwise: silu(gate)·up over [rows, cols] (pitch ld as above), rounded to bf16 as
// SwiGluForward writes it, cast straight into op (the down projection's operand) as
// RmsNormCastBlockwise does. ld a multiple of 8, gate and up 16-byte aligned.
Status SwiGluCastBlockwise(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int64_t ld,
                           kernels::ScaleFormat sf, const Fp8BlockOperand& op, unsigned int* amax_bits,
                           cudaStream_t s);

}  // namespace fp8::train::cuda
