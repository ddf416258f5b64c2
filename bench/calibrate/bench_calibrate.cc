// SPDX-License-Identifier: Apache-2.0
// Calibration throughput and memory (issue 5): generates a Llama-like BF16 model of about 1 GB
// (three shards), then runs `fp8-worker calibrate` in a fresh child process (this binary
// re-executed, so the generator's memory is not inherited) and reports GB/s of input and the
// child's peak RSS (getrusage via wait4) against the largest tensor.
//
//   bench_calibrate [--dir DIR] [--d-model 4096] [--layers 2] [--vocab 16000] [--keep]
//                   [--backends cpu,cuda]
//
// --backends runs every case once per backend (the spec's `backend` field), on the same model
// in the same run, and prints each backend's GB/s relative to the first one's. The report's
// summary.backend says which one actually ran (auto, or cuda on a build/machine without it,
// would show up there).
//
// Targets: ≥ 1 GB/s on CPU, peak RSS ≤ 2× the largest tensor. The input is freshly written, so
// it is read from the page cache; the output is fsynced (each shard, then the directory), so
// the number includes the disk writes.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/calibrate/calibrate_main.h"
#include "worker/safetensors/safetensors.h"

namespace fs = std::filesystem;
using fp8::safetensors::DType;
using fp8::safetensors::TensorInfo;

namespace {

// Random BF16 with a roughly normal shape (sum of uniforms), fast enough for a GB.
void FillBf16(uint16_t* p, size_t n, uint64_t& state) {
  for (size_t i = 0; i < n; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const float u = static_cast<float>((state & 0xFFFF) + ((state >> 16) & 0xFFFF) + ((state >> 32) & 0xFFFF)) /
                        65536.0f - 1.5f;
    float v = u * 0.02f;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    p[i] = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
  }
}

struct Model {
  uint64_t total_bytes = 0, largest = 0;
};

Model Generate(const fs::path& dir, int64_t d, int64_t layers, int64_t vocab) {
  fs::create_directories(dir);
  const int64_t ffn = d * 7 / 2;
  std::vector<std::vector<TensorInfo>> shards(3);
  shards[0].push_back({"model.embed_tokens.weight", DType::BF16, {vocab, d}});
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto& s = shards[1 + l % 2];
    s.push_back({p + "input_layernorm.weight", DType::BF16, {d}});
    s.push_back({p + "self_attn.qkv_proj.weight", DType::BF16, {3 * d, d}});
    s.push_back({p + "self_attn.o_proj.weight", DType::BF16, {d, d}});
    s.push_back({p + "post_attention_layernorm.weight", DType::BF16, {d}});
    s.push_back({p + "mlp.up_proj.weight", DType::BF16, {ffn, d}});
    s.push_back({p + "mlp.down_proj.weight", DType::BF16, {d, ffn}});
  }
  shards[0].push_back({"model.norm.weight", DType::BF16, {d}});
  Model m;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t state = 0x9E3779B97F4A7C15ull;
  std::vector<uint16_t> buf(size_t{4} << 20);
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = "model-0000" + std::to_string(i + 1) + "-of-00003.safetensors";
    auto w = fp8::safetensors::Writer::Create((dir / name).string(), shards[i]);
    FP8_CHECK(w.ok());
    for (const auto& t : w->tensors()) {
      weight_map[t.name] = name;
      m.largest = std::max<uint64_t>(m.largest, t.nbytes());
      for (uint64_t off = 0; off < t.nbytes(); off += buf.size() * 2) {
        const size_t n = std::min<uint64_t>(buf.size() * 2, t.nbytes() - off);
        FillBf16(buf.data(), n / 2, state);
        FP8_CHECK_OK(w->WriteAt(t.name, off, buf.data(), n));
      }
    }
    FP8_CHECK_OK(w->Commit());
    m.total_bytes += fs::file_size(dir / name);
  }
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json({{"weight_map", weight_map}}).dump();
  std::ofstream(dir / "config.json") << nlohmann::json({{"hidden_size", d}, {"num_hidden_layers", layers}}).dump();
  return m;
}

struct ChildRun {
  int exit_code = -1;
  double seconds = 0;
  long max_rss_kib = 0;
  double cpu_seconds = 0;  // user + system, all threads
};

ChildRun RunChild(const std::string& spec_path) {
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    const char* devnull = "/dev/null";
    execl("/proc/self/exe", "bench_calibrate", "--child", spec_path.c_str(), "--events", devnull,
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  ChildRun r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.max_rss_kib = ru.ru_maxrss;
  r.cpu_seconds = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--child") {
    std::vector<char*> args = {const_cast<char*>("--spec"), argv[2]};
    for (int i = 3; i < argc; ++i) args.push_back(argv[i]);
    return fp8::calibrate::CalibrateMain(static_cast<int>(args.size()), args.data());
  }
  fs::path dir = fs::temp_directory_path() / "fp8_calibrate_bench";
  int64_t d = 4096, layers = 2, vocab = 16000;
  bool keep = false;
  std::vector<std::string> backends = {"cpu"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--d-model" && i + 1 < argc) d = std::atol(argv[++i]);
    else if (a == "--layers" && i + 1 < argc) layers = std::atol(argv[++i]);
    else if (a == "--vocab" && i + 1 < argc) vocab = std::atol(argv[++i]);
    else if (a == "--keep") keep = true;
    else if (a == "--backends" && i + 1 < argc) {
      backends.clear();
      std::stringstream list(argv[++i]);
      for (std::string b; std::getline(list, b, ',');) backends.push_back(b);
    }
    else {
      std::fprintf(stderr, "usage: %s [--dir DIR] [--d-model N] [--layers N] [--vocab N] [--keep] [--backends cpu,cuda]\n", argv[0]);
      return 64;
    }
  }
  fs::remove_all(dir);
  const fs::path in = dir / "bf16";
  const Model m = Generate(in, d, layers, vocab);
  std::printf("model: %.3f GB in 3 shards, largest tensor %.1f MiB (d_model %ld, %ld layers, vocab %ld), %d threads\n",
              m.total_bytes / 1e9, m.largest / 1048576.0, static_cast<long>(d), static_cast<long>(layers),
              static_cast<long>(vocab), static_cast<int>(std::thread::hardware_concurrency()));

  struct Case {
    std::string name;
    nlohmann::json spec;
  };
  std::vector<Case> cases;
  for (const auto& b : backends) {
    const fs::path fp8_b = dir / ("fp8_" + b), back_b = dir / ("bf16_back_" + b);
    cases.push_back({"quantize (block 128x128, fp32 scales)",
                     {{"input", in.string()}, {"output_dir", fp8_b.string()}, {"backend", b}}});
    cases.push_back({"dequantize (fp8 -> bf16)",
                     {{"input", fp8_b.string()}, {"output_dir", back_b.string()}, {"direction", "dequantize"}, {"backend", b}}});
  }
  int rc = 0;
  std::vector<double> first_gbps;  // per case of the first backend, for the ratios
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const fs::path spec = dir / "spec.json";
    std::ofstream(spec) << c.spec.dump();
    fs::remove_all(c.spec["output_dir"].get<std::string>());
    uint64_t in_bytes = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(c.spec["input"].get<std::string>(), ec))
      if (e.path().extension() == ".safetensors") in_bytes += e.file_size();
    if (ec) {  // the quantize case before it failed
      std::printf("%-5s %-38s skipped: %s\n", c.spec["backend"].get<std::string>().c_str(), c.name.c_str(),
                  ec.message().c_str());
      rc = 1;
      continue;
    }
    const ChildRun r = RunChild(spec.string());
    const double rss = r.max_rss_kib * 1024.0;
    const double gbps = in_bytes / r.seconds / 1e9;
    std::string ran = "?";
    std::ifstream report(fs::path(c.spec["output_dir"].get<std::string>()) / "report.json");
    if (report) {
      const auto j = nlohmann::json::parse(report, nullptr, false);
      if (j.is_object()) ran = j.value("/summary/backend"_json_pointer, std::string("?"));
    }
    if (r.exit_code != 0) ran = c.spec["backend"].get<std::string>() + "!";
    if (i < 2) first_gbps.push_back(gbps);
    std::printf("%-5s %-38s exit %d  %.2f s wall, %.2f s CPU  %.3f GB/s of input (wall, %.2fx %s)  %.3f GB per CPU-s  "
                "peak RSS %.1f MiB = %.2fx largest tensor\n",
                ran.c_str(), c.name.c_str(), r.exit_code, r.seconds, r.cpu_seconds, gbps, first_gbps.size() > i % 2 ? gbps / first_gbps[i % 2] : 0.0,
                backends[0].c_str(), in_bytes / r.cpu_seconds / 1e9, rss / 1048576.0, rss / m.largest);
    std::fflush(stdout);
    if (r.exit_code != 0) rc = 1;
    // After a backend's dequantize: its outputs are no longer needed (tmpfs space).
    if (i % 2 == 1 && !keep) {
      fs::remove_all(c.spec["input"].get<std::string>());
      fs::remove_all(c.spec["output_dir"].get<std::string>());
    }
  }
  if (!keep) fs::remove_all(dir);
  return rc;
}
