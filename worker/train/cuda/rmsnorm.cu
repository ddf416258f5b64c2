// SPDX-License-Identifier: Apache-2.0
// RMSNorm forward (also fused with the residual add before it, and per head: Qwen3's q/k norm)
// and backward, with deterministic column sums behind dw. Launchers of llama_kernels.h.
//
// x̂ = x·rstd, out = x̂·w; backward: dx = rstd·(dn − x̂·mean(dn·x̂)), dn = dout·w; dw += Σ dout·x̂.
// Every reduction has a fixed shape (block or warp sums, chunks of kLnRows rows summed in
// chunk order), so the results are the same bits on every run.
#include "worker/train/cuda/llama_kernels.h"

#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/fused_block_cast.cuh"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

// One block per row. With y the row is res + y, written to out first (the residual add); without,
// res is the row and only read. The normalise pass reads the row back from where it was summed;
// ResidualAddRmsNorm and RmsNormForward on its out therefore add the same values in the same
// order (same block size, chosen from c alone) and are bitwise equal. Without ln_out only rstd
// (and out) is written: the statistics pass in front of RmsNormCastBlockwise, same bits.
__global__ void RmsNormRowKernel(const float* res, const bf16* y, int64_t c, float* out, const float* w, float eps,
                                 bf16* ln_out, float* rstd) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x;
  const float* rr = res + row * c;
  float* xr = y ? out + row * c : nullptr;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float h = rr[j];
    if (y) {
      h += __bfloat162float(y[row * c + j]);
      xr[j] = h;
    }
    ss += h * h;
  }
  const float rs = rsqrtf(BlockSum(ss, sh) / static_cast<float>(c) + eps);
  if (ln_out) {
    const float* src = y ? xr : rr;
    bf16* o = ln_out + row * c;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = __float2bfloat16(src[j] * rs * w[j]);
  }
  if (threadIdx.x == 0) rstd[row] = rs;
}

int RowThreads(int64_t c) { return static_cast<int>(c >= 1024 ? 256 : (c >= 256 ? 128 : 32)); }

// RmsNormRowKernel's work with a warp per row (8 rows a block) and 16-byte accesses, where the
// block per row has 4- and 2-byte accesses and a block reduction (the residual add + statistics
// at llama-3b's [8192, 3072] on an H200: 82 µs, 3.1 TB/s, against 67 µs, 3.75 TB/s here). Each
// lane sums its columns lane·4, lane·4 + 128, … in order, then the warp sum. Every launcher takes
// it when c % 4 == 0 and the rows are aligned (RowAligned), so the fused add and the norm of its
// output still add the same values in the same order.
__global__ void RmsNormRowWarpKernel(const float* __restrict__ res, const bf16* __restrict__ y, int64_t n, int64_t c,
                                     float* __restrict__ out, const float* __restrict__ w, float eps, bf16* __restrict__ ln_out,
                                     float* __restrict__ rstd) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n) return;
  const float* rr = res + row * c;
  float* xr = y ? out + row * c : nullptr;
  float ss = 0;
#pragma unroll 4
  for (int64_t j = lane * 4; j < c; j += 128) {
    float4 h = *reinterpret_cast<const float4*>(rr + j);
    if (y) {
      const uint2 dv = *reinterpret_cast<const uint2*>(y + row * c + j);
      const float2 d01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv.x));
      const float2 d23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv.y));
      h.x += d01.x, h.y += d01.y, h.z += d23.x, h.w += d23.y;
      *reinterpret_cast<float4*>(xr + j) = h;
    }
    ss += h.x * h.x + h.y * h.y + h.z * h.z + h.w * h.w;
  }
  const float rs = rsqrtf(WarpSum(ss) / static_cast<float>(c) + eps);
  if (ln_out) {
    const float* src = y ? xr : rr;
    bf16* o = ln_out + row * c;
#pragma unroll 4
    for (int64_t j = lane * 4; j < c; j += 128) {
      const float4 h = *reinterpret_cast<const float4*>(src + j);
      const __nv_bfloat162 lo = __floats2bfloat162_rn(h.x * rs * w[j], h.y * rs * w[j + 1]);
      const __nv_bfloat162 hi = __floats2bfloat162_rn(h.z * rs * w[j + 2], h.w * rs * w[j + 3]);
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo);
      packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(o + j) = packed;
    }
  }
  if (lane == 0) rstd[row] = rs;
}

bool RowAligned(int64_t c, const void* res, const void* y, const void* out, const void* ln_out) {
  auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  return c % 4 == 0 && aligned(res, 16) && aligned(out, 16) && aligned(y, 8) && aligned(ln_out, 8);
}

// One of the two row kernels (see RmsNormRowWarpKernel).
Status LaunchRmsNormRows(const float* res, const bf16* y, int64_t n, int64_t c, float* out, const float* w, float eps, bf16* ln_out,
                         float* rstd, cudaStream_t s) {
  if (n == 0) return OkStatus();
  if (RowAligned(c, res, y, out, ln_out)) {
    RmsNormRowWarpKernel<<<static_cast<unsigned>((n + 7) / 8), 256, 0, s>>>(res, y, n, c, out, w, eps, ln_out, rstd);
  } else {
    RmsNormRowKernel<<<static_cast<unsigned>(n), RowThreads(c), 0, s>>>(res, y, c, out, w, eps, ln_out, rstd);
  }
  LAUNCH_CHECK();
}

// The RMSNorm output x·rstd·w of 8 rows × 8 columns as bf16 words, for the fused cast: the
// arithmetic and rounding of RmsNormRowKernel's normalise pass.
struct RmsNormTileRows {
  const float* x;
  const float* rstd;
  const float* w;
  int64_t rows, cols;
  __device__ __forceinline__ void operator()(int64_t row, int64_t col, uint4 (&raw)[8]) const {
    float wv[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) wv[k] = col < cols ? w[col + k] : 0.0f;
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const int64_t r = row + p;
      if (r < rows && col < cols) {
        float v[8];
        Load8(x + r * cols + col, v);
        const float rs = rstd[r];
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = v[k] * rs * wv[k];
        raw[p] = PackBf16x8(v);
      } else {
        raw[p] = make_uint4(0, 0, 0, 0);
      }
    }
  }
};

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(bf16 v) { return __bfloat162float(v); }

// Rows of the backward are "virtual": v = r·heads + h is head h of row r, at r·ld + h·hd, so the
// full-row norm (heads 1, hd = ld = c) and the per-head norm share the kernels.
struct RowMap {
  int64_t heads, hd, ld;
  __device__ __forceinline__ int64_t Offset(int64_t v) const { return (v / heads) * ld + (v % heads) * hd; }
};

// partial[chunk, j] = Σ over the chunk's kLnRows virtual rows of dout·x·rstd, thread per column;
// blockIdx.y strides over the chunks (the per-head norm has n·heads rows).
template <typename X>
__global__ void RmsDwPartialKernel(const bf16* dout, const X* x, const float* rstd, int64_t rows, RowMap m,
                                   int64_t chunks, float* partial) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= m.hd) return;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t v0 = chunk * kLnRows, v1 = min(rows, v0 + kLnRows);
    float acc = 0;
    for (int64_t v = v0; v < v1; ++v) {
      const int64_t off = m.Offset(v) + j;
      acc += __bfloat162float(dout[off]) * (ToF(x[off]) * rstd[v]);
    }
    partial[chunk * m.hd + j] = acc;
  }
}

// dst[j] += Σ_k partial[k, j]: 8 warps split the chunks (warp w takes w, w + 8, …), a warp's
// lanes take 32 adjacent columns, then the 8 sums are added in warp order. Deterministic.
__global__ void RmsDwFinalizeKernel(const float* partial, int64_t chunks, int64_t c, float* dst) {
  __shared__ float sh[8][33];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  float s = 0;
  if (j < c)
    for (int64_t k = warp; k < chunks; k += 8) s += partial[k * c + j];
  sh[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && j < c) {
    float t = 0;
    for (int q = 0; q < 8; ++q) t += sh[q][lane];
    dst[j] += t;
  }
}

// One warp per virtual row: g = rstd·(dn − x̂·mean(dn·x̂)). Full rows (dx_acc set): dx += g in
// fp32 and dx_bf16 (if set) the rounded sum; per head (dx_acc null): dout is overwritten by g.
template <typename X>
__global__ void RmsDxKernel(bf16* dout, const X* x, const float* w, const float* rstd, int64_t rows, RowMap m,
                            float* dx_acc, bf16* dx_bf16) {
  const int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (v >= rows) return;
  const int64_t base = m.Offset(v);
  const float rs = rstd[v];
  float s = 0;
  for (int64_t j = lane; j < m.hd; j += 32)
    s += __bfloat162float(dout[base + j]) * w[j] * (ToF(x[base + j]) * rs);
  const float mean = WarpSum(s) / static_cast<float>(m.hd);
  for (int64_t j = lane; j < m.hd; j += 32) {
    const float dn = __bfloat162float(dout[base + j]) * w[j];
    const float g = rs * (dn - ToF(x[base + j]) * rs * mean);
    if (dx_acc) {
      const float t = dx_acc[base + j] + g;
      dx_acc[base + j] = t;
      if (dx_bf16) dx_bf16[base + j] = __float2bfloat16(t);
    } else {
      dout[base + j] = __float2bfloat16(g);
    }
  }
}

__device__ __forceinline__ float4 Bf16x4(uint2 v) {
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

// Full rows in one pass over dout and x from device memory (the dw partial and dx kernels above
// read both twice), after LayerNormBackwardFusedKernel: a block owns kLnRows rows and walks them
// in sub-chunks of kSub. Phase 1: a warp per row of the sub-chunk reduces Σ dn·x̂ (dn = dout·w).
// Phase 2: each thread owns the column quads t, t + 256, … (kQuads of them, c ≤ 1024·kQuads) and
// walks the sub-chunk's rows in order, adding g to dx and keeping Σ dout·x̂ for its columns in
// registers across the block's rows, written to partial[chunk, j] as RmsDwPartialKernel writes it
// (same products, same order: dw's bits do not change). The sub-chunks keep phase 2's second
// read of dout and x close behind phase 1's (a whole 32-row chunk per block before), and phase 2
// issues kBatch rows' loads before it uses any, where the kernel before walked its 32 rows one
// load at a time: 184 µs (2.2 TB/s) at llama-3b's [8192, 3072] on an H200, 158 µs (2.55 TB/s)
// now; one block per SM with 8 rows' loads in flight measured 180 µs. Same bits as before. Needs
// c % 4 == 0, 16-byte aligned x and dx, 8-byte aligned dout (and dx_bf16) rows.
constexpr int kSub = 8;
template <int kQuads, int kMinBlocks>
__global__ void __launch_bounds__(256, kMinBlocks)
    RmsNormBackwardFusedKernel(const bf16* __restrict__ dout, const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ rstd, int64_t n, int64_t c, float* __restrict__ dx,
                               bf16* __restrict__ dx_bf16, float* __restrict__ partial) {
  __shared__ float s_rs[kSub], s_mean[kSub];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kLnRows;
  const int rows = static_cast<int>(n - r0 < kLnRows ? n - r0 : kLnRows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  float aw[kQuads][4], w4[kQuads][4];
#pragma unroll
  for (int k = 0; k < kQuads; ++k) {
    const int64_t j = (static_cast<int64_t>(threadIdx.x) + 256 * k) * 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      aw[k][e] = 0;
      w4[k][e] = j < c ? w[j + e] : 0.0f;
    }
  }
  for (int sub = 0; sub < rows; sub += kSub) {
    const int sub_rows = rows - sub < kSub ? rows - sub : kSub;
    if (warp < sub_rows) {
      const int64_t row = r0 + sub + warp;
      const float rs = rstd[row];
      const float* xr = x + row * c;
      const bf16* dr = dout + row * c;
      float s = 0;
#pragma unroll 4
      for (int64_t j = lane * 4; j < c; j += 128) {
        const float4 xv = *reinterpret_cast<const float4*>(xr + j);
        const float4 d = Bf16x4(*reinterpret_cast<const uint2*>(dr + j));
        s += (d.x * w[j] * (xv.x * rs) + d.y * w[j + 1] * (xv.y * rs)) + (d.z * w[j + 2] * (xv.z * rs) + d.w * w[j + 3] * (xv.w * rs));
      }
      s = WarpSum(s);
      if (lane == 0) {
        s_rs[warp] = rs;
        s_mean[warp] = s / static_cast<float>(c);
      }
    }
    __syncthreads();
    // 2 blocks per SM cap registers at 128: 4 rows' loads in flight fit without spilling.
    constexpr int kBatch = kMinBlocks == 2 ? 4 : kSub;
#pragma unroll
    for (int k = 0; k < kQuads; ++k) {
      const int64_t j = (static_cast<int64_t>(threadIdx.x) + 256 * k) * 4;
      if (j >= c) continue;
#pragma unroll
      for (int h = 0; h < kSub; h += kBatch) {
        float4 xv[kBatch], d[kBatch], gv[kBatch];
#pragma unroll
        for (int i = 0; i < kBatch; ++i)
          if (h + i < sub_rows) {
            const int64_t off = (r0 + sub + h + i) * c + j;
            xv[i] = *reinterpret_cast<const float4*>(x + off);
            d[i] = Bf16x4(*reinterpret_cast<const uint2*>(dout + off));
            gv[i] = *reinterpret_cast<const float4*>(dx + off);
          }
#pragma unroll
        for (int i = 0; i < kBatch; ++i)
          if (h + i < sub_rows) {
            const int64_t off = (r0 + sub + h + i) * c + j;
            const float rs = s_rs[h + i], mean = s_mean[h + i];
            const float dd[4] = {d[i].x, d[i].y, d[i].z, d[i].w};
            const float xh[4] = {xv[i].x * rs, xv[i].y * rs, xv[i].z * rs, xv[i].w * rs};
            float g[4] = {gv[i].x, gv[i].y, gv[i].z, gv[i].w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              g[e] += rs * (dd[e] * w4[k][e] - xh[e] * mean);
              aw[k][e] += dd[e] * xh[e];
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
      }
    }
    __syncthreads();  // s_rs / s_mean are the next sub-chunk's
  }
#pragma unroll
  for (int k = 0; k < kQuads; ++k) {
    const int64_t j = (static_cast<int64_t>(threadIdx.x) + 256 * k) * 4;
    if (j < c) *reinterpret_cast<float4*>(partial + blockIdx.x * c + j) = make_float4(aw[k][0], aw[k][1], aw[k][2], aw[k][3]);
  }
}

// The fused backward at c's number of column quads per thread (c ≤ 8192); false when c is wider.
bool LaunchRmsNormBackwardFused(const bf16* dout, const float* x, const float* w, const float* rstd, int64_t n, int64_t c, float* dx,
                                bf16* dx_bf16, float* partial, unsigned blocks, cudaStream_t s) {
  switch ((c + 1023) / 1024) {
    case 1: RmsNormBackwardFusedKernel<1, 2><<<blocks, 256, 0, s>>>(dout, x, w, rstd, n, c, dx, dx_bf16, partial); return true;
    case 2: RmsNormBackwardFusedKernel<2, 2><<<blocks, 256, 0, s>>>(dout, x, w, rstd, n, c, dx, dx_bf16, partial); return true;
    case 3: RmsNormBackwardFusedKernel<3, 2><<<blocks, 256, 0, s>>>(dout, x, w, rstd, n, c, dx, dx_bf16, partial); return true;
    case 4: RmsNormBackwardFusedKernel<4, 2><<<blocks, 256, 0, s>>>(dout, x, w, rstd, n, c, dx, dx_bf16, partial); return true;
    case 5: case 6: case 7: case 8:  // one block per SM: 8 quads' partials and weights need the registers
      RmsNormBackwardFusedKernel<8, 1><<<blocks, 256, 0, s>>>(dout, x, w, rstd, n, c, dx, dx_bf16, partial);
      return true;
    default: return false;
  }
}

// One warp per (row, head): x_in = x, rstd, x = x̂·w.
__global__ void HeadRmsNormForwardKernel(bf16* x, int64_t rows, RowMap m, const float* w, float eps, bf16* x_in,
                                         float* rstd) {
  const int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (v >= rows) return;
  const int64_t base = m.Offset(v);
  float ss = 0;
  for (int64_t j = lane; j < m.hd; j += 32) {
    const bf16 h = x[base + j];
    x_in[base + j] = h;
    const float f = __bfloat162float(h);
    ss += f * f;
  }
  const float rs = rsqrtf(WarpSum(ss) / static_cast<float>(m.hd) + eps);
  for (int64_t j = lane; j < m.hd; j += 32) x[base + j] = __float2bfloat16(__bfloat162float(x_in[base + j]) * rs * w[j]);
  if (lane == 0) rstd[v] = rs;
}

template <typename X>
Status DwAccumulate(const bf16* dout, const X* x, const float* rstd, int64_t rows, RowMap m, float* dw, float* scratch,
                    cudaStream_t s) {
  const int64_t chunks = (rows + kLnRows - 1) / kLnRows;
  const unsigned grid_y = static_cast<unsigned>(chunks < 65535 ? chunks : 65535);
  RmsDwPartialKernel<X><<<dim3(Blocks(m.hd), grid_y), kThreads, 0, s>>>(dout, x, rstd, rows, m, chunks, scratch);
  FP8_RETURN_IF_LAUNCH_FAILED();
  RmsDwFinalizeKernel<<<static_cast<unsigned>((m.hd + 31) / 32), 256, 0, s>>>(scratch, chunks, m.hd, dw);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace

Status RmsNormForward(const float* x, const float* w, int64_t n, int64_t c, float eps, bf16* out, float* rstd,
                      cudaStream_t s) {
  return LaunchRmsNormRows(x, nullptr, n, c, nullptr, w, eps, out, rstd, s);
}

Status ResidualAddRmsNorm(const float* res, const bf16* y, int64_t n, int64_t c, float* out, const float* w, float eps,
                          bf16* ln_out, float* rstd, cudaStream_t s) {
  return LaunchRmsNormRows(res, y, n, c, out, w, eps, ln_out, rstd, s);
}

Status RmsNormRstd(const float* x, int64_t n, int64_t c, float eps, float* rstd, cudaStream_t s) {
  return LaunchRmsNormRows(x, nullptr, n, c, nullptr, nullptr, eps, nullptr, rstd, s);
}

Status ResidualAddRmsRstd(const float* res, const bf16* y, int64_t n, int64_t c, float* out, float eps, float* rstd,
                          cudaStream_t s) {
  return LaunchRmsNormRows(res, y, n, c, out, nullptr, eps, nullptr, rstd, s);
}

Status RmsNormCastBlockwise(const float* x, const float* rstd, const float* w, int64_t n, int64_t c, kernels::ScaleFormat sf,
                            const Fp8BlockOperand& op, unsigned int* amax_bits, cudaStream_t s) {
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) return InvalidArgumentError("RmsNormCastBlockwise: x must be 16-byte aligned");
  return LaunchFusedBlockCast(n, c, sf, op, amax_bits, RmsNormTileRows{x, rstd, w, n, c}, s);
}

Status RmsNormBackward(const bf16* dout, const float* x, const float* w, const float* rstd, int64_t n, int64_t c,
                       float* dx, bf16* dx_bf16, float* dw, float* scratch, cudaStream_t s) {
  const RowMap m{1, c, c};
  auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  const int64_t chunks = (n + kLnRows - 1) / kLnRows;
  if (c % 4 == 0 && aligned(x, 16) && aligned(dx, 16) && aligned(dout, 8) && aligned(dx_bf16, 8) && aligned(scratch, 16) &&
      LaunchRmsNormBackwardFused(dout, x, w, rstd, n, c, dx, dx_bf16, scratch, static_cast<unsigned>(chunks), s)) {
    FP8_RETURN_IF_LAUNCH_FAILED();
    RmsDwFinalizeKernel<<<static_cast<unsigned>((c + 31) / 32), 256, 0, s>>>(scratch, chunks, c, dw);
    LAUNCH_CHECK();
  }
  FP8_RETURN_IF_ERROR(DwAccumulate<float>(dout, x, rstd, n, m, dw, scratch, s));
  // dout is only read: the full-row path writes dx_acc, never dout.
  RmsDxKernel<float><<<Blocks(n * 32), kThreads, 0, s>>>(const_cast<bf16*>(dout), x, w, rstd, n, m, dx, dx_bf16);
  LAUNCH_CHECK();
}

Status HeadRmsNormForward(bf16* x, int64_t n, int64_t heads, int64_t head_dim, int64_t ld, const float* w, float eps,
                          bf16* x_in, float* rstd, cudaStream_t s) {
  const int64_t rows = n * heads;
  HeadRmsNormForwardKernel<<<Blocks(rows * 32), kThreads, 0, s>>>(x, rows, RowMap{heads, head_dim, ld}, w, eps, x_in,
                                                                  rstd);
  LAUNCH_CHECK();
}

Status HeadRmsNormBackward(bf16* dout, const bf16* x_in, int64_t n, int64_t heads, int64_t head_dim, int64_t ld,
                           const float* w, const float* rstd, float* dw, float* scratch, cudaStream_t s) {
  const int64_t rows = n * heads;
  const RowMap m{heads, head_dim, ld};
  // dw first: it reads dout, which the dx pass overwrites.
  FP8_RETURN_IF_ERROR(DwAccumulate<bf16>(dout, x_in, rstd, rows, m, dw, scratch, s));
  RmsDxKernel<bf16><<<Blocks(rows * 32), kThreads, 0, s>>>(dout, x_in, w, rstd, rows, m, nullptr, nullptr);
  LAUNCH_CHECK();
}

}  // namespace fp8::train::cuda
