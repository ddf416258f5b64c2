// SPDX-License-Identifier: Apache-2.0
// The trainer's fused causal attention (worker/train/cuda/sm90_flash_attention.h) alone, at the
// two trainer shapes, with q/k/v read out of the fused [B, T, 3C] qkv buffer and y written as
// [B, T, C], as the model does. Each shape runs, in the same process: the mma.sync kernels only,
// the wgmma forward with the mma.sync backward, the default with the mma.sync dQ or dK/dV kernel,
// and the default (AttentionKernelChoice); it checks that they agree (y, lse, dqkv) and that two
// backward runs give the same bits, and, given --torch FILE (scripts/gpu/attention_torch.py's output), prints
// PyTorch SDPA's times beside ours. Each row's backward reads its own y and lse. Then the
// backward's two kernels timed alone: dK/dV (mma.sync, wgmma) and dQ (the default one).
// Then grouped-query attention at the Llama shapes (kv_heads < heads; q, y [B, T, H·hd] rows and
// k, v [B, T, KV·hd], as the Llama model lays them out): the mma.sync kernels and the default,
// their gradients against each other, beside SDPA with enable_gqa.
//
// Times: CUDA events around --reps launches after --warmup, mean per launch. The backward time
// includes its rowsum(dy∘y) pass. TFLOP/s counts causal FLOPs: forward 2·2·B·H·T²·hd / 2 (two
// GEMMs over half the score matrix), backward 2.5× that (five GEMMs: S, dP, dV, dK, dQ).
//
//   bench_attention_cuda [--reps 20] [--warmup 3] [--torch FILE] [--default-only]
// --default-only: the default kernels only.
// FILE: one line per shape, "hd64 FWD_MS FWD_BWD_MS" (torch's forward and forward+backward).
// --gqa-only: only the grouped-query shapes.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "worker/train/cuda/device_buffer.h"
#include "worker/train/cuda/sm90_flash_attention.h"

namespace {

using namespace fp8::train::cuda;
using bf16 = __nv_bfloat16;

struct Shape {
  std::string key, what;
  int64_t batch, heads, seq, head_dim;
};
const Shape kShapes[] = {
    {"hd64", "GPT-2 124M: B32 H12 T1024 hd64", 32, 12, 1024, 64},
    {"hd128", "d4096: B4 H32 T2048 hd128", 4, 32, 2048, 128},
};

// Deterministic uniform values in [-scale, scale] (an LCG: tens of millions of values in well
// under a second, and the timings do not depend on them).
std::vector<bf16> RandomBf16(size_t n, uint64_t seed, float scale) {
  std::vector<bf16> v(n);
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (bf16& e : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    e = __float2bfloat16(scale * (static_cast<float>(x >> 40) / 8388608.0f - 1.0f));
  }
  return v;
}

std::vector<float> HostF32(const bf16* d, size_t n) {
  std::vector<bf16> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

double RelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * double(a[i] - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / std::max(den, 1e-30));
}

// Mean ms per call of `op` over `reps` calls after `warmup`; -1 if any call failed.
double TimeMs(cudaStream_t s, int warmup, int reps, const std::function<fp8::Status()>& op) {
  for (int i = 0; i < warmup; ++i)
    if (!op().ok()) return -1;
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  cudaEventRecord(a, s);
  bool ok = true;
  for (int i = 0; i < reps; ++i) ok = ok && op().ok();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a), cudaEventDestroy(b);
  return ok && cudaGetLastError() == cudaSuccess ? ms / reps : -1;
}

struct Result {
  double fwd_ms = -1, bwd_ms = -1;
  std::vector<float> y, dqkv, lse;
  bool repeatable = false;
};

// A row of the table: the kernels it runs.
struct Variant {
  const char* label;
  AttentionKernelChoice choice;
};
const Variant kVariants[] = {
    {"mma.sync fwd, dQ, dK/dV", {false, false, false}},
    {"wgmma fwd, mma.sync dQ, dK/dV", {true, false, false}},
    {"default with mma.sync dQ", {true, false, true}},
    {"default with mma.sync dK/dV", {true, true, false}},
    {"default", {}},
};
constexpr int kMmaRow = 0, kWgmmaFwdRow = 1, kMmaDqRow = 2, kMmaDkDvRow = 3, kDefaultRow = 4;
static_assert(std::size(kVariants) == kDefaultRow + 1, "the default row is the last");

struct GqaShape {
  std::string key, what;
  int64_t batch, heads, kv_heads, seq, head_dim;
};
const GqaShape kGqaShapes[] = {
    {"gqa1b", "Llama-3.2-1B: B4 H32 KV8 T2048 hd64", 4, 32, 8, 2048, 64},
    {"gqa3b", "Llama-3.2-3B: B4 H24 KV8 T2048 hd128", 4, 24, 8, 2048, 128},
};

// One row per grouped-query shape: forward and backward times, TFLOP/s, torch SDPA's beside, and
// whether two backward runs gave the same bits. false: a launch or an allocation failed.
bool RunGqa(cudaStream_t s, int warmup, int reps, const std::map<std::string, std::pair<double, double>>& torch_ms) {
  for (const GqaShape& sh : kGqaShapes) {
    const int64_t b = sh.batch, h = sh.heads, kv = sh.kv_heads, t = sh.seq, hd = sh.head_dim;
    const int64_t nq = b * t * h * hd, nkv = b * t * kv * hd;
    const AttentionDims dims{b, h, t, hd, kv};
    const HeadLayout ql = RowMajorHeads(t, hd, h * hd), kvl = RowMajorHeads(t, hd, kv * hd);
    DeviceBuffer<bf16> q, k, v, y, dy, dq, dk, dv, dq2, dk2, dv2;
    DeviceBuffer<float> lse, scratch;
    bool ok = lse.Allocate(static_cast<size_t>(b * h * t), "lse").ok() &&
              scratch.Allocate(static_cast<size_t>(FlashAttentionBackwardScratchFloats(dims)), "scratch").ok();
    for (DeviceBuffer<bf16>* x : {&q, &y, &dy, &dq, &dq2}) ok = ok && x->Allocate(static_cast<size_t>(nq), "q-sized").ok();
    for (DeviceBuffer<bf16>* x : {&k, &v, &dk, &dv, &dk2, &dv2}) ok = ok && x->Allocate(static_cast<size_t>(nkv), "kv-sized").ok();
    if (!ok) {
      std::fprintf(stderr, "%s: allocation failed\n", sh.what.c_str());
      return false;
    }
    uint64_t seed = 11;
    for (auto [buf, count] : {std::pair{&q, nq}, std::pair{&k, nkv}, std::pair{&v, nkv}, std::pair{&dy, nq}}) {
      const std::vector<bf16> host = RandomBf16(static_cast<size_t>(count), seed++, buf == &dy ? 1.0f : 1.5f * std::sqrt(3.0f));
      cudaMemcpy(buf->get(), host.data(), host.size() * sizeof(bf16), cudaMemcpyHostToDevice);
    }
    AttentionKernelChoice choice;
    auto fwd = [&] {
      return FlashAttentionForward(dims, q.get(), ql, k.get(), v.get(), kvl, y.get(), ql, lse.get(), s, choice);
    };
    auto bwd = [&](bf16* gq, bf16* gk, bf16* gv) {
      return FlashAttentionBackward(dims, q.get(), ql, k.get(), v.get(), kvl, y.get(), dy.get(), ql, lse.get(), scratch.get(),
                                    gq, gk, gv, s, choice);
    };
    const double fwd_flop = 2.0 * 2.0 * b * h * double(t) * t * hd / 2.0, bwd_flop = 2.5 * fwd_flop;
    std::vector<float> grads[2];  // dq, dk, dv of the mma.sync row, then of the default row
    for (int row = 0; row < 2; ++row) {  // the mma.sync kernels, then the default
      choice = row == 0 ? kVariants[kMmaRow].choice : AttentionKernelChoice{};
      const double fwd_ms = TimeMs(s, warmup, reps, fwd);
      const double bwd_ms = TimeMs(s, warmup, reps, [&] { return bwd(dq.get(), dk.get(), dv.get()); });
      if (fwd_ms < 0 || bwd_ms < 0) return false;
      (void)bwd(dq2.get(), dk2.get(), dv2.get());
      cudaStreamSynchronize(s);
      bool repeatable = true;
      for (auto [a, z, count] : {std::tuple{&dq, &dq2, nq}, std::tuple{&dk, &dk2, nkv}, std::tuple{&dv, &dv2, nkv}}) {
        const std::vector<float> ga = HostF32(a->get(), static_cast<size_t>(count));
        repeatable = repeatable && std::memcmp(ga.data(), HostF32(z->get(), static_cast<size_t>(count)).data(),
                                               ga.size() * sizeof(float)) == 0;
        grads[row].insert(grads[row].end(), ga.begin(), ga.end());
      }
      const auto tq = torch_ms.find(sh.key);
      char vs_f[32] = "-", vs_fb[32] = "-";
      if (tq != torch_ms.end()) {
        std::snprintf(vs_f, sizeof(vs_f), "%.2fx", tq->second.first / fwd_ms);
        std::snprintf(vs_fb, sizeof(vs_fb), "%.2fx", tq->second.second / (fwd_ms + bwd_ms));
      }
      const bool wgmma = FlashAttentionForwardUsesWgmma(dims, ql, q.get(), k.get(), v.get(), choice);
      const bool wgmma_dkdv = FlashAttentionBackwardUsesWgmmaDkDv(dims, ql, ql, q.get(), k.get(), v.get(), dy.get(), choice);
      std::printf("| %s | %s: %s fwd, %s dQ and dK/dV (a dK/dV CTA walks its group)%s | %.3f | %.0f | %.3f | %.0f | %.3f | %.0f | %s | %s |\n",
                  sh.what.c_str(), row == 0 ? "mma.sync" : "default", wgmma ? "wgmma" : "mma.sync",
                  wgmma_dkdv ? "wgmma" : "mma.sync", repeatable ? "" : " BACKWARD NOT REPEATABLE", fwd_ms,
                  fwd_flop / fwd_ms / 1e9, bwd_ms, bwd_flop / bwd_ms / 1e9, fwd_ms + bwd_ms,
                  (fwd_flop + bwd_flop) / (fwd_ms + bwd_ms) / 1e9, vs_f, vs_fb);
    }
    const auto tq = torch_ms.find(sh.key);
    if (tq != torch_ms.end()) {
      const double tf = tq->second.first, tfb = tq->second.second, tb = tfb - tf;
      std::printf("| %s | torch SDPA (is_causal, enable_gqa, bf16) | %.3f | %.0f | %.3f | %.0f | %.3f | %.0f | 1.00x | 1.00x |\n",
                  sh.what.c_str(), tf, fwd_flop / tf / 1e9, tb, bwd_flop / tb / 1e9, tfb, (fwd_flop + bwd_flop) / tfb / 1e9);
    }
    std::printf("| %s | default vs mma.sync: rel. L2 diff of dq, dk, dv (from their own y, lse) %.2e | | | | | | | | |\n",
                sh.what.c_str(), RelDiff(grads[1], grads[0]));
  }
  return true;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

int Run(int argc, char** argv) {
  int reps = 20, warmup = 3;
  std::string torch_file;
  bool all_rows = true, gqa_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc) warmup = std::atoi(argv[++i]);
    else if (a == "--torch" && i + 1 < argc) torch_file = argv[++i];
    else if (a == "--default-only") all_rows = false;
    else if (a == "--gqa-only") gqa_only = true;
    else {
      std::fprintf(stderr, "usage: bench_attention_cuda [--reps N] [--warmup N] [--torch FILE] [--default-only] [--gqa-only]\n");
      return 2;
    }
  }
  std::map<std::string, std::pair<double, double>> torch_ms;  // key → (fwd, fwd+bwd)
  if (!torch_file.empty()) {
    std::ifstream in(torch_file);
    std::string key;
    double f, fb;
    while (in >> key >> f >> fb) torch_ms[key] = {f, fb};
    if (torch_ms.empty()) std::fprintf(stderr, "--torch %s: no 'KEY FWD_MS FWD_BWD_MS' lines\n", torch_file.c_str());
  }
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }

  std::printf("| shape | kernels | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | vs torch fwd | vs torch fwd+bwd |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::vector<std::string> notes;
  for (const Shape& sh : kShapes) {
    if (gqa_only) break;
    const int64_t b = sh.batch, h = sh.heads, t = sh.seq, hd = sh.head_dim, c = h * hd, n = b * t * c;
    const AttentionDims dims{b, h, t, hd};
    const HeadLayout ql = RowMajorHeads(t, hd, 3 * c), yl = RowMajorHeads(t, hd, c);
    DeviceBuffer<bf16> qkv, y, dy, dqkv, dqkv2;
    DeviceBuffer<float> lse, scratch;
    bool ok = qkv.Allocate(static_cast<size_t>(3 * n), "qkv").ok() && y.Allocate(static_cast<size_t>(n), "y").ok() &&
              dy.Allocate(static_cast<size_t>(n), "dy").ok() && dqkv.Allocate(static_cast<size_t>(3 * n), "dqkv").ok() &&
              dqkv2.Allocate(static_cast<size_t>(3 * n), "dqkv2").ok() &&
              lse.Allocate(static_cast<size_t>(b * h * t), "lse").ok() &&
              scratch.Allocate(static_cast<size_t>(FlashAttentionBackwardScratchFloats(dims)), "scratch").ok();
    if (!ok) {
      std::fprintf(stderr, "%s: allocation failed\n", sh.what.c_str());
      return 1;
    }
    // 1.5 spreads the softmax (neither flat nor one-hot), as in the tests.
    const std::vector<bf16> qkv_h = RandomBf16(static_cast<size_t>(3 * n), 1, 1.5f * std::sqrt(3.0f));
    const std::vector<bf16> dy_h = RandomBf16(static_cast<size_t>(n), 2, 1.0f);
    cudaMemcpy(qkv.get(), qkv_h.data(), qkv_h.size() * sizeof(bf16), cudaMemcpyHostToDevice);
    cudaMemcpy(dy.get(), dy_h.data(), dy_h.size() * sizeof(bf16), cudaMemcpyHostToDevice);
    const bf16 *q = qkv.get(), *k = q + c, *v = q + 2 * c;
    AttentionKernelChoice choice;
    auto fwd = [&] { return FlashAttentionForward(dims, q, k, v, ql, y.get(), yl, lse.get(), s, choice); };
    auto bwd = [&](bf16* out) {
      return FlashAttentionBackward(dims, q, k, v, ql, y.get(), dy.get(), yl, lse.get(), scratch.get(), out, out + c,
                                    out + 2 * c, s, choice);
    };
    const double fwd_flop = 2.0 * 2.0 * b * h * double(t) * t * hd / 2.0, bwd_flop = 2.5 * fwd_flop;
    Result res[std::size(kVariants)];
    for (int vi = all_rows ? 0 : kDefaultRow; vi <= kDefaultRow; ++vi) {
      choice = kVariants[vi].choice;
      Result& r = res[vi];
      r.fwd_ms = TimeMs(s, warmup, reps, fwd);
      // y and lse from this variant's forward feed its backward.
      r.bwd_ms = TimeMs(s, warmup, reps, [&] { return bwd(dqkv.get()); });
      (void)bwd(dqkv2.get());
      cudaStreamSynchronize(s);
      r.y = HostF32(y.get(), static_cast<size_t>(n));
      r.lse.resize(static_cast<size_t>(b * h * t));
      cudaMemcpy(r.lse.data(), lse.get(), r.lse.size() * sizeof(float), cudaMemcpyDeviceToHost);
      r.dqkv = HostF32(dqkv.get(), static_cast<size_t>(3 * n));
      r.repeatable = std::memcmp(r.dqkv.data(), HostF32(dqkv2.get(), static_cast<size_t>(3 * n)).data(),
                                 r.dqkv.size() * sizeof(float)) == 0;
      const auto tq = torch_ms.find(sh.key);
      char vs_f[32] = "-", vs_fb[32] = "-";
      if (tq != torch_ms.end() && r.fwd_ms > 0 && r.bwd_ms > 0) {
        std::snprintf(vs_f, sizeof(vs_f), "%.2fx", tq->second.first / r.fwd_ms);
        std::snprintf(vs_fb, sizeof(vs_fb), "%.2fx", tq->second.second / (r.fwd_ms + r.bwd_ms));
      }
      const bool wgmma = FlashAttentionForwardUsesWgmma(dims, ql, q, k, v, choice);
      const bool wgmma_dq = FlashAttentionBackwardUsesWgmmaDq(dims, ql, yl, q, k, v, dy.get(), choice);
      const bool wgmma_dkdv = FlashAttentionBackwardUsesWgmmaDkDv(dims, ql, yl, q, k, v, dy.get(), choice);
      std::printf("| %s | %s%s%s%s | %.3f | %.0f | %.3f | %.0f | %.3f | %.0f | %s | %s |\n", sh.what.c_str(), kVariants[vi].label,
                  vi == kDefaultRow ? (wgmma ? ": wgmma fwd" : ": mma.sync fwd") : "",
                  vi == kDefaultRow ? (wgmma_dq ? ", wgmma dQ" : ", mma.sync dQ") : "",
                  vi == kDefaultRow ? (wgmma_dkdv ? ", wgmma dK/dV" : ", mma.sync dK/dV") : "", r.fwd_ms, fwd_flop / r.fwd_ms / 1e9,
                  r.bwd_ms, bwd_flop / r.bwd_ms / 1e9, r.fwd_ms + r.bwd_ms,
                  (fwd_flop + bwd_flop) / (r.fwd_ms + r.bwd_ms) / 1e9, vs_f, vs_fb);
    }
    const auto tq = torch_ms.find(sh.key);
    if (tq != torch_ms.end()) {
      const double tf = tq->second.first, tfb = tq->second.second, tb = tfb - tf;
      std::printf("| %s | torch SDPA (is_causal, bf16) | %.3f | %.0f | %.3f | %.0f | %.3f | %.0f | 1.00x | 1.00x |\n",
                  sh.what.c_str(), tf, fwd_flop / tf / 1e9, tb, bwd_flop / tb / 1e9, tfb, (fwd_flop + bwd_flop) / tfb / 1e9);
    }
    // The backward's kernels alone, on the default forward's y/lse and the delta its last
    // backward left in scratch (the default row ran last).
    // TFLOP/s as above: dK/dV does 4 of the 5 counted GEMMs (S, dP, dV, dK), dQ 3 (S, dP, dQ).
    auto alone = [&](AttentionKernelChoice kernels, bool dq) {
      bf16* out = dqkv2.get();
      return TimeMs(s, warmup, reps, [&] {
        return dq ? fp8::train::cuda::internal::FlashAttentionBackwardDqAlone(dims, q, k, v, ql, dy.get(), yl, lse.get(),
                                                                             scratch.get(), out, s, kernels)
                  : fp8::train::cuda::internal::FlashAttentionBackwardDkDvAlone(dims, q, k, v, ql, dy.get(), yl, lse.get(),
                                                                               scratch.get(), out + c, out + 2 * c, s, kernels);
      });
    };
    const double dkdv_mma = alone(kVariants[kMmaDkDvRow].choice, false), dkdv_wgmma = alone({}, false),
                 dq_ms = alone({}, true);
    std::printf("| %s | kernels alone: dK/dV mma.sync %.3f ms (%.0f TFLOP/s), dK/dV wgmma %.3f ms (%.0f TFLOP/s), dQ (%s) %.3f ms (%.0f TFLOP/s) | | | | | | | | |\n",
                sh.what.c_str(), dkdv_mma, 0.8 * bwd_flop / dkdv_mma / 1e9, dkdv_wgmma, 0.8 * bwd_flop / dkdv_wgmma / 1e9,
                FlashAttentionBackwardUsesWgmmaDq(dims, ql, yl, q, k, v, dy.get()) ? "wgmma" : "mma.sync", dq_ms,
                0.6 * bwd_flop / dq_ms / 1e9);
    if (!all_rows) continue;
    char note[768];
    const Result &mma = res[kMmaRow], &wg = res[kWgmmaFwdRow], &def = res[kDefaultRow];
    std::snprintf(note, sizeof(note),
                  "%s: wgmma vs mma.sync fwd: rel. L2 diff y %.2e, max |lse diff| %.2e (log2 units), dqkv from their lse %.2e; "
                  "wgmma vs mma.sync dQ: dqkv %.2e; wgmma vs mma.sync dK/dV: dqkv %.2e; backward bitwise repeatable: %s",
                  sh.what.c_str(), RelDiff(wg.y, mma.y), MaxAbsDiff(wg.lse, mma.lse), RelDiff(wg.dqkv, mma.dqkv),
                  RelDiff(def.dqkv, res[kMmaDqRow].dqkv), RelDiff(def.dqkv, res[kMmaDkDvRow].dqkv),
                  std::all_of(std::begin(res), std::end(res), [](const Result& x) { return x.repeatable; }) ? "every row" : "NOT ALL");
    notes.push_back(note);
  }
  if (!RunGqa(s, warmup, reps, torch_ms)) return 1;
  std::printf("\nvs torch: torch time / our time (above 1 = we are faster). bwd = fwd+bwd − fwd for torch.\n");
  for (const std::string& n : notes) std::printf("%s\n", n.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
