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

int RowThreads(int64_t c) { return static_cast<int>(c >= 1024 ? 256 : (c >= 256 ? 128 : 32)); }

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

// Full rows in one pass over dout and x (the dw partial and dx kernels above read both twice),
// after LayerNormBackwardFusedKernel: a block owns kLnRows rows. Phase 1: a warp per row reduces
// Σ dn·x̂ (dn = dout·w). Phase 2: each thread owns 4 adjacent columns and walks the block's rows
// in order, adding g to dx and keeping Σ dout·x̂ for its columns in registers, written to
// partial[chunk, j] as RmsDwPartialKernel writes it (same products, same order: dw's bits do not
// change). Needs c % 4 == 0, 16-byte aligned x and dx, 8-byte aligned dout (and dx_bf16) rows.
__global__ void RmsNormBackwardFusedKernel(const bf16* dout, const float* x, const float* w, const float* rstd, int64_t n, int64_t c,
                                           float* dx, bf16* dx_bf16, float* partial) {
  __shared__ float s_rs[kLnRows], s_mean[kLnRows];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kLnRows;
  const int rows = static_cast<int>(n - r0 < kLnRows ? n - r0 : kLnRows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
  for (int r = warp; r < rows; r += nwarps) {
    const int64_t row = r0 + r;
    const float rs = rstd[row];
    const float* xr = x + row * c;
    const bf16* dr = dout + row * c;
    float s = 0;
    for (int64_t j = lane * 4; j < c; j += 128) {
      const float4 xv = *reinterpret_cast<const float4*>(xr + j);
      const uint2 dv = *reinterpret_cast<const uint2*>(dr + j);
      const float2 d01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv.x));
      const float2 d23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv.y));
      s += (d01.x * w[j] * (xv.x * rs) + d01.y * w[j + 1] * (xv.y * rs)) + (d23.x * w[j + 2] * (xv.z * rs) + d23.y * w[j + 3] * (xv.w * rs));
    }
    s = WarpSum(s);
    if (lane == 0) {
      s_rs[r] = rs;
      s_mean[r] = s / static_cast<float>(c);
    }
  }
  __syncthreads();
  for (int64_t j = static_cast<int64_t>(threadIdx.x) * 4; j < c; j += static_cast<int64_t>(blockDim.x) * 4) {
    const float w4[4] = {w[j], w[j + 1], w[j + 2], w[j + 3]};
    float aw[4] = {0, 0, 0, 0};
    for (int r = 0; r < rows; ++r) {
      const int64_t off = (r0 + r) * c + j;
      const float4 xv = *reinterpret_cast<const float4*>(x + off);
      const uint2 dv = *reinterpret_cast<const uint2*>(dout + off);
      const float2 d01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv.x));
      const float2 d23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv.y));
      const float4 gv = *reinterpret_cast<const float4*>(dx + off);
      const float rs = s_rs[r], mean = s_mean[r];
      const float d[4] = {d01.x, d01.y, d23.x, d23.y};
      const float xh[4] = {xv.x * rs, xv.y * rs, xv.z * rs, xv.w * rs};
      float g[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        g[k] += rs * (d[k] * w4[k] - xh[k] * mean);
        aw[k] += d[k] * xh[k];
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
  RmsNormRowKernel<<<static_cast<unsigned>(n), RowThreads(c), 0, s>>>(x, nullptr, c, nullptr, w, eps, out, rstd);
  LAUNCH_CHECK();
}

Status ResidualAddRmsNorm(const float* res, const bf16* y, int64_t n, int64_t c, float* out, const float* w, float eps,
                          bf16* ln_out, float* rstd, cudaStream_t s) {
  RmsNormRowKernel<<<static_cast<unsigned>(n), RowThreads(c), 0, s>>>(res, y, c, out, w, eps, ln_out, rstd);
  LAUNCH_CHECK();
}

Status RmsNormRstd(const float* x, int64_t n, int64_t c, float eps, float* rstd, cudaStream_t s) {
  RmsNormRowKernel<<<static_cast<unsigned>(n), RowThreads(c), 0, s>>>(x, nullptr, c, nullptr, nullptr, eps, nullptr, rstd);
  LAUNCH_CHECK();
}

Status ResidualAddRmsRstd(const float* res, const bf16* y, int64_t n, int64_t c, float* out, float eps, float* rstd,
                          cudaStream_t s) {
  RmsNormRowKernel<<<static_cast<unsigned>(n), RowThreads(c), 0, s>>>(res, y, c, out, nullptr, eps, nullptr, rstd);
  LAUNCH_CHECK();
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
  if (c % 4 == 0 && aligned(x, 16) && aligned(dx, 16) && aligned(dout, 8) && aligned(dx_bf16, 8) && aligned(scratch, 16)) {
    const int64_t chunks = (n + kLnRows - 1) / kLnRows;
    RmsNormBackwardFusedKernel<<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(dout, x, w, rstd, n, c, dx, dx_bf16, scratch);
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
