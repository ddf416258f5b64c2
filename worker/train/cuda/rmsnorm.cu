// RMSNorm forward (also fused with the residual add before it, and per head: Qwen3's q/k norm)
// and backward, with deterministic column sums behind dw. Launchers of llama_kernels.h.
//
// x̂ = x·rstd, out = x̂·w; backward: dx = rstd·(dn − x̂·mean(dn·x̂)), dn = dout·w; dw += Σ dout·x̂.
// Every reduction has a fixed shape (block or warp sums, chunks of kLnRows rows summed in
// chunk order), so the results are the same bits on every run.
#include "worker/train/cuda/llama_kernels.h"

#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

// One block per row. With y the row is res + y, written to out first (the residual add); without,
// res is the row and only read. The normalise pass reads the row back from where it was summed;
// ResidualAddRmsNorm and RmsNormForward on its out therefore add the same values in the same
// order (same block size, chosen from c alone) and are bitwise equal.
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
  const float* src = y ? xr : rr;
  bf16* o = ln_out + row * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = __float2bfloat16(src[j] * rs * w[j]);
  if (threadIdx.x == 0) rstd[row] = rs;
}

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

Status RmsNormBackward(const bf16* dout, const float* x, const float* w, const float* rstd, int64_t n, int64_t c,
                       float* dx, bf16* dx_bf16, float* dw, float* scratch, cudaStream_t s) {
  const RowMap m{1, c, c};
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
