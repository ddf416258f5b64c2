// Launchers of train_kernels.h. Straightforward, bandwidth-bound kernels: the GEMMs (cuBLAS /
// cuBLASLt) carry the FLOPs; these aim at coalesced access and few passes, not peak.
#include "worker/train/cuda/train_kernels.h"

#include <cfloat>
#include <cmath>

#include "kernels/cuda/sm90_cuda_check.h"

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

__global__ void EmbeddingForwardKernel(const int32_t* tok, const float* wte, const float* wpe,
                                       int64_t n, int64_t t, int64_t c, float* out) {
  GRID_STRIDE(idx, n * c) {
    const int64_t i = idx / c, j = idx % c;
    out[idx] = wte[static_cast<int64_t>(tok[i]) * c + j] + wpe[(i % t) * c + j];
  }
}

__global__ void EmbeddingWteBackwardKernel(const float* dout, const int32_t* tok, int64_t n,
                                           int64_t c, float* dwte) {
  GRID_STRIDE(idx, n * c) {
    const int64_t i = idx / c, j = idx % c;
    atomicAdd(&dwte[static_cast<int64_t>(tok[i]) * c + j], dout[idx]);
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

// One warp per row.
__global__ void LayerNormForwardKernel(const float* x, const float* w, const float* b, int64_t n,
                                       int64_t c, bf16* out, float* mean, float* rstd) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n) return;
  const float* xr = x + row * c;
  float s = 0;
  for (int64_t j = lane; j < c; j += 32) s += xr[j];
  const float mu = WarpSum(s) / static_cast<float>(c);
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

__global__ void LayerNormBackwardDxKernel(const bf16* dout, const float* x, const float* w,
                                          const float* mean, const float* rstd, int64_t n,
                                          int64_t c, float* dx) {
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
    dxr[j] += rs * (dn - s1 - (xr[j] - mu) * rs * s2);
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

// One block per row.
__global__ void CrossEntropyKernel(bf16* logits, const int32_t* targets, int64_t v, int64_t ld,
                                   float grad_scale, bool write_grad, float* losses) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x;
  bf16* x = logits + row * ld;
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, __bfloat162float(x[j]));
  mx = BlockMax(mx, sh);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) sum += __expf(__bfloat162float(x[j]) - mx);
  sum = BlockSum(sum, sh);
  const int32_t tgt = targets[row];
  const float xt = __bfloat162float(x[tgt]);
  __syncthreads();  // everyone has read x[tgt] before it may be overwritten
  if (threadIdx.x == 0) losses[row] = logf(sum) + mx - xt;
  if (write_grad) {
    const float inv = 1.0f / sum;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      const float pj = __expf(__bfloat162float(x[j]) - mx) * inv;
      x[j] = __float2bfloat16((pj - (j == tgt ? 1.0f : 0.0f)) * grad_scale);
    }
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

__global__ void AdamWKernel(float* p, const float* g, float* m, float* v, const uint8_t* decay,
                            int64_t n, AdamWArgs a) {
  GRID_STRIDE(i, n) {
    const float gi = g[i] * a.grad_scale;
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * gi;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / a.bias_correction1, vhat = vi / a.bias_correction2;
    float pi = p[i];
    if (decay[i]) pi -= a.lr * a.weight_decay * pi;
    p[i] = pi - a.lr * mhat / (sqrtf(vhat) + a.eps);
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
  FP8_CUDA_RETURN_IF_LAUNCH_FAILED();
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

#define LAUNCH_CHECK() FP8_CUDA_RETURN_IF_LAUNCH_FAILED(); return OkStatus()

Status EmbeddingForward(const int32_t* tokens, const float* wte, const float* wpe, int64_t n,
                        int64_t t, int64_t c, float* out, cudaStream_t s) {
  EmbeddingForwardKernel<<<Blocks(n * c), kThreads, 0, s>>>(tokens, wte, wpe, n, t, c, out);
  LAUNCH_CHECK();
}

Status EmbeddingBackward(const float* dout, const int32_t* tokens, int64_t n, int64_t t, int64_t c,
                         float* dwte, float* dwpe, cudaStream_t s) {
  EmbeddingWteBackwardKernel<<<Blocks(n * c), kThreads, 0, s>>>(dout, tokens, n, c, dwte);
  FP8_CUDA_RETURN_IF_LAUNCH_FAILED();
  EmbeddingWpeBackwardKernel<<<Blocks(t * c), kThreads, 0, s>>>(dout, n, t, c, dwpe);
  LAUNCH_CHECK();
}

Status LayerNormForward(const float* x, const float* w, const float* b, int64_t n, int64_t c,
                        bf16* out, float* mean, float* rstd, cudaStream_t s) {
  LayerNormForwardKernel<<<Blocks(n * 32), kThreads, 0, s>>>(x, w, b, n, c, out, mean, rstd);
  LAUNCH_CHECK();
}

Status LayerNormBackward(const bf16* dout, const float* x, const float* w, const float* mean,
                         const float* rstd, int64_t n, int64_t c, float* dx, float* dw, float* db,
                         float* scratch, cudaStream_t s) {
  LayerNormBackwardDxKernel<<<Blocks(n * 32), kThreads, 0, s>>>(dout, x, w, mean, rstd, n, c, dx);
  FP8_CUDA_RETURN_IF_LAUNCH_FAILED();
  const int64_t chunks = (n + kColChunk - 1) / kColChunk;
  ColumnPartialKernel<<<dim3(Blocks(c), static_cast<unsigned>(chunks)), kThreads, 0, s>>>(dout, x, mean, rstd, n, c, scratch);
  FP8_CUDA_RETURN_IF_LAUNCH_FAILED();
  ColumnFinalizeKernel<<<Blocks(c), kThreads, 0, s>>>(scratch, chunks, c, dw);
  FP8_CUDA_RETURN_IF_LAUNCH_FAILED();
  ColumnFinalizeKernel<<<Blocks(c), kThreads, 0, s>>>(scratch + chunks * c, chunks, c, db);
  LAUNCH_CHECK();
}

Status ColumnSumAccumulate(const bf16* dy, int64_t m, int64_t n, float* db, float* scratch,
                           cudaStream_t s) {
  const int64_t chunks = (m + kColChunk - 1) / kColChunk;
  ColumnPartialKernel<<<dim3(Blocks(n), static_cast<unsigned>(chunks)), kThreads, 0, s>>>(dy, nullptr, nullptr, nullptr, m, n, scratch);
  FP8_CUDA_RETURN_IF_LAUNCH_FAILED();
  ColumnFinalizeKernel<<<Blocks(n), kThreads, 0, s>>>(scratch, chunks, n, db);
  LAUNCH_CHECK();
}

Status AddBias(bf16* y, const float* b, int64_t m, int64_t n, cudaStream_t s) {
  AddBiasKernel<<<Blocks(m * n), kThreads, 0, s>>>(y, b, m, n);
  LAUNCH_CHECK();
}

Status ResidualAdd(const float* res, const bf16* y, const float* b, int64_t m, int64_t n,
                   float* out, cudaStream_t s) {
  ResidualAddKernel<<<Blocks(m * n), kThreads, 0, s>>>(res, y, b, m, n, out);
  LAUNCH_CHECK();
}

Status GeluForward(const bf16* x, int64_t n, bf16* y, cudaStream_t s) {
  GeluForwardKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}

Status GeluBackward(const bf16* dy, const bf16* x, int64_t n, bf16* dx, cudaStream_t s) {
  GeluBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(dy, x, n, dx);
  LAUNCH_CHECK();
}

Status CastF32ToBf16(const float* x, int64_t n, bf16* y, cudaStream_t s) {
  CastF32ToBf16Kernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}
Status CastBf16ToF32(const bf16* x, int64_t n, float* y, cudaStream_t s) {
  CastBf16ToF32Kernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
  LAUNCH_CHECK();
}
Status Accumulate(const float* x, int64_t n, float* y, cudaStream_t s) {
  AccumulateKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
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
  CrossEntropyKernel<<<static_cast<unsigned>(n), 512, 0, s>>>(logits, targets, v, ld, grad_scale, write_grad, losses);
  LAUNCH_CHECK();
}

Status SumToDouble(const float* x, int64_t n, double* out, cudaStream_t s) {
  SumToDoubleKernel<<<1, 1024, 0, s>>>(x, n, out);
  LAUNCH_CHECK();
}

Status SumSquares(const float* x, int64_t n, double* partial, double* out, cudaStream_t s) {
  const unsigned blocks = std::min<unsigned>(1024, Blocks(n));
  SumSquaresPartialKernel<<<blocks, kThreads, 0, s>>>(x, n, partial);
  FP8_CUDA_RETURN_IF_LAUNCH_FAILED();
  SumDoublesKernel<<<1, 32, 0, s>>>(partial, static_cast<int>(blocks), out);
  LAUNCH_CHECK();
}

Status AdamWStep(float* p, const float* g, float* m, float* v, const uint8_t* decay, int64_t n,
             const AdamWArgs& a, cudaStream_t s) {
  AdamWKernel<<<Blocks(n), kThreads, 0, s>>>(p, g, m, v, decay, n, a);
  LAUNCH_CHECK();
}

Status TransposeU8(const uint8_t* in, int64_t rows, int64_t cols, int64_t ld_in, uint8_t* out,
                   int64_t ld_out, cudaStream_t s) {
  return LaunchTranspose<uint8_t>(in, rows, cols, ld_in, out, ld_out, s);
}
Status TransposeF32(const float* in, int64_t rows, int64_t cols, int64_t ld_in, float* out,
                    int64_t ld_out, cudaStream_t s) {
  return LaunchTranspose<float>(in, rows, cols, ld_in, out, ld_out, s);
}
Status TransposeBf16(const bf16* in, int64_t rows, int64_t cols, bf16* out, cudaStream_t s) {
  return LaunchTranspose<bf16>(in, rows, cols, cols, out, rows, s);
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
