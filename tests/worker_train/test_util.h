// SPDX-License-Identifier: Apache-2.0
// Shared by the trainer tests: token shards of the shipped corpus in a temporary directory, and
// a spec for the tiny model on them.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "worker/data/shards.h"
#include "worker/train/spec.h"

namespace fp8::train::testing {

inline std::string MakeTempDir(const std::string& tag) {
  std::string pattern = (std::filesystem::temp_directory_path() / ("fp8-trainer-" + tag + "-XXXXXX")).string();
  char* dir = ::mkdtemp(pattern.data());
  return dir ? std::string(dir) : std::string();
}

// The byte-level shards of data/corpus.txt, made once per test binary.
inline const std::string& CorpusShardDir() {
  static const std::string dir = [] {
    std::string d = MakeTempDir("data");
    auto r = data::PrepareByteData(FP8_TEST_CORPUS, d);
    if (!r.ok()) {
      std::fprintf(stderr, "prepare corpus: %s\n", r.status().ToString().c_str());
      std::abort();
    }
    return d;
  }();
  return dir;
}

inline TrainSpec TinySpec(Recipe recipe, int64_t steps, const std::string& output_dir) {
  TrainSpec s = DefaultTrainSpec();
  s.model.preset = "tiny";
  s.model.n_layer = 2;
  s.model.n_head = 4;
  s.model.d_model = 128;
  s.model.seq_len = 64;
  s.model.vocab_size = 256;
  s.data.train = CorpusShardDir() + "/train_*.bin";
  s.data.val = CorpusShardDir() + "/val_*.bin";
  s.precision.recipe = recipe;
  s.training.max_steps = steps;
  s.training.per_device_train_batch_size = 8;
  s.training.logging_steps = 1000000;
  s.training.eval_steps = 1000000;
  s.training.save_steps = 1000000;
  s.output_dir = output_dir;
  return s;
}

}  // namespace fp8::train::testing
