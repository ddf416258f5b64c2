// SPDX-License-Identifier: Apache-2.0
// CPU training throughput (tokens/s) of fp8-worker's trainer, per model size and recipe, on
// byte-level shards of the shipped corpus. Prints a Markdown table.
//
//   bench_trainer [--steps N] [--corpus data/corpus.txt]      (threads: FP8_NUM_THREADS)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "kernels/parallel.h"
#include "worker/common/events.h"
#include "worker/data/shards.h"
#include "worker/train/collective.h"
#include "worker/train/trainer.h"

using namespace fp8::train;

int main(int argc, char** argv) {
  int steps = 20;
  std::string corpus = FP8_BENCH_CORPUS;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--corpus") corpus = argv[i + 1];
  }
  char tmpl[] = "/tmp/fp8-bench-trainer-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  auto prep = fp8::data::PrepareByteData(corpus, dir + "/data");
  if (!prep.ok()) {
    std::fprintf(stderr, "%s\n", prep.status().ToString().c_str());
    return 1;
  }
  struct Size { const char* name; int layers, heads, d_model, seq_len, batch; };
  const Size sizes[] = {{"tiny (L2 C128 T64, 0.44M)", 2, 4, 128, 64, 8},
                        {"small (L4 C256 T128, 3.3M)", 4, 8, 256, 128, 8}};
  const Recipe recipes[] = {Recipe::kFp32, Recipe::kBf16, Recipe::kFp8Tensorwise, Recipe::kFp8Blockwise};
  std::printf("threads %d, %d steps per run\n\n", fp8::kernels::NumThreads(), steps);
  std::printf("| model | batch | recipe | tokens/s | ms/step | final loss |\n|---|---|---|---|---|---|\n");
  for (const Size& s : sizes) {
    for (Recipe r : recipes) {
      TrainSpec spec = DefaultTrainSpec();
      spec.model.preset = "tiny";
      spec.model.n_layer = s.layers;
      spec.model.n_head = s.heads;
      spec.model.d_model = s.d_model;
      spec.model.seq_len = s.seq_len;
      spec.model.vocab_size = 256;
      spec.data.train = dir + "/data/train_*.bin";
      spec.precision.recipe = r;
      spec.training.max_steps = steps;
      spec.training.per_device_train_batch_size = s.batch;
      spec.training.logging_steps = 1000000;
      spec.training.save_steps = 1000000;
      spec.output_dir = dir + "/out";
      std::FILE* sink = std::tmpfile();
      fp8::worker::EventWriter events(sink);
      auto coll = MakeSingleProcessCollective();
      TrainOptions opts;
      opts.heartbeat_ms = 0;
      const auto t0 = std::chrono::steady_clock::now();
      TrainResult res = RunTraining(spec, opts, *coll, events);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fclose(sink);
      const double tokens = static_cast<double>(steps) * s.batch * s.seq_len;
      std::printf("| %s | %d | %s | %.0f | %.1f | %.3f |\n", s.name, s.batch, RecipeName(r), tokens / secs,
                  1000.0 * secs / steps, res.losses.empty() ? 0.0 : res.losses.back());
      std::fflush(stdout);
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}
