// SPDX-License-Identifier: Apache-2.0
// Throughput of the CPU reference kernels on this machine: Sgemm GFLOP/s (both micro-kernels,
// all threads and one thread) and quantize / fake-quantize GB/s of FP32 input.
// Usage: bench_kernels_cpu [--quick]   (FP8_NUM_THREADS sets the pool size)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "kernels/quantize.h"

namespace fp8::kernels {
namespace {

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best-of-N wall time of fn, after one warm-up call; repeats until min_total passes. Also the
// best CPU time (all threads): on a shared, oversubscribed machine wall time measures the
// neighbours, while work / CPU-second still says how fast the code runs when it runs.
struct Timing {
  double wall = 1e30;
  double cpu = 1e30;
};
Timing Measure(const std::function<void()>& fn, double min_total) {
  fn();
  Timing best;
  double total = 0;
  int reps = 0;
  while (total < min_total || reps < 3) {
    const double c0 = ProcessCpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best.wall = std::min(best.wall, s);
    best.cpu = std::min(best.cpu, ProcessCpuSeconds() - c0);
    total += s;
    ++reps;
  }
  return best;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void BenchSgemm(int64_t m, int64_t n, int64_t k, bool ta, bool tb, double min_total) {
  const auto a = Random(m * k, 1), b = Random(k * n, 2);
  std::vector<float> c(m * n);
  const Timing t = Measure(
      [&] { Sgemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n); }, min_total);
  const double gflop = 2.0 * m * n * k * 1e-9;
  std::printf("sgemm %-11s %s%s %5lldx%5lldx%5lld  %7.2f GFLOP/s wall  %7.2f GFLOP/cpu-s  (%.3f ms)\n", SgemmKernelName(),
              ta ? "T" : "N", tb ? "T" : "N", (long long)m, (long long)n, (long long)k, gflop / t.wall, gflop / t.cpu,
              t.wall * 1e3);
}

void BenchQuantize(int64_t rows, int64_t cols, double min_total) {
  const auto x = Random(rows * cols, 3);
  std::vector<uint8_t> q(x.size()), qt(x.size());
  std::vector<float> y(x.size()), s(rows * CeilDiv(cols, kTile) + CeilDiv(rows, kTile) * cols), st(s.size());
  const double gb = static_cast<double>(x.size()) * sizeof(float) * 1e-9;  // FP32 input read
  auto report = [&](const char* name, const std::function<void()>& fn) {
    const Timing t = Measure(fn, min_total);
    std::printf("%-28s %5lldx%5lld  %6.2f GB/s wall  %6.2f GB/cpu-s  of fp32 input  (%.3f ms)\n", name, (long long)rows,
                (long long)cols, gb / t.wall, gb / t.cpu, t.wall * 1e3);
  };
  const auto e4 = Fp8Format::kE4M3;
  const auto fp32 = ScaleFormat::kFp32;
  report("quantize 1x128 e4m3", [&] { (void)Quantize1x128(x.data(), rows, cols, e4, fp32, q.data(), s.data()); });
  report("quantize 128x1 e4m3", [&] { (void)Quantize128x1(x.data(), rows, cols, e4, fp32, q.data(), s.data()); });
  report("quantize 128x128 e4m3", [&] { (void)Quantize128x128(x.data(), rows, cols, e4, fp32, q.data(), s.data()); });
  report("quantize 1x128+T e4m3", [&] {
    (void)Quantize1x128WithTranspose(x.data(), rows, cols, e4, fp32, q.data(), s.data(), qt.data(), st.data());
  });
  report("quantize tensor e5m2", [&] { QuantizeTensor(x.data(), rows * cols, 0.01f, Fp8Format::kE5M2, q.data()); });
  report("dequantize 1x128 e4m3", [&] { (void)Dequantize1x128(q.data(), s.data(), rows, cols, e4, y.data()); });
  report("fake-quantize 1x128 e4m3",
         [&] { (void)FakeQuantize(x.data(), rows, cols, Granularity::k1x128, e4, fp32, 0, y.data(), s.data()); });
  report("fake-quantize 128x128 e4m3",
         [&] { (void)FakeQuantize(x.data(), rows, cols, Granularity::k128x128, e4, fp32, 0, y.data(), s.data()); });
}

}  // namespace
}  // namespace fp8::kernels

int main(int argc, char** argv) {
  using namespace fp8::kernels;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const double t = quick ? 0.05 : 0.5;
  std::printf("threads: %d (FP8_NUM_THREADS overrides)\n", NumThreads());
  for (SgemmKernel kern : {SgemmKernel::kAvx2, SgemmKernel::kGeneric}) {
    SetSgemmKernel(kern);
    if (kern == SgemmKernel::kAvx2 && std::string(SgemmKernelName()) != "avx2-fma") continue;
    BenchSgemm(512, 512, 512, false, false, t);
    if (quick) continue;
    BenchSgemm(512, 512, 512, false, true, t);
    BenchSgemm(512, 512, 512, true, false, t);
    BenchSgemm(1024, 1024, 1024, false, false, t);
    BenchSgemm(64, 2048, 512, false, false, t);   // a trainer-like skinny product
    BenchSgemm(2048, 64, 512, true, false, t);    // weight-gradient shape
  }
  SetSgemmKernel(SgemmKernel::kAuto);
  BenchQuantize(1024, 4096, t);
  return 0;
}
