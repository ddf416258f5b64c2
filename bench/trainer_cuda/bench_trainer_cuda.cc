// SPDX-License-Identifier: Apache-2.0
// Training throughput of the CUDA trainer: for each shape and recipe, a model (GPT-2 shapes, or
// a Llama-family model: llama-1b, llama-3b, qwen3-0.6b at B=4, T=2048, llama-bytes) trained for a few
// warm-up steps then `--steps` timed steps (forward, backward, grad norm, clipping, AdamW — the
// whole step the loop runs), reporting tokens/s, MFU (6·N + 12·L·C·T FLOPs per token over
// 989 TFLOP/s dense BF16, TrainFlopsPerToken, as the trainer's progress reports it) and device memory in use (cudaMemGetInfo: the CUDA context, cuBLAS
// workspaces and every buffer, which this trainer allocates up front, so it is the peak).
// Batches come from token shards (--data GLOB, byte tokens) or are random; the loss is printed
// so a run shows that the model trains.
//
// With --loss-window N the last column is the mean training loss of the last N steps and the
// loss is logged every 50 steps: the FP8-vs-BF16 loss comparison at equal steps (shape
// bytes-l12 or llama-bytes, byte tokens, same batches for every recipe;
// scripts/gpu/trainer_cuda_loss.sh).
// --val GLOB adds held-out loss: every --eval-every steps and after the last step, the mean loss
// (Forward without training, so the FP8 scaling state does not move) of the same --eval-batches
// batches of the val shards for every recipe; the JSON gets val_loss_final and val_losses. The
// evals run inside the timed loop: a loss run's tokens/s is not a throughput figure.
// --cosine: lr warms up linearly over the first 5% of steps, then decays (cosine) to 10% at the
// last step, so the final losses compare models that have settled rather than a noisy step.
// --batch overrides the shape's batch size. --amax-history N, --margin N, --amax-most-recent set
// fp8-tensorwise's delayed scaling (PrecisionConfig; defaults 16, 0, max over the history).
// --init-seed N (default 1) seeds the weight initialisation only (the batches stay the same):
// two bf16 runs with different seeds give the loss comparison's noise floor.
// --accum N: gradient accumulation, a step is N micro-batches of the shape's batch (forward and
// backward each, the loss scaled by 1/N, the gradients summed), then one grad norm and one AdamW:
// the optimizer's cost spread over N·B·T tokens. Tokens/s and MFU count all N micro-batches; the
// row's shape reads "NAME/accN".
//
//   bench_trainer_cuda [--shapes gpt2-124m,d4096-l8,llama-1b] [--recipes bf16,fp8-tensorwise,fp8-blockwise]
//                      [--steps 10] [--warmup 3] [--data 'DIR/train_*.bin'] [--json FILE]
//                      [--loss-window N] [--breakdown] [--profile] [--batch N] [--cosine]
//                      [--val 'DIR/val_*.bin' --eval-every N --eval-batches M] [--accum N]
// --breakdown: after each GPT shape's bf16 row, the step's operations timed one by one (step_breakdown.h).
// --profile: after each Llama row, one more step with every operation the model enqueues timed
// in place by CUDA events (op_timer.h), printed as a table by operation (step_profile.h); under
// fp8-blockwise also each fused pass against the passes it replaced (llama_fusions.h).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/trainer_cuda/llama_fusions.h"
#include "bench/trainer_cuda/step_breakdown.h"
#include "bench/trainer_cuda/step_profile.h"
#include "worker/data/shards.h"
#include "worker/train/causal_lm.h"
#include "worker/train/cuda/cuda_causal_lm.h"
#include "worker/train/cuda/device_buffer.h"
#include "worker/train/cuda/cuda_trainer.h"
#include "worker/train/cuda/train_kernels.h"

namespace {

using namespace fp8::train;
using namespace fp8::train::cuda;

struct Shape {
  std::string name;
  int n_layer, n_head, d_model, seq_len, vocab, batch;
  // A Llama-family model: the job spec's `model` object as JSON (a preset or explicit fields,
  // through the job spec's defaults); of the fields above only seq_len and vocab (the model's,
  // for the batches) and batch are read.
  std::string model;
};

const Shape kShapes[] = {
    {"gpt2-124m", 12, 12, 768, 1024, 50304, 32, ""},
    {"d4096-l8", 8, 32, 4096, 2048, 50304, 4, ""},
    {"gpt-1b", 24, 16, 2048, 2048, 50304, 4, ""},
    {"bytes-l12", 12, 12, 768, 1024, 256, 8, ""},  // GPT-2 124M's blocks on byte tokens (85M params)
    {"llama-1b", 0, 0, 0, 2048, 128256, 4, R"({"preset": "llama-1b"})"},  // Llama-3.2-1B: GQA 32/8, hd 64, tied
    {"llama-3b", 0, 0, 0, 2048, 128256, 4, R"({"preset": "llama-3b"})"},  // Llama-3.2-3B: GQA 24/8, hd 128, tied
    {"qwen3-0.6b", 0, 0, 0, 2048, 151936, 4, R"({"preset": "qwen3-0.6b"})"},
    // bytes-l12's size as a Llama block (GQA 12/4, SwiGLU 2048, untied head) on byte tokens: the
    // Llama family's FP8-vs-BF16 loss runs (scripts/gpu/trainer_cuda_loss.sh LOSS_SHAPE=llama-bytes).
    {"llama-bytes", 0, 0, 0, 1024, 256, 8,
     R"({"architecture": "llama", "n_layer": 12, "n_head": 12, "num_key_value_heads": 4, "d_model": 768,
         "intermediate_size": 2048, "seq_len": 1024, "vocab_size": 256, "tie_word_embeddings": false})"},
};

// The model of a shape: GPT-2's from its fields, a Llama model's through the job spec's defaults
// (the same numbers `fp8-worker train` would run).
fp8::StatusOr<ModelConfig> ShapeConfig(const Shape& sh) {
  if (sh.model.empty()) {
    ModelConfig cfg;
    cfg.n_layer = sh.n_layer;
    cfg.n_head = sh.n_head;
    cfg.d_model = sh.d_model;
    cfg.seq_len = sh.seq_len;
    cfg.vocab_size = sh.vocab;
    return cfg;
  }
  const nlohmann::json spec = {{"model", nlohmann::json::parse(sh.model)}, {"data", {{"train", "/bench/train_*.bin"}}}, {"output_dir", "/tmp/bench"}};
  FP8_ASSIGN_OR_RETURN(TrainSpec parsed, ParseTrainSpec(spec));
  return parsed.model;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

#define CHECK_OK(expr)                                                                  \
  do {                                                                                  \
    const ::fp8::Status _s = (expr);                                                    \
    if (!_s.ok()) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, _s.message().c_str()); \
      return std::nullopt;                                                              \
    }                                                                                   \
  } while (0)

struct Result {
  double tokens_per_s, mfu, mem_gib, loss_first, loss_last, ms_per_step;
  double loss_tail_mean = 0;  // mean loss of the last --loss-window steps
  int64_t params;
  double val_loss_final = 0;  // --val: held-out loss after the last step
  std::vector<std::pair<int, double>> val_losses;  // (steps done, held-out loss)
};

// What the loss runs add to a throughput case: schedule and held-out evaluation.
struct LossOptions {
  PrecisionConfig precision;  // recipe set per case; the delayed-scaling knobs from the flags
  bool cosine = false;
  const fp8::data::TokenDataset* val = nullptr;
  int eval_every = 0, eval_batches = 8;
  uint64_t init_seed = 1;
  bool profile = false;  // --profile: one more step, timed op by op, printed after the row
  int accum = 1;         // --accum: micro-batches per optimizer step
};

// Linear warm-up over the first 5% of `total` steps, then cosine from lr to lr/10.
float CosineLr(float lr, int step, int total) {
  const int warm = std::max(1, total / 20);
  if (step < warm) return lr * static_cast<float>(step + 1) / static_cast<float>(warm);
  const double t = static_cast<double>(step - warm) / std::max(1, total - 1 - warm);
  return static_cast<float>(lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(3.14159265358979 * std::min(1.0, t)))));
}

std::optional<Result> RunCase(const Shape& sh, Recipe recipe, int warmup, int steps, int loss_window,
                              const fp8::data::TokenDataset* ds, const LossOptions& lo) {
  auto resolved = ShapeConfig(sh);
  if (!resolved.ok()) {
    std::fprintf(stderr, "shape %s: %s\n", sh.name.c_str(), resolved.status().message().c_str());
    return std::nullopt;
  }
  const ModelConfig cfg = *resolved;
  PrecisionConfig pc = lo.precision;
  pc.recipe = recipe;
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return std::nullopt;
  const auto layout = CausalLmParamLayout(cfg);
  auto created = MakeCudaCausalLm(cfg, pc, layout, sh.batch, s);
  if (!created.ok()) {
    std::fprintf(stderr, "create: %s\n", created.status().message().c_str());
    return std::nullopt;
  }
  auto model = std::move(created).value();
  const int64_t np = model->num_params();
  // GPT-2 initialisation on the device (LayerNorm weights 1, biases 0, N(0, 0.02), residual
  // projections N(0, 0.02/√(2L))); the Llama family's (RMSNorm weights 1, biases 0, N(0, 0.02)).
  // Tensor i is seeded 1 + i (the default, as before) or init_seed·1000 + i: no shared streams.
  uint64_t seed = lo.init_seed == 1 ? 1 : lo.init_seed * 1000;
  for (const ParamTensor& t : layout) {
    float* p = model->mutable_params() + t.offset;
    const bool ln_w = (t.name.find("ln_") != std::string::npos && t.name.ends_with(".weight")) || t.name.ends_with("norm.weight");
    if (ln_w) CHECK_OK(Fill(p, t.numel, 1.0f, s));
    else if (t.shape.size() == 1) CHECK_OK(Fill(p, t.numel, 0.0f, s));
    else CHECK_OK(InitNormal(p, t.numel, seed++, t.name.ends_with("c_proj.weight") ? 0.02f / std::sqrt(2.0f * cfg.n_layer) : 0.02f, s));
  }
  DeviceBuffer<float> m, v;
  DeviceBuffer<double> partial, norm;
  CHECK_OK(m.Allocate(static_cast<size_t>(np), "m"));
  CHECK_OK(v.Allocate(static_cast<size_t>(np), "v"));
  CHECK_OK(partial.Allocate(1024, "partial"));
  CHECK_OK(norm.Allocate(1, "norm"));
  cudaMemsetAsync(m.get(), 0, np * sizeof(float), s);
  cudaMemsetAsync(v.get(), 0, np * sizeof(float), s);
  const int64_t n = static_cast<int64_t>(sh.batch) * sh.seq_len;
  std::vector<int32_t> in(static_cast<size_t>(n)), tg(static_cast<size_t>(n));
  std::mt19937 rng(5);
  auto fill_batch = [&](int step) {
    if (ds) {
      for (int j = 0; j < sh.batch; ++j)
        ds->Sample(42, static_cast<uint64_t>(step) * sh.batch + j, in.data() + j * sh.seq_len, tg.data() + j * sh.seq_len);
    } else if (step == 0) {
      for (int64_t i = 0; i < n; ++i) {
        in[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % sh.vocab);
        tg[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % sh.vocab);
      }
    }
  };
  // Held-out loss over the same batches (seed 7, samples 0..) for every recipe and every eval.
  std::vector<int32_t> vin(in.size()), vtg(tg.size());
  auto eval_val = [&]() -> std::optional<double> {
    double sum = 0;
    for (int e = 0; e < lo.eval_batches; ++e) {
      for (int j = 0; j < sh.batch; ++j)
        lo.val->Sample(7, static_cast<uint64_t>(e) * sh.batch + j, vin.data() + j * sh.seq_len, vtg.data() + j * sh.seq_len);
      auto l = model->Forward(vin.data(), vtg.data(), sh.batch, false, 1.0f);
      if (!l.ok()) {
        std::fprintf(stderr, "eval forward: %s\n", l.status().message().c_str());
        return std::nullopt;
      }
      sum += *l;
    }
    return sum / lo.eval_batches;
  };
  Result r{};
  r.params = np;
  // One training step (the loop's): the loss, or nullopt after printing why. `timer`: marks the
  // bench's own operations too (the model marks its).
  double gn = 0;
  auto train_step = [&](int step, OpTimer* timer) -> std::optional<double> {
    CHECK_OK(model->ZeroGrad());
    double loss_sum = 0;
    for (int micro = 0; micro < lo.accum; ++micro) {
      if (micro > 0) fill_batch(step * lo.accum + micro);
      auto loss = model->Forward(in.data(), tg.data(), sh.batch, true, 1.0f / static_cast<float>(lo.accum));
      if (!loss.ok()) {
        std::fprintf(stderr, "forward: %s\n", loss.status().message().c_str());
        return std::nullopt;
      }
      loss_sum += *loss;
      CHECK_OK(model->Backward());
    }
    const double loss = loss_sum / lo.accum;
    if (timer) timer->Mark("(host gap before grad norm)", s);
    CHECK_OK(SumSquares(model->grads(), np, partial.get(), norm.get(), s));
    if (timer) timer->Mark("grad norm", s);
    double sq = 0;
    cudaMemcpyAsync(&sq, norm.get(), sizeof(double), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    gn = std::sqrt(sq);
    const float clip = gn > 1.0 ? static_cast<float>(1.0 / (gn + 1e-6)) : 1.0f;
    const int64_t k = step + 1;
    const float lr = lo.cosine ? CosineLr(6e-4f, step, warmup + steps) : 6e-4f;
    AdamWArgs a{lr, 0.9f, 0.95f, 1e-8f, 0.1f, static_cast<float>(1 - std::pow(0.9, k)), static_cast<float>(1 - std::pow(0.95, k)), clip};
    CHECK_OK(model->OptimizerStep(a, m.get(), v.get()));
    return loss;
  };
  std::chrono::steady_clock::time_point t0;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      cudaStreamSynchronize(s);
      t0 = std::chrono::steady_clock::now();
    }
    fill_batch(step * lo.accum);
    const std::optional<double> loss = train_step(step, nullptr);
    if (!loss) return std::nullopt;
    if (step == 0) r.loss_first = *loss;
    r.loss_last = *loss;
    if (step >= warmup + steps - loss_window) r.loss_tail_mean += *loss / loss_window;
    if (step < 3 || step == warmup + steps - 1 || (loss_window > 0 && step % 50 == 0))
      std::fprintf(stderr, "  %s %s step %d loss %.4f grad_norm %.3f\n", sh.name.c_str(), RecipeName(recipe), step, *loss, gn);
    const bool last = step == warmup + steps - 1;
    if (lo.val && (last || (lo.eval_every > 0 && (step + 1) % lo.eval_every == 0))) {
      auto vl = eval_val();
      if (!vl) return std::nullopt;
      r.val_losses.emplace_back(step + 1, *vl);
      if (last) r.val_loss_final = *vl;
      std::fprintf(stderr, "  %s %s after %d steps val loss %.5f\n", sh.name.c_str(), RecipeName(recipe), step + 1, *vl);
    }
  }
  if (cudaStreamSynchronize(s) != cudaSuccess || cudaGetLastError() != cudaSuccess) return std::nullopt;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.ms_per_step = 1e3 * secs / steps;
  r.tokens_per_s = static_cast<double>(n) * lo.accum * steps / secs;
  r.mfu = r.tokens_per_s * TrainFlopsPerToken(cfg, np) / kH200DenseBf16Flops;
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  r.mem_gib = static_cast<double>(total_b - free_b) / (1u << 30);
  if (lo.profile && !sh.model.empty()) {
    auto timer = OpTimer::Create(1 << 16);
    if (!timer.ok()) {
      std::fprintf(stderr, "profile: %s\n", timer.status().message().c_str());
      return std::nullopt;
    }
    model->SetOpTimer(timer->get());
    fill_batch((warmup + steps) * lo.accum);
    const auto p0 = std::chrono::steady_clock::now();
    CHECK_OK((*timer)->Start(s));
    if (!train_step(warmup + steps, timer->get())) return std::nullopt;
    (*timer)->Mark("(tail)", s);
    cudaStreamSynchronize(s);
    const double wall_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
    model->SetOpTimer(nullptr);
    int dropped = 0;
    auto totals = (*timer)->Finish(&dropped);
    if (!totals.ok()) {
      std::fprintf(stderr, "profile: %s\n", totals.status().message().c_str());
      return std::nullopt;
    }
    std::printf("profile: %s %s, one step after the timed ones (%.1f ms/step timed; %.1f ms wall for the profiled step)\n",
                sh.name.c_str(), RecipeName(recipe), r.ms_per_step, wall_ms);
    PrintStepProfile(*totals, dropped);
    if (recipe == Recipe::kFp8Blockwise) {
      const fp8::Status st = PrintLlamaFusionTimes(n, cfg.d_model, cfg.intermediate_size);
      if (!st.ok()) std::printf("  fusion timings failed: %s\n", st.message().c_str());
    }
  }
  if (recipe == Recipe::kBf16 && !model->EpilogueRefusals().empty())
    std::fprintf(stderr, "  %s bf16: GEMM epilogues cuBLASLt refused (run as separate passes): %s\n", sh.name.c_str(),
                 model->EpilogueRefusals().c_str());
  model.reset();
  cudaStreamDestroy(s);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes = "gpt2-124m,d4096-l8", recipes = "bf16,fp8-tensorwise,fp8-blockwise", data, json_path;
  std::string val;
  int steps = 10, warmup = 3, loss_window = 0, batch = 0;
  LossOptions lo;
  bool breakdown = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--shapes") shapes = next();
    else if (a == "--recipes") recipes = next();
    else if (a == "--steps") steps = std::atoi(next().c_str());
    else if (a == "--warmup") warmup = std::atoi(next().c_str());
    else if (a == "--data") data = next();
    else if (a == "--json") json_path = next();
    else if (a == "--loss-window") loss_window = std::atoi(next().c_str());
    else if (a == "--breakdown") breakdown = true;
    else if (a == "--profile") lo.profile = true;
    else if (a == "--batch") batch = std::atoi(next().c_str());
    else if (a == "--cosine") lo.cosine = true;
    else if (a == "--val") val = next();
    else if (a == "--eval-every") lo.eval_every = std::atoi(next().c_str());
    else if (a == "--eval-batches") lo.eval_batches = std::max(1, std::atoi(next().c_str()));
    else if (a == "--amax-history") lo.precision.amax_history_len = std::max(1, std::atoi(next().c_str()));
    else if (a == "--margin") lo.precision.margin = std::atoi(next().c_str());
    else if (a == "--amax-most-recent") lo.precision.amax_most_recent = true;
    else if (a == "--init-seed") lo.init_seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--accum") lo.accum = std::max(1, std::atoi(next().c_str()));
    else {
      std::fprintf(stderr, "usage: bench_trainer_cuda [--shapes a,b] [--recipes r,s] [--steps N] [--warmup N] [--data GLOB] [--json FILE] [--loss-window N] [--breakdown] [--profile] [--batch N] [--cosine] [--val GLOB] [--eval-every N] [--eval-batches M] [--amax-history N] [--margin N] [--amax-most-recent] [--init-seed N] [--accum N]\n");
      return 2;
    }
  }
  if (!CudaDeviceAvailable()) {
    std::printf("bench_trainer_cuda: no CUDA device, nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-10s %-15s %8s %10s %8s %8s %9s %10s %10s\n", "shape", "recipe", "params", "tokens/s", "MFU", "ms/step", "mem GiB",
              "loss@0", loss_window > 0 ? "loss@tail" : "loss@end");
  int failures = 0;
  for (const std::string& shape_name : Split(shapes)) {
    std::optional<Shape> sh;
    for (const Shape& s : kShapes)
      if (s.name == shape_name) sh = s;
    if (!sh) {
      std::fprintf(stderr, "unknown shape %s\n", shape_name.c_str());
      return 2;
    }
    if (batch > 0) sh->batch = batch;
    std::optional<fp8::data::TokenDataset> ds;
    if (!data.empty()) {
      auto loaded = fp8::data::TokenDataset::Load(data, sh->seq_len, sh->vocab);
      if (!loaded.ok()) {
        std::fprintf(stderr, "--data: %s\n", loaded.status().message().c_str());
        return 2;
      }
      ds = std::move(loaded).value();
    }
    std::optional<fp8::data::TokenDataset> val_ds;
    if (!val.empty()) {
      auto loaded = fp8::data::TokenDataset::Load(val, sh->seq_len, sh->vocab);
      if (!loaded.ok()) {
        std::fprintf(stderr, "--val: %s\n", loaded.status().message().c_str());
        return 2;
      }
      val_ds = std::move(loaded).value();
      lo.val = &*val_ds;
      std::fprintf(stderr, "%s: %lld train tokens, %lld val tokens\n", sh->name.c_str(),
                   static_cast<long long>(ds ? ds->num_tokens() : 0), static_cast<long long>(val_ds->num_tokens()));
    }
    for (const std::string& rname : Split(recipes)) {
      Recipe recipe = rname == "bf16" ? Recipe::kBf16 : rname == "fp8-tensorwise" ? Recipe::kFp8Tensorwise : Recipe::kFp8Blockwise;
      auto r = RunCase(*sh, recipe, warmup, steps, std::min(loss_window, warmup + steps), ds ? &*ds : nullptr, lo);
      if (!r) {
        std::printf("%-10s %-15s FAILED\n", sh->name.c_str(), rname.c_str());
        ++failures;
        continue;
      }
      const std::string label = lo.accum > 1 ? sh->name + "/acc" + std::to_string(lo.accum) : sh->name;
      std::printf("%-10s %-15s %7.2fB %10.0f %7.1f%% %8.1f %9.1f %10.4f %10.4f\n", label.c_str(), rname.c_str(), r->params / 1e9,
                  r->tokens_per_s, 100 * r->mfu, r->ms_per_step, r->mem_gib, r->loss_first,
                  loss_window > 0 ? r->loss_tail_mean : r->loss_last);
      std::fflush(stdout);
      if (breakdown && recipe == Recipe::kBf16 && sh->model.empty()) {
        ModelConfig cfg;
        cfg.n_layer = sh->n_layer, cfg.n_head = sh->n_head, cfg.d_model = sh->d_model;
        cfg.seq_len = sh->seq_len, cfg.vocab_size = sh->vocab;
        const fp8::Status st = PrintStepBreakdown(cfg, sh->batch, r->params, r->ms_per_step);
        if (!st.ok()) std::printf("  breakdown failed: %s\n", st.message().c_str());
        std::fflush(stdout);
      }
      rows.push_back({{"shape", sh->name}, {"recipe", rname}, {"params", r->params}, {"tokens_per_s", r->tokens_per_s},
                      {"mfu", r->mfu}, {"ms_per_step", r->ms_per_step}, {"mem_gib", r->mem_gib}, {"loss_first", r->loss_first},
                      {"loss_last", r->loss_last}, {"loss_tail_mean", r->loss_tail_mean}, {"loss_window", loss_window}, {"batch", sh->batch}, {"seq_len", sh->seq_len}, {"accum", lo.accum},
                      {"val_loss_final", r->val_loss_final}, {"val_losses", r->val_losses}});
    }
  }
  if (!json_path.empty()) {
    std::FILE* f = std::fopen(json_path.c_str(), "w");
    if (f) {
      std::fprintf(f, "%s\n", rows.dump(1).c_str());
      std::fclose(f);
    }
  }
  return failures ? 1 : 0;
}
