// Launchers of train_kernels.h. Straightforward, bandwidth-bound kernels: the GEMMs (cuBLAS /
// cuBLASLt) carry the FLOPs; these aim at coalesced access and few passes, not peak.
#include "worker/train/cuda/train_kernels.h"

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>
#include <cmath>
#include <cstdlib>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/adamw.cuh"

namespace fp8::train::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned Blocks(int64_t n, int per_block = kThreads) {
  int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 30) ? (1 << 30) : b));
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reductions (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
__device__ float BlockSum(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  return WarpSum(v);
}
__device__ float BlockMax(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -FLT_MAX;
  return WarpMax(v);
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// 16-byte accesses (8 bf16 / 2×4 fp32 per thread) for the elementwise passes: scalar 2-byte
// accesses and a 64-bit modulo per element left them at under half the memory bandwidth
// (bench_trainer_cuda --breakdown). The launchers use them when sizes and pointers allow.
__device__ __forceinline__ void Load8(const bf16* p, float (&f)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 t = __bfloat1622float2(h[k]);
    f[2 * k] = t.x, f[2 * k + 1] = t.y;
  }
}
__device__ __forceinline__ void Store8(bf16* p, const float (&f)[8]) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ void Load8(const float* p, float (&f)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void Store8(float* p, const float (&f)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}
bool Vec8(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % 8) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  return true;
}

__global__ void EmbeddingForwardKernel(const int32_t* tok, const float* wte, const float* wpe,
                                       int64_t n, int64_t t, int64_t c, float* out) {
  GRID_STRIDE(idx, n * c) {
    const int64_t i = idx / c, j = idx % c;
    out[idx] = wte[static_cast<int64_t>(tok[i]) * c + j] + wpe[(i % t) * c + j];
  }
}

__global__ void EmbeddingWpeBackwardKernel(const float* dout, int64_t n, int64_t t, int64_t c,
                                           float* dwpe) {
  GRID_STRIDE(idx, t * c) {
    const int64_t p = idx / c, j = idx % c;
    float s = 0;
    for (int64_t r = p; r < n; r += t) s += dout[r * c + j];
    dwpe[idx] += s;
  }
}

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

__global__ void AddBiasKernel(bf16* y, const float* b, int64_t m, int64_t n) {
  GRID_STRIDE(idx, m * n) y[idx] = __float2bfloat16(__bfloat162float(y[idx]) + b[idx % n]);
}

__global__ void ResidualAddKernel(const float* res, const bf16* y, const float* b, int64_t m,
                                  int64_t n, float* out) {
  GRID_STRIDE(idx, m * n) out[idx] = res[idx] + __bfloat162float(y[idx]) + b[idx % n];
}

constexpr float kGeluS = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;

__global__ void GeluForwardKernel(const bf16* x, int64_t n, bf16* y) {
  GRID_STRIDE(i, n) {
    const float v = __bfloat162float(x[i]);
    y[i] = __float2bfloat16(0.5f * v * (1.0f + tanhf(kGeluS * (v + kGeluC * v * v * v))));
  }
}

__global__ void GeluBackwardKernel(const bf16* dy, const bf16* x, int64_t n, bf16* dx) {
  GRID_STRIDE(i, n) {
    const float v = __bfloat162float(x[i]);
    const float th = tanhf(kGeluS * (v + kGeluC * v * v * v));
    const float g = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluS * (1.0f + 3.0f * kGeluC * v * v);
    dx[i] = __float2bfloat16(__bfloat162float(dy[i]) * g);
  }
}

__device__ __forceinline__ float Gelu(float v) {
  return 0.5f * v * (1.0f + tanhf(kGeluS * (v + kGeluC * v * v * v)));
}

// Vector twins of the kernels above (n, the row length and every pointer 8-aligned).
__global__ void AddBias8Kernel(bf16* y, const float* b, int64_t m, int64_t n) {
  GRID_STRIDE(q, m * n / 8) {
    float f[8], bb[8];
    Load8(y + q * 8, f);
    Load8(b + (q * 8) % n, bb);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] += bb[k];
    Store8(y + q * 8, f);
  }
}
__global__ void ResidualAdd8Kernel(const float* res, const bf16* y, const float* b, int64_t m,
                                   int64_t n, float* out) {
  GRID_STRIDE(q, m * n / 8) {
    float r[8], f[8], bb[8];
    Load8(res + q * 8, r);
    Load8(y + q * 8, f);
    Load8(b + (q * 8) % n, bb);
#pragma unroll
    for (int k = 0; k < 8; ++k) r[k] = r[k] + f[k] + bb[k];
    Store8(out + q * 8, r);
  }
}
// pre = y + b (rounded to bf16, kept for backward), out = gelu(pre): AddBias then GeluForward
// in one pass, same roundings.
__global__ void BiasGelu8Kernel(bf16* pre, const float* b, int64_t m, int64_t n, bf16* out) {
  GRID_STRIDE(q, m * n / 8) {
    float f[8], bb[8];
    Load8(pre + q * 8, f);
    Load8(b + (q * 8) % n, bb);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = __bfloat162float(__float2bfloat16(f[k] + bb[k]));
    Store8(pre + q * 8, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = Gelu(f[k]);
    Store8(out + q * 8, f);
  }
}
__global__ void GeluForward8Kernel(const bf16* x, int64_t n, bf16* y) {
  GRID_STRIDE(q, n / 8) {
    float f[8];
    Load8(x + q * 8, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = Gelu(f[k]);
    Store8(y + q * 8, f);
  }
}
__global__ void GeluBackward8Kernel(const bf16* dy, const bf16* x, int64_t n, bf16* dx) {
  GRID_STRIDE(q, n / 8) {
    float d[8], v[8];
    Load8(dy + q * 8, d);
    Load8(x + q * 8, v);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float th = tanhf(kGeluS * (v[k] + kGeluC * v[k] * v[k] * v[k]));
      d[k] *= 0.5f * (1.0f + th) + 0.5f * v[k] * (1.0f - th * th) * kGeluS * (1.0f + 3.0f * kGeluC * v[k] * v[k]);
    }
    Store8(dx + q * 8, d);
  }
}
__global__ void CastF32ToBf16x8Kernel(const float* x, int64_t n, bf16* y) {
  GRID_STRIDE(q, n / 8) {
    float f[8];
    Load8(x + q * 8, f);
    Store8(y + q * 8, f);
  }
}
__global__ void Accumulate8Kernel(const float* x, int64_t n, float* y) {
  GRID_STRIDE(q, n / 8) {
    float a[8], b[8];
    Load8(x + q * 8, a);
    Load8(y + q * 8, b);
#pragma unroll
    for (int k = 0; k < 8; ++k) b[k] += a[k];
    Store8(y + q * 8, b);
  }
}

__global__ void CastF32ToBf16Kernel(const float* x, int64_t n, bf16* y) {
  GRID_STRIDE(i, n) y[i] = __float2bfloat16(x[i]);
}
__global__ void CastBf16ToF32Kernel(const bf16* x, int64_t n, float* y) {
  GRID_STRIDE(i, n) y[i] = __bfloat162float(x[i]);
}
__global__ void AccumulateKernel(const float* x, int64_t n, float* y) {
  GRID_STRIDE(i, n) y[i] += x[i];
}
__global__ void ScaleKernel(float* x, int64_t n, float f) {
  GRID_STRIDE(i, n) x[i] *= f;
}

// dir 0: qkv [B,T,3,H,hd] → q/k/v [B,H,T,hd]; dir 1: the reverse.
template <int kDir>
__global__ void QkvPermuteKernel(bf16* qkv, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* q,
                                 bf16* k, bf16* v) {
  const int64_t c = h * hd;
  GRID_STRIDE(idx, b * t * 3 * c) {
    const int64_t bt = idx / (3 * c), rem = idx % (3 * c);
    const int64_t which = rem / c, hh = (rem % c) / hd, d = rem % hd;
    const int64_t bb = bt / t, tt = bt % t;
    bf16* dst = which == 0 ? q : (which == 1 ? k : v);
    const int64_t o = ((bb * h + hh) * t + tt) * hd + d;
    if (kDir == 0) dst[o] = qkv[idx];
    else qkv[idx] = dst[o];
  }
}

// dir 0: heads [B,H,T,hd] → rows [B,T,H·hd]; dir 1: the reverse.
template <int kDir>
__global__ void HeadsPermuteKernel(const bf16* in, int64_t b, int64_t t, int64_t h, int64_t hd,
                                   bf16* out) {
  const int64_t c = h * hd;
  GRID_STRIDE(idx, b * t * c) {
    const int64_t bt = idx / c, hh = (idx % c) / hd, d = idx % hd;
    const int64_t bb = bt / t, tt = bt % t;
    const int64_t o = ((bb * h + hh) * t + tt) * hd + d;
    if (kDir == 0) out[idx] = in[o];
    else out[o] = in[idx];
  }
}

// One warp per row of scores.
__global__ void CausalSoftmaxForwardKernel(const float* s, int64_t rows, int64_t t, bf16* p) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t i = row % t;
  const float* sr = s + row * t;
  bf16* pr = p + row * t;
  float mx = -FLT_MAX;
  for (int64_t j = lane; j <= i; j += 32) mx = fmaxf(mx, sr[j]);
  mx = WarpMax(mx);
  float sum = 0;
  for (int64_t j = lane; j <= i; j += 32) sum += __expf(sr[j] - mx);
  const float inv = 1.0f / WarpSum(sum);
  for (int64_t j = lane; j < t; j += 32)
    pr[j] = __float2bfloat16(j <= i ? __expf(sr[j] - mx) * inv : 0.0f);
}

__global__ void CausalSoftmaxBackwardKernel(const bf16* p, const bf16* dp, int64_t rows, int64_t t,
                                            bf16* ds) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t i = row % t;
  const bf16* pr = p + row * t;
  const bf16* dr = dp + row * t;
  float dot = 0;
  for (int64_t j = lane; j <= i; j += 32) dot += __bfloat162float(pr[j]) * __bfloat162float(dr[j]);
  dot = WarpSum(dot);
  bf16* o = ds + row * t;
  for (int64_t j = lane; j < t; j += 32)
    o[j] = __float2bfloat16(j <= i ? __bfloat162float(pr[j]) * (__bfloat162float(dr[j]) - dot) : 0.0f);
}

// One block per row: one read pass with a running max and rescaled sum (16-byte loads when rows
// are 16-byte aligned), then the gradient pass.
__global__ void CrossEntropyKernel(bf16* logits, const int32_t* targets, int64_t v, int64_t ld,
                                   float grad_scale, bool write_grad, bool vec, float* losses) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x;
  bf16* x = logits + row * ld;
  const int64_t v8 = vec ? v / 8 : 0;  // vec: rows 16-byte aligned
  float mx = -FLT_MAX, sum = 0;
  for (int64_t q = threadIdx.x; q < v8; q += blockDim.x) {
    float f[8];
    Load8(x + q * 8, f);
    float lm = f[0];
#pragma unroll
    for (int k = 1; k < 8; ++k) lm = fmaxf(lm, f[k]);
    if (lm > mx) {
      sum *= __expf(mx - lm);
      mx = lm;
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) sum += __expf(f[k] - mx);
  }
  for (int64_t j = v8 * 8 + threadIdx.x; j < v; j += blockDim.x) {
    const float f = __bfloat162float(x[j]);
    if (f > mx) {
      sum *= __expf(mx - f);
      mx = f;
    }
    sum += __expf(f - mx);
  }
  const float gmx = BlockMax(mx, sh);
  sum = BlockSum(sum * __expf(mx - gmx), sh);
  const int32_t tgt = targets[row];
  const float xt = __bfloat162float(x[tgt]);
  __syncthreads();  // everyone has read x[tgt] before it may be overwritten
  if (threadIdx.x == 0) losses[row] = logf(sum) + gmx - xt;
  if (!write_grad) return;
  const float inv = 1.0f / sum;
  for (int64_t q = threadIdx.x; q < v8; q += blockDim.x) {
    float f[8];
    Load8(x + q * 8, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = (__expf(f[k] - gmx) * inv - (q * 8 + k == tgt ? 1.0f : 0.0f)) * grad_scale;
    Store8(x + q * 8, f);
  }
  for (int64_t j = v8 * 8 + threadIdx.x; j < v; j += blockDim.x) {
    const float pj = __expf(__bfloat162float(x[j]) - gmx) * inv;
    x[j] = __float2bfloat16((pj - (j == tgt ? 1.0f : 0.0f)) * grad_scale);
  }
}

__global__ void SumToDoubleKernel(const float* x, int64_t n, double* out) {
  __shared__ double sh[1024];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

__global__ void SumSquaresPartialKernel(const float* x, int64_t n, double* partial) {
  __shared__ double sh[kThreads];
  double s = 0;
  GRID_STRIDE(i, n) s += static_cast<double>(x[i]) * x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void SumDoublesKernel(const double* partial, int n, double* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += partial[i];
    *out = s;
  }
}

// decay[i]: kAdamWNoDecay, kAdamWDecay, or kAdamWSkip (left alone: a fused kernel updates it);
// a null mask means `uniform` for every parameter. `copy` (may be null): the updated values
// rounded to BF16.
__global__ void AdamWKernel(float* p, const float* g, float* m, float* v, const uint8_t* decay, uint8_t uniform,
                            int64_t n, AdamWArgs a, bf16* copy) {
  GRID_STRIDE(i, n) {
    const uint8_t d = decay ? decay[i] : uniform;
    if (d == kAdamWSkip) continue;
    AdamWOne(p[i], g[i], m[i], v[i], d == kAdamWDecay, a);
    if (copy) copy[i] = __float2bfloat16_rn(p[i]);
  }
}
// 4 parameters per thread (float4 / uchar4 accesses); the same arithmetic per element. Four
// skipped parameters cost one 4-byte read of the mask.
__global__ void AdamW4Kernel(float* p, const float* g, float* m, float* v, const uint8_t* decay, uint8_t uniform,
                             int64_t n, AdamWArgs a, bf16* copy) {
  GRID_STRIDE(q, n / 4) {
    const uchar4 dd = decay ? reinterpret_cast<const uchar4*>(decay)[q] : make_uchar4(uniform, uniform, uniform, uniform);
    if (dd.x == kAdamWSkip && dd.y == kAdamWSkip && dd.z == kAdamWSkip && dd.w == kAdamWSkip) continue;
    float4 pp = reinterpret_cast<float4*>(p)[q], mm = reinterpret_cast<float4*>(m)[q], vv = reinterpret_cast<float4*>(v)[q];
    const float4 gg = reinterpret_cast<const float4*>(g)[q];
    if (dd.x != kAdamWSkip) AdamWOne(pp.x, gg.x, mm.x, vv.x, dd.x == kAdamWDecay, a);
    if (dd.y != kAdamWSkip) AdamWOne(pp.y, gg.y, mm.y, vv.y, dd.y == kAdamWDecay, a);
    if (dd.z != kAdamWSkip) AdamWOne(pp.z, gg.z, mm.z, vv.z, dd.z == kAdamWDecay, a);
    if (dd.w != kAdamWSkip) AdamWOne(pp.w, gg.w, mm.w, vv.w, dd.w == kAdamWDecay, a);
    reinterpret_cast<float4*>(p)[q] = pp;
    reinterpret_cast<float4*>(m)[q] = mm;
    reinterpret_cast<float4*>(v)[q] = vv;
    if (copy) {
      __nv_bfloat162* c2 = reinterpret_cast<__nv_bfloat162*>(copy + 4 * q);
      c2[0] = __floats2bfloat162_rn(pp.x, pp.y);
      c2[1] = __floats2bfloat162_rn(pp.z, pp.w);
    }
  }
}

template <typename T>
__global__ void TransposeKernel(const T* in, int64_t rows, int64_t cols, int64_t ld_in, T* out,
                                int64_t ld_out) {
  __shared__ T tile[32][33];
  const int64_t c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = in[r * ld_in + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out[c * ld_out + r] = tile[threadIdx.x][k];
  }
}

template <typename T>
Status LaunchTranspose(const T* in, int64_t rows, int64_t cols, int64_t ld_in, T* out,
                       int64_t ld_out, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  TransposeKernel<T><<<grid, dim3(32, 8), 0, s>>>(in, rows, cols, ld_in, out, ld_out);
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

__global__ void DelayedScalingUpdateKernel(float* state, const float* amax_ptr, DelayedScalingParams p) {
  const float amax = fabsf(*amax_ptr);
  if (!isfinite(amax)) return;
  float* hist = state;
  int count = static_cast<int>(state[p.history_len]);
  if (count < p.history_len) {
    hist[count++] = amax;
  } else {
    for (int i = 1; i < p.history_len; ++i) hist[i - 1] = hist[i];
    hist[p.history_len - 1] = amax;
  }
  state[p.history_len] = static_cast<float>(count);
  float used = hist[count - 1];
  if (!p.most_recent)
    for (int i = 0; i < count; ++i) used = fmaxf(used, hist[i]);
  if (used <= 0.0f) return;
  float a = used;
  if (!(a >= 1e-4f) && !isnan(a)) a = 1e-4f;
  float si = __fdiv_rn(a, p.fp8_max);
  if (p.ue8m0 && isfinite(si)) {
    uint32_t bits = __float_as_uint(si);
    if ((bits & 0x007FFFFFu) != 0) bits = (bits & 0x7F800000u) + 0x00800000u;
    si = __uint_as_float(bits);
  }
  state[p.history_len + 1] = ldexpf(si, p.margin);
}

__device__ __forceinline__ uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__global__ void InitNormalKernel(float* x, int64_t n, uint64_t seed, float sd) {
  GRID_STRIDE(i, n) {
    const uint64_t a = Mix(seed ^ Mix(2 * static_cast<uint64_t>(i))), b = Mix(seed ^ Mix(2 * static_cast<uint64_t>(i) + 1));
    const float u1 = (static_cast<float>(a >> 40) + 0.5f) * 0x1.0p-24f, u2 = (static_cast<float>(b >> 40) + 0.5f) * 0x1.0p-24f;
    x[i] = sd * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}
__global__ void FillKernel(float* x, int64_t n, float v) {
  GRID_STRIDE(i, n) x[i] = v;
}

}  // namespace

#define LAUNCH_CHECK() FP8_RETURN_IF_LAUNCH_FAILED(); return OkStatus()

Status EmbeddingForward(const int32_t* tokens, const float* wte, const float* wpe, int64_t n,
                        int64_t t, int64_t c, float* out, cudaStream_t s) {
  EmbeddingForwardKernel<<<Blocks(n * c), kThreads, 0, s>>>(tokens, wte, wpe, n, t, c, out);
  LAUNCH_CHECK();
}

Status EmbeddingWpeBackward(const float* dout, int64_t n, int64_t t, int64_t c, float* dwpe, cudaStream_t s) {
  EmbeddingWpeBackwardKernel<<<Blocks(t * c), kThreads, 0, s>>>(dout, n, t, c, dwpe);
  LAUNCH_CHECK();
}

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

Status AddBias(bf16* y, const float* b, int64_t m, int64_t n, cudaStream_t s) {
  if (Vec8(n, {y, b})) AddBias8Kernel<<<Blocks(m * n / 8), kThreads, 0, s>>>(y, b, m, n);
  else AddBiasKernel<<<Blocks(m * n), kThreads, 0, s>>>(y, b, m, n);
  LAUNCH_CHECK();
}

Status ResidualAdd(const float* res, const bf16* y, const float* b, int64_t m, int64_t n,
                   float* out, cudaStream_t s) {
  if (Vec8(n, {res, y, b, out})) ResidualAdd8Kernel<<<Blocks(m * n / 8), kThreads, 0, s>>>(res, y, b, m, n, out);
  else ResidualAddKernel<<<Blocks(m * n), kThreads, 0, s>>>(res, y, b, m, n, out);
  LAUNCH_CHECK();
}

Status GeluForward(const bf16* x, int64_t n, bf16* y, cudaStream_t s) {
  if (Vec8(n, {x, y})) GeluForward8Kernel<<<Blocks(n / 8), kThreads, 0, s>>>(x, n, y);
  else GeluForwardKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}

Status BiasGeluForward(bf16* pre, const float* b, int64_t m, int64_t n, bf16* out, cudaStream_t s) {
  if (!Vec8(n, {pre, b, out})) {
    FP8_RETURN_IF_ERROR(AddBias(pre, b, m, n, s));
    return GeluForward(pre, m * n, out, s);
  }
  BiasGelu8Kernel<<<Blocks(m * n / 8), kThreads, 0, s>>>(pre, b, m, n, out);
  LAUNCH_CHECK();
}

Status GeluBackward(const bf16* dy, const bf16* x, int64_t n, bf16* dx, cudaStream_t s) {
  if (Vec8(n, {dy, x, dx})) GeluBackward8Kernel<<<Blocks(n / 8), kThreads, 0, s>>>(dy, x, n, dx);
  else GeluBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(dy, x, n, dx);
  LAUNCH_CHECK();
}

Status CastF32ToBf16(const float* x, int64_t n, bf16* y, cudaStream_t s) {
  if (Vec8(n, {x, y})) CastF32ToBf16x8Kernel<<<Blocks(n / 8), kThreads, 0, s>>>(x, n, y);
  else CastF32ToBf16Kernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}
Status CastBf16ToF32(const bf16* x, int64_t n, float* y, cudaStream_t s) {
  CastBf16ToF32Kernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}
Status Accumulate(const float* x, int64_t n, float* y, cudaStream_t s) {
  if (Vec8(n, {x, y})) Accumulate8Kernel<<<Blocks(n / 8), kThreads, 0, s>>>(x, n, y);
  else AccumulateKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}
Status Scale(float* x, int64_t n, float factor, cudaStream_t s) {
  ScaleKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, factor);
  LAUNCH_CHECK();
}

Status SplitHeads(const bf16* qkv, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* q, bf16* k,
                  bf16* v, cudaStream_t s) {
  QkvPermuteKernel<0><<<Blocks(b * t * 3 * h * hd), kThreads, 0, s>>>(const_cast<bf16*>(qkv), b, t, h, hd, q, k, v);
  LAUNCH_CHECK();
}
Status MergeQkv(const bf16* dq, const bf16* dk, const bf16* dv, int64_t b, int64_t t, int64_t h,
                int64_t hd, bf16* dqkv, cudaStream_t s) {
  QkvPermuteKernel<1><<<Blocks(b * t * 3 * h * hd), kThreads, 0, s>>>(dqkv, b, t, h, hd, const_cast<bf16*>(dq),
                                                                     const_cast<bf16*>(dk), const_cast<bf16*>(dv));
  LAUNCH_CHECK();
}
Status HeadsToRows(const bf16* y, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* out,
                   cudaStream_t s) {
  HeadsPermuteKernel<0><<<Blocks(b * t * h * hd), kThreads, 0, s>>>(y, b, t, h, hd, out);
  LAUNCH_CHECK();
}
Status RowsToHeads(const bf16* x, int64_t b, int64_t t, int64_t h, int64_t hd, bf16* out,
                   cudaStream_t s) {
  HeadsPermuteKernel<1><<<Blocks(b * t * h * hd), kThreads, 0, s>>>(x, b, t, h, hd, out);
  LAUNCH_CHECK();
}

Status CausalSoftmaxForward(const float* scores, int64_t rows, int64_t t, bf16* probs,
                            cudaStream_t s) {
  CausalSoftmaxForwardKernel<<<Blocks(rows * 32), kThreads, 0, s>>>(scores, rows, t, probs);
  LAUNCH_CHECK();
}
Status CausalSoftmaxBackward(const bf16* probs, const bf16* dprobs, int64_t rows, int64_t t,
                             bf16* ds, cudaStream_t s) {
  CausalSoftmaxBackwardKernel<<<Blocks(rows * 32), kThreads, 0, s>>>(probs, dprobs, rows, t, ds);
  LAUNCH_CHECK();
}

Status CrossEntropy(bf16* logits, const int32_t* targets, int64_t n, int64_t v, int64_t ld,
                    float grad_scale, bool write_grad, float* losses, cudaStream_t s) {
  const bool vec = Vec8(ld, {logits});
  CrossEntropyKernel<<<static_cast<unsigned>(n), 512, 0, s>>>(logits, targets, v, ld, grad_scale, write_grad, vec, losses);
  LAUNCH_CHECK();
}

Status SumToDouble(const float* x, int64_t n, double* out, cudaStream_t s) {
  SumToDoubleKernel<<<1, 1024, 0, s>>>(x, n, out);
  LAUNCH_CHECK();
}

Status SumSquares(const float* x, int64_t n, double* partial, double* out, cudaStream_t s) {
  const unsigned blocks = std::min<unsigned>(1024, Blocks(n));
  SumSquaresPartialKernel<<<blocks, kThreads, 0, s>>>(x, n, partial);
  FP8_RETURN_IF_LAUNCH_FAILED();
  SumDoublesKernel<<<1, 32, 0, s>>>(partial, static_cast<int>(blocks), out);
  LAUNCH_CHECK();
}

namespace {
Status LaunchAdamW(float* p, const float* g, float* m, float* v, const uint8_t* decay, uint8_t uniform, int64_t n,
                   const AdamWArgs& a, bf16* copy, cudaStream_t s) {
  const bool vec4 = n % 4 == 0 && Vec8(8, {p, g, m, v}) && reinterpret_cast<uintptr_t>(decay) % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(copy) % 8 == 0;
  if (vec4) AdamW4Kernel<<<Blocks(n / 4), kThreads, 0, s>>>(p, g, m, v, decay, uniform, n, a, copy);
  else AdamWKernel<<<Blocks(n), kThreads, 0, s>>>(p, g, m, v, decay, uniform, n, a, copy);
  LAUNCH_CHECK();
}
}  // namespace

Status AdamWStep(float* p, const float* g, float* m, float* v, const uint8_t* decay, int64_t n,
             const AdamWArgs& a, cudaStream_t s) {
  if (decay == nullptr) return InvalidArgumentError("AdamW decay mask is null");
  return LaunchAdamW(p, g, m, v, decay, kAdamWNoDecay, n, a, nullptr, s);
}

Status AdamWStepTensor(float* p, const float* g, float* m, float* v, int64_t n, bool decay, const AdamWArgs& a,
                       bf16* copy, cudaStream_t s) {
  return LaunchAdamW(p, g, m, v, nullptr, decay ? kAdamWDecay : kAdamWNoDecay, n, a, copy, s);
}

Status TransposeU8(const uint8_t* in, int64_t rows, int64_t cols, int64_t ld_in, uint8_t* out,
                   int64_t ld_out, cudaStream_t s) {
  return LaunchTranspose<uint8_t>(in, rows, cols, ld_in, out, ld_out, s);
}

Status DelayedScalingUpdate(float* state, const float* amax, DelayedScalingParams p, cudaStream_t s) {
  DelayedScalingUpdateKernel<<<1, 1, 0, s>>>(state, amax, p);
  LAUNCH_CHECK();
}

Status InitNormal(float* x, int64_t n, uint64_t seed, float stddev, cudaStream_t s) {
  InitNormalKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, seed, stddev);
  LAUNCH_CHECK();
}
Status Fill(float* x, int64_t n, float value, cudaStream_t s) {
  FillKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, value);
  LAUNCH_CHECK();
}

}  // namespace fp8::train::cuda
