// SPDX-License-Identifier: Apache-2.0
// LayerNorm forward (also fused with the residual add before it) and backward, and the
// deterministic column sums behind its dw/db, which the linear layers' bias gradients share
// (ColumnSumAccumulate).
// Launchers of train_kernels.h.
#include "worker/train/cuda/train_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

// The rest of a warp-per-row LayerNorm once the lanes' partial sums of the row are known: mean,
// variance (a second pass over the row, from L1/L2), the normalised bf16 row and the statistics.
__device__ void WarpLayerNormFromSum(const float* xr, float partial_sum, int64_t row, int64_t c, int lane,
                                     const float* w, const float* b, bf16* out, float* mean, float* rstd) {
  const float mu = WarpSum(partial_sum) / static_cast<float>(c);
  float v = 0;
  for (int64_t j = lane; j < c; j += 32) {
    const float d = xr[j] - mu;
    v += d * d;
  }
  const float rs = rsqrtf(WarpSum(v) / static_cast<float>(c) + 1e-5f);
  bf16* o = out + row * c;
  for (int64_t j = lane; j < c; j += 32) o[j] = __float2bfloat16((xr[j] - mu) * rs * w[j] + b[j]);
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// One warp per row.
__global__ void LayerNormForwardKernel(const float* x, const float* w, const float* b, int64_t n,
                                       int64_t c, bf16* out, float* mean, float* rstd) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n) return;
  const float* xr = x + row * c;
  float s = 0;
  for (int64_t j = lane; j < c; j += 32) s += xr[j];
  WarpLayerNormFromSum(xr, s, row, c, lane, w, b, out, mean, rstd);
}

// LayerNorm with the row held in registers, one block per row: thread t holds the float4s t,
// t + blockDim, … (at most kLnVec). With y (a projection's output) the row is res + y + b[j],
// written to out first (the residual add); without, res is the row and only read. Each tensor is
// read once and written once: the warp-per-row kernels below read the row three times and ran at
// 40–60% of the memory bandwidth at C = 4096 (bench_trainer_cuda --breakdown). Needs c % 4 == 0,
// 16-byte aligned fp32 pointers, 8-byte aligned y / ln_out, c ≤ 4·256·kLnVec.
constexpr int kLnVec = 8;
__global__ void LayerNormRowKernel(const float* res, const bf16* y, const float* b, int64_t c, float* out,
                                   const float* w, const float* lb, bf16* ln_out, float* mean, float* rstd) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x, nv = c / 4;
  const float4* rr = reinterpret_cast<const float4*>(res + row * c);
  float4 h[kLnVec];
  float s = 0;
#pragma unroll
  for (int i = 0; i < kLnVec; ++i) {
    const int64_t q = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (q >= nv) break;
    float4 r = rr[q];
    if (y) {
      const uint2 yv = reinterpret_cast<const uint2*>(y + row * c)[q];
      const float2 y01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&yv.x));
      const float2 y23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&yv.y));
      const float4 bb = reinterpret_cast<const float4*>(b)[q];
      r = make_float4(r.x + y01.x + bb.x, r.y + y01.y + bb.y, r.z + y23.x + bb.z, r.w + y23.y + bb.w);
      reinterpret_cast<float4*>(out + row * c)[q] = r;
    }
    h[i] = r;
    s += (r.x + r.y) + (r.z + r.w);
  }
  const float mu = BlockSum(s, sh) / static_cast<float>(c);
  float v = 0;
#pragma unroll
  for (int i = 0; i < kLnVec; ++i) {
    const int64_t q = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (q >= nv) break;
    const float dx = h[i].x - mu, dy = h[i].y - mu, dz = h[i].z - mu, dw = h[i].w - mu;
    v += (dx * dx + dy * dy) + (dz * dz + dw * dw);
  }
  const float rs = rsqrtf(BlockSum(v, sh) / static_cast<float>(c) + 1e-5f);
#pragma unroll
  for (int i = 0; i < kLnVec; ++i) {
    const int64_t q = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (q >= nv) break;
    const float4 wv = reinterpret_cast<const float4*>(w)[q], bv = reinterpret_cast<const float4*>(lb)[q];
    const __nv_bfloat162 lo = __floats2bfloat162_rn((h[i].x - mu) * rs * wv.x + bv.x, (h[i].y - mu) * rs * wv.y + bv.y);
    const __nv_bfloat162 hi = __floats2bfloat162_rn((h[i].z - mu) * rs * wv.z + bv.z, (h[i].w - mu) * rs * wv.w + bv.w);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    reinterpret_cast<uint2*>(ln_out + row * c)[q] = packed;
  }
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// Threads per row for LayerNormRowKernel, or 0 when the row kernel cannot take these arguments.
int LayerNormRowThreads(int64_t c, std::initializer_list<const void*> ptrs16, std::initializer_list<const void*> ptrs8) {
  if (c % 4 != 0) return 0;
  for (const void* p : ptrs16)
    if (reinterpret_cast<uintptr_t>(p) % 16) return 0;
  for (const void* p : ptrs8)
    if (reinterpret_cast<uintptr_t>(p) % 8) return 0;
  const int64_t nv = c / 4;
  const int threads = static_cast<int>(std::min<int64_t>(256, (nv + 31) / 32 * 32));
  return nv <= static_cast<int64_t>(threads) * kLnVec ? threads : 0;
}

// ResidualAdd then LayerNormForward in one kernel (one warp per row), where the row kernel above
// does not apply: out = res + y + b[j] is written and summed in the same pass, and the variance /
// normalise passes read the row back from L1/L2. Same sums in the same order as the two warp
// kernels: bitwise equal.
__global__ void ResidualAddLayerNormKernel(const float* res, const bf16* y, const float* b, int64_t n,
                                           int64_t c, float* out, const float* w, const float* lb,
                                           bf16* ln_out, float* mean, float* rstd) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n) return;
  const float* rr = res + row * c;
  const bf16* yr = y + row * c;
  float* xr = out + row * c;
  float s = 0;
  for (int64_t j = lane; j < c; j += 32) {
    const float h = rr[j] + __bfloat162float(yr[j]) + b[j];
    xr[j] = h;
    s += h;
  }
  WarpLayerNormFromSum(xr, s, row, c, lane, w, lb, ln_out, mean, rstd);
}

__global__ void LayerNormBackwardDxKernel(const bf16* dout, const float* x, const float* w,
                                          const float* mean, const float* rstd, int64_t n,
                                          int64_t c, float* dx, bf16* dx_bf16) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n) return;
  const float mu = mean[row], rs = rstd[row];
  const float* xr = x + row * c;
  const bf16* dr = dout + row * c;
  float s1 = 0, s2 = 0;
  for (int64_t j = lane; j < c; j += 32) {
    const float dn = __bfloat162float(dr[j]) * w[j];
    s1 += dn;
    s2 += dn * (xr[j] - mu) * rs;
  }
  s1 = WarpSum(s1) / static_cast<float>(c);
  s2 = WarpSum(s2) / static_cast<float>(c);
  float* dxr = dx + row * c;
  for (int64_t j = lane; j < c; j += 32) {
    const float dn = __bfloat162float(dr[j]) * w[j];
    const float g = dxr[j] + rs * (dn - s1 - (xr[j] - mu) * rs * s2);
    dxr[j] = g;
    if (dx_bf16) dx_bf16[row * c + j] = __float2bfloat16(g);
  }
}

// LayerNorm backward in one pass over dout and x (the two-kernel path above read both twice):
// a block owns kLnRows rows. Phase 1: each warp reduces its rows' Σ dn and Σ dn·x̂ (dn = dout·w).
// Phase 2: each thread owns 4 adjacent columns and walks the block's rows in order, adding dx and
// keeping that column group's Σ dout·x̂ and Σ dout in registers; they land in partial[chunk, j]
// (dw half, then db half), summed over chunks by LnColumnFinalizeKernel. Fixed order throughout,
// so results are bitwise repeatable. The second read of a row comes from L2 (a block's rows are
// kLnRows·c·6 bytes). Needs c % 4 == 0 and 16-byte aligned x/dx, 8-byte aligned dout rows.
__global__ void LayerNormBackwardFusedKernel(const bf16* dout, const float* x, const float* w,
                                             const float* mean, const float* rstd, int64_t n,
                                             int64_t c, float* dx, bf16* dx_bf16, float* partial) {
  __shared__ float s_mu[kLnRows], s_rs[kLnRows], s_s1[kLnRows], s_s2[kLnRows];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kLnRows;
  const int rows = static_cast<int>(n - r0 < kLnRows ? n - r0 : kLnRows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int r = warp; r < rows; r += nwarps) {
    const int64_t row = r0 + r;
    const float mu = mean[row], rs = rstd[row];
    const float* xr = x + row * c;
    const bf16* dr = dout + row * c;
    float s1 = 0, s2 = 0;
    for (int64_t j = lane * 4; j < c; j += 128) {
      const float4 xv = *reinterpret_cast<const float4*>(xr + j);
      const uint2 dv = *reinterpret_cast<const uint2*>(dr + j);
      const float2 d01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv.x));
      const float2 d23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv.y));
      const float dn0 = d01.x * w[j], dn1 = d01.y * w[j + 1], dn2 = d23.x * w[j + 2], dn3 = d23.y * w[j + 3];
      s1 += (dn0 + dn1) + (dn2 + dn3);
      s2 += ((dn0 * (xv.x - mu) + dn1 * (xv.y - mu)) + (dn2 * (xv.z - mu) + dn3 * (xv.w - mu))) * rs;
    }
    s1 = WarpSum(s1);
    s2 = WarpSum(s2);
    if (lane == 0) {
      s_mu[r] = mu;
      s_rs[r] = rs;
      s_s1[r] = s1 * inv_c;
      s_s2[r] = s2 * inv_c;
    }
  }
  __syncthreads();
  const int64_t chunks = gridDim.x;
  for (int64_t j = static_cast<int64_t>(threadIdx.x) * 4; j < c; j += static_cast<int64_t>(blockDim.x) * 4) {
    const float w4[4] = {w[j], w[j + 1], w[j + 2], w[j + 3]};
    float aw[4] = {0, 0, 0, 0}, ab[4] = {0, 0, 0, 0};
    for (int r = 0; r < rows; ++r) {
      const int64_t off = (r0 + r) * c + j;
      const float4 xv = *reinterpret_cast<const float4*>(x + off);
      const uint2 dv = *reinterpret_cast<const uint2*>(dout + off);
      const float2 d01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv.x));
      const float2 d23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv.y));
      float4 gv = *reinterpret_cast<float4*>(dx + off);
      const float mu = s_mu[r], rs = s_rs[r], s1 = s_s1[r], s2 = s_s2[r];
      const float d[4] = {d01.x, d01.y, d23.x, d23.y};
      const float xh[4] = {(xv.x - mu) * rs, (xv.y - mu) * rs, (xv.z - mu) * rs, (xv.w - mu) * rs};
      float g[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        g[k] += rs * (d[k] * w4[k] - s1 - xh[k] * s2);
        aw[k] += d[k] * xh[k];
        ab[k] += d[k];
      }
      *reinterpret_cast<float4*>(dx + off) = make_float4(g[0], g[1], g[2], g[3]);
      if (dx_bf16) {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(g[0], g[1]), hi = __floats2bfloat162_rn(g[2], g[3]);
        uint2 packed;
        packed.x = *reinterpret_cast<const uint32_t*>(&lo);
        packed.y = *reinterpret_cast<const uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(dx_bf16 + off) = packed;
      }
    }
    *reinterpret_cast<float4*>(partial + blockIdx.x * c + j) = make_float4(aw[0], aw[1], aw[2], aw[3]);
    *reinterpret_cast<float4*>(partial + (chunks + blockIdx.x) * c + j) = make_float4(ab[0], ab[1], ab[2], ab[3]);
  }
}

// dst[j] += Σ_k partial[k, j] over many chunks: 8 warps split the chunks (fixed assignment), a
// warp's lanes take 32 adjacent columns, then the 8 partial sums are added in warp order.
// blockIdx.y picks the half of partial (dw / db). Deterministic.
__global__ void LnColumnFinalizeKernel(const float* partial, int64_t chunks, int64_t c, float* dw,
                                       float* db) {
  __shared__ float sh[8][33];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  const float* src = partial + (blockIdx.y ? chunks * c : 0);
  float s = 0;
  if (j < c)
    for (int64_t k = warp; k < chunks; k += 8) s += src[k * c + j];
  sh[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && j < c) {
    float t = 0;
    for (int q = 0; q < 8; ++q) t += sh[q][lane];
    (blockIdx.y ? db : dw)[j] += t;
  }
}

// Partial column sums over chunks of kColChunk rows: partial[chunk, j]. With x (LayerNorm) the
// first half gets Σ dout·x̂ and the second Σ dout; without, only Σ dout into the first half.
__global__ void ColumnPartialKernel(const bf16* dout, const float* x, const float* mean,
                                    const float* rstd, int64_t n, int64_t c, float* partial) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t chunk = blockIdx.y, chunks = gridDim.y;
  if (j >= c) return;
  const int64_t r0 = chunk * kColChunk, r1 = min(n, r0 + kColChunk);
  float sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const float d = __bfloat162float(dout[r * c + j]);
    sb += d;
    if (x) sw += d * (x[r * c + j] - mean[r]) * rstd[r];
  }
  if (x) {
    partial[chunk * c + j] = sw;
    partial[(chunks + chunk) * c + j] = sb;
  } else {
    partial[chunk * c + j] = sb;
  }
}

// Column sums of dy [m, n] (n % 8 == 0, 16-byte aligned rows) per chunk of kColSumRows rows: a
// 32 x 8 block takes 256 adjacent columns; thread (x, y) owns columns 8x..8x+7 and rows y, y+8, …
// of the chunk with 16-byte loads (the scalar ColumnPartialKernel reads 2 bytes per thread per
// row and ran at about half the memory bandwidth); the 8 row lanes are added in y order through
// shared memory, so the result is deterministic. partial[chunk, j].
constexpr int kColSumRows = 128;
__global__ void ColumnSum8PartialKernel(const bf16* dy, int64_t m, int64_t n, float* partial) {
  __shared__ float sh[8][256];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 256 + tx * 8;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kColSumRows, r1 = min(m, r0 + kColSumRows);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (j < n) {
#pragma unroll 4
    for (int64_t r = r0 + ty; r < r1; r += 8) {
      float f[8];
      Load8(dy + r * n + j, f);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] += f[k];
    }
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) sh[ty][tx * 8 + k] = acc[k];
  __syncthreads();
  const int t = ty * 32 + tx;
  const int64_t jj = static_cast<int64_t>(blockIdx.x) * 256 + t;
  if (jj < n) {
    float sum = 0;
#pragma unroll
    for (int q = 0; q < 8; ++q) sum += sh[q][t];
    partial[blockIdx.y * n + jj] = sum;
  }
}

__global__ void ColumnFinalizeKernel(const float* partial, int64_t chunks, int64_t c, float* dst) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  float s = 0;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * c + j];
  dst[j] += s;
}

}  // namespace

Status LayerNormForward(const float* x, const float* w, const float* b, int64_t n, int64_t c,
                        bf16* out, float* mean, float* rstd, cudaStream_t s) {
  if (const int threads = LayerNormRowThreads(c, {x, w, b}, {out})) {
    LayerNormRowKernel<<<static_cast<unsigned>(n), threads, 0, s>>>(x, nullptr, nullptr, c, nullptr, w, b, out, mean, rstd);
    LAUNCH_CHECK();
  }
  LayerNormForwardKernel<<<Blocks(n * 32), kThreads, 0, s>>>(x, w, b, n, c, out, mean, rstd);
  LAUNCH_CHECK();
}

Status ResidualAddLayerNorm(const float* res, const bf16* y, const float* b, int64_t n, int64_t c,
                            float* out, const float* w, const float* lb, bf16* ln_out, float* mean,
                            float* rstd, cudaStream_t s) {
  if (const int threads = LayerNormRowThreads(c, {res, b, out, w, lb}, {y, ln_out})) {
    LayerNormRowKernel<<<static_cast<unsigned>(n), threads, 0, s>>>(res, y, b, c, out, w, lb, ln_out, mean, rstd);
    LAUNCH_CHECK();
  }
  ResidualAddLayerNormKernel<<<Blocks(n * 32), kThreads, 0, s>>>(res, y, b, n, c, out, w, lb, ln_out, mean, rstd);
  LAUNCH_CHECK();
}

Status LayerNormBackward(const bf16* dout, const float* x, const float* w, const float* mean,
                         const float* rstd, int64_t n, int64_t c, float* dx, bf16* dx_bf16,
                         float* dw, float* db, float* scratch, cudaStream_t s) {
  const bool aligned = c % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(dx) % 16 == 0 && reinterpret_cast<uintptr_t>(dout) % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(dx_bf16) % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(scratch) % 16 == 0;
  if (aligned) {
    const int64_t chunks = (n + kLnRows - 1) / kLnRows;
    LayerNormBackwardFusedKernel<<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(dout, x, w, mean, rstd, n, c, dx, dx_bf16, scratch);
    FP8_RETURN_IF_LAUNCH_FAILED();
    LnColumnFinalizeKernel<<<dim3(static_cast<unsigned>((c + 31) / 32), 2), kThreads, 0, s>>>(scratch, chunks, c, dw, db);
    LAUNCH_CHECK();
  }
  LayerNormBackwardDxKernel<<<Blocks(n * 32), kThreads, 0, s>>>(dout, x, w, mean, rstd, n, c, dx, dx_bf16);
  FP8_RETURN_IF_LAUNCH_FAILED();
  const int64_t chunks = (n + kColChunk - 1) / kColChunk;
  ColumnPartialKernel<<<dim3(Blocks(c), static_cast<unsigned>(chunks)), kThreads, 0, s>>>(dout, x, mean, rstd, n, c, scratch);
  FP8_RETURN_IF_LAUNCH_FAILED();
  ColumnFinalizeKernel<<<Blocks(c), kThreads, 0, s>>>(scratch, chunks, c, dw);
  FP8_RETURN_IF_LAUNCH_FAILED();
  ColumnFinalizeKernel<<<Blocks(c), kThreads, 0, s>>>(scratch + chunks * c, chunks, c, db);
  LAUNCH_CHECK();
}

Status ColumnSumAccumulate(const bf16* dy, int64_t m, int64_t n, float* db, float* scratch,
                           cudaStream_t s) {
  if (Vec8(n, {dy, scratch})) {
    const int64_t chunks = (m + kColSumRows - 1) / kColSumRows;
    ColumnSum8PartialKernel<<<dim3(static_cast<unsigned>((n + 255) / 256), static_cast<unsigned>(chunks)), dim3(32, 8), 0, s>>>(dy, m, n, scratch);
    FP8_RETURN_IF_LAUNCH_FAILED();
    LnColumnFinalizeKernel<<<dim3(static_cast<unsigned>((n + 31) / 32), 1), kThreads, 0, s>>>(scratch, chunks, n, db, nullptr);
    LAUNCH_CHECK();
  }
  const int64_t chunks = (m + kColChunk - 1) / kColChunk;
  ColumnPartialKernel<<<dim3(Blocks(n), static_cast<unsigned>(chunks)), kThreads, 0, s>>>(dy, nullptr, nullptr, nullptr, m, n, scratch);
  FP8_RETURN_IF_LAUNCH_FAILED();
  ColumnFinalizeKernel<<<Blocks(n), kThreads, 0, s>>>(scratch, chunks, n, db);
  LAUNCH_CHECK();
}

}  // namespace fp8::train::cuda
