// SPDX-License-Identifier: Apache-2.0
#include "worker/train/llama_layers.h"

#include <algorithm>
#include <cmath>

#include "kernels/parallel.h"
#include "worker/train/attention_row_inl.h"

namespace fp8::train {

using kernels::ParallelFor;

template <typename T>
void TokenEmbeddingForward(const int32_t* tokens, const T* wte, int64_t n, int64_t c, T* out) {
  ParallelFor(n, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) std::copy_n(wte + static_cast<int64_t>(tokens[i]) * c, c, out + i * c);
  });
}

template <typename T>
void TokenEmbeddingBackward(const T* dout, const int32_t* tokens, int64_t n, int64_t c, T* dwte) {
  // Parallel over channels, rows in order: scatter-adds into the same token row stay ordered.
  ParallelFor(c, 8, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      T* te = dwte + static_cast<int64_t>(tokens[i]) * c;
      const T* d = dout + i * c;
      for (int64_t j = c0; j < c1; ++j) te[j] += d[j];
    }
  });
}

template <typename T>
void RmsNormForward(const T* x, const T* w, int64_t n, int64_t c, double eps, T* out, T* rstd) {
  ParallelFor(n, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xi = x + i * c;
      double ss = 0;
      for (int64_t j = 0; j < c; ++j) ss += static_cast<double>(xi[j]) * xi[j];
      rstd[i] = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(c) + eps));
      for (int64_t j = 0; j < c; ++j) out[i * c + j] = (xi[j] * rstd[i]) * w[j];
    }
  });
}

template <typename T>
void RmsNormBackward(const T* dout, const T* x, const T* w, const T* rstd, int64_t n, int64_t c, bool accumulate,
                     T* dx, T* dw) {
  ParallelFor(n, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xi = x + i * c;
      const T* di = dout + i * c;
      const double r = rstd[i];
      double dot = 0;  // Σ_k dy_k w_k x_k
      for (int64_t j = 0; j < c; ++j) dot += static_cast<double>(di[j]) * w[j] * xi[j];
      const double k = r * r * r * dot / static_cast<double>(c);
      for (int64_t j = 0; j < c; ++j) {
        const T g = static_cast<T>(r * static_cast<double>(di[j]) * w[j] - k * xi[j]);
        dx[i * c + j] = accumulate ? dx[i * c + j] + g : g;
      }
    }
  });
  ParallelFor(c, 8, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = c0; j < c1; ++j) dw[j] += (x[i * c + j] * rstd[i]) * dout[i * c + j];
  });
}

std::vector<double> RopeInverseFrequencies(const ModelConfig& cfg) {
  const int64_t half = cfg.head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[static_cast<size_t>(i)] = 1.0 / std::pow(cfg.rope_theta, static_cast<double>(2 * i) / cfg.head_dim);
  if (!cfg.rope_scaling.llama3) return inv;
  const RopeScaling& s = cfg.rope_scaling;
  const double old_len = s.original_max_position_embeddings;
  const double low_freq_wavelen = old_len / s.low_freq_factor, high_freq_wavelen = old_len / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * M_PI / f;
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;  // long wavelengths: interpolated
    } else if (wavelen >= high_freq_wavelen) {
      // The band between: a blend of the scaled and the original frequency.
      const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

RopeTables MakeRopeTables(const ModelConfig& cfg) {
  RopeTables r;
  r.seq_len = cfg.seq_len;
  r.half = cfg.head_dim / 2;
  const std::vector<double> inv = RopeInverseFrequencies(cfg);
  r.cos.resize(static_cast<size_t>(r.seq_len * r.half));
  r.sin.resize(r.cos.size());
  for (int64_t p = 0; p < r.seq_len; ++p)
    for (int64_t i = 0; i < r.half; ++i) {
      const double a = static_cast<double>(p) * inv[static_cast<size_t>(i)];
      r.cos[static_cast<size_t>(p * r.half + i)] = std::cos(a);
      r.sin[static_cast<size_t>(p * r.half + i)] = std::sin(a);
    }
  return r;
}

namespace {

// Rotates every head of rows [r0, r1) by +angle (sign 1) or −angle (sign −1).
template <typename T>
void Rotate(const RopeTables& rope, int64_t r0, int64_t r1, int64_t heads, double sign, T* x) {
  const int64_t half = rope.half, d = 2 * half;
  for (int64_t i = r0; i < r1; ++i) {
    const double* cs = rope.cos.data() + (i % rope.seq_len) * half;
    const double* sn = rope.sin.data() + (i % rope.seq_len) * half;
    for (int64_t hh = 0; hh < heads; ++hh) {
      T* a = x + (i * heads + hh) * d;
      T* b = a + half;
      for (int64_t j = 0; j < half; ++j) {
        const double av = a[j], bv = b[j], s = sign * sn[j];
        a[j] = static_cast<T>(av * cs[j] - bv * s);
        b[j] = static_cast<T>(bv * cs[j] + av * s);
      }
    }
  }
}

}  // namespace

template <typename T>
void RopeForward(const RopeTables& rope, int64_t n, int64_t heads, T* x) {
  ParallelFor(n, 16, [&](int64_t r0, int64_t r1) { Rotate(rope, r0, r1, heads, 1.0, x); });
}

template <typename T>
void RopeBackward(const RopeTables& rope, int64_t n, int64_t heads, T* dx) {
  // A rotation's transpose is the rotation by the opposite angle.
  ParallelFor(n, 16, [&](int64_t r0, int64_t r1) { Rotate(rope, r0, r1, heads, -1.0, dx); });
}

template <typename T>
void GqaAttentionForward(const T* q, const T* k, const T* v, int64_t b, int64_t t, int64_t h, int64_t kv,
                         int64_t d, T* out, T* att) {
  const int64_t group = h / kv, qs = h * d, ks = kv * d;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  ParallelFor(b * h, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t bi = p / h, hi = p % h, ki = hi / group;
      for (int64_t ti = 0; ti < t; ++ti) {
        const T* qr = q + (bi * t + ti) * qs + hi * d;
        T* a = att + (p * t + ti) * t;
        T mx = -INFINITY;
        for (int64_t s = 0; s <= ti; ++s) {
          a[s] = Dot8(qr, k + (bi * t + s) * ks + ki * d, d) * scale;
          mx = std::max(mx, a[s]);
        }
        CausalSoftmaxRow(a, ti, t, mx);
        T* o = out + (bi * t + ti) * qs + hi * d;
        for (int64_t j = 0; j < d; ++j) o[j] = 0;
        for (int64_t s = 0; s <= ti; ++s) {
          const T* vr = v + (bi * t + s) * ks + ki * d;
          for (int64_t j = 0; j < d; ++j) o[j] += a[s] * vr[j];
        }
      }
    }
  });
}

template <typename T>
void GqaAttentionBackward(const T* dout, const T* q, const T* k, const T* v, const T* att, int64_t b, int64_t t,
                          int64_t h, int64_t kv, int64_t d, T* dq, T* dk, T* dv) {
  const int64_t group = h / kv, qs = h * d, ks = kv * d;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  // One task per (sequence, key/value head): the query heads sharing it add into its dk/dv in
  // a fixed order, so nothing races and the sums are reproducible.
  ParallelFor(b * kv, 1, [&](int64_t p0, int64_t p1) {
    std::vector<T> datt(static_cast<size_t>(t));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t bi = p / kv, ki = p % kv;
      for (int64_t s = 0; s < t; ++s)
        for (int64_t j = 0; j < d; ++j) {
          dk[(bi * t + s) * ks + ki * d + j] = 0;
          dv[(bi * t + s) * ks + ki * d + j] = 0;
        }
      for (int64_t hi = ki * group; hi < (ki + 1) * group; ++hi) {
        for (int64_t s = 0; s < t; ++s)
          for (int64_t j = 0; j < d; ++j) dq[(bi * t + s) * qs + hi * d + j] = 0;
        for (int64_t ti = 0; ti < t; ++ti) {
          const T* a = att + ((bi * h + hi) * t + ti) * t;
          const T* dot = dout + (bi * t + ti) * qs + hi * d;
          T dot_sum = 0;
          for (int64_t s = 0; s <= ti; ++s) {
            const T* vr = v + (bi * t + s) * ks + ki * d;
            T* dvr = dv + (bi * t + s) * ks + ki * d;
            const T dd = Dot8(dot, vr, d);
            for (int64_t j = 0; j < d; ++j) dvr[j] += a[s] * dot[j];
            datt[static_cast<size_t>(s)] = dd;
            dot_sum += a[s] * dd;
          }
          const T* qr = q + (bi * t + ti) * qs + hi * d;
          T* dqr = dq + (bi * t + ti) * qs + hi * d;
          for (int64_t s = 0; s <= ti; ++s) {
            const T dpre = a[s] * (datt[static_cast<size_t>(s)] - dot_sum) * scale;
            const T* kr = k + (bi * t + s) * ks + ki * d;
            T* dkr = dk + (bi * t + s) * ks + ki * d;
            for (int64_t j = 0; j < d; ++j) {
              dqr[j] += dpre * kr[j];
              dkr[j] += dpre * qr[j];
            }
          }
        }
      }
    }
  });
}

template <typename T>
void SwiGluForward(const T* gate, const T* up, int64_t n, T* out) {
  ParallelFor(n, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T g = gate[i];
      out[i] = g / (static_cast<T>(1) + std::exp(-g)) * up[i];
    }
  });
}

template <typename T>
void SwiGluBackward(const T* dout, const T* gate, const T* up, int64_t n, T* dgate, T* dup) {
  ParallelFor(n, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T g = gate[i];
      const T sig = static_cast<T>(1) / (static_cast<T>(1) + std::exp(-g));
      dup[i] = dout[i] * g * sig;
      dgate[i] = dout[i] * up[i] * sig * (static_cast<T>(1) + g * (static_cast<T>(1) - sig));
    }
  });
}

#define FP8_INSTANTIATE_LLAMA_LAYERS(T)                                                                 \
  template void TokenEmbeddingForward<T>(const int32_t*, const T*, int64_t, int64_t, T*);              \
  template void TokenEmbeddingBackward<T>(const T*, const int32_t*, int64_t, int64_t, T*);             \
  template void RmsNormForward<T>(const T*, const T*, int64_t, int64_t, double, T*, T*);               \
  template void RmsNormBackward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, bool, T*, T*); \
  template void RopeForward<T>(const RopeTables&, int64_t, int64_t, T*);                                \
  template void RopeBackward<T>(const RopeTables&, int64_t, int64_t, T*);                               \
  template void GqaAttentionForward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, \
                                       int64_t, T*, T*);                                               \
  template void GqaAttentionBackward<T>(const T*, const T*, const T*, const T*, const T*, int64_t,      \
                                        int64_t, int64_t, int64_t, int64_t, T*, T*, T*);               \
  template void SwiGluForward<T>(const T*, const T*, int64_t, T*);                                      \
  template void SwiGluBackward<T>(const T*, const T*, const T*, int64_t, T*, T*);

FP8_INSTANTIATE_LLAMA_LAYERS(float)
FP8_INSTANTIATE_LLAMA_LAYERS(double)

}  // namespace fp8::train
