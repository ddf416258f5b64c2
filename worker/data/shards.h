// SPDX-License-Identifier: Apache-2.0
// llm.c token shards (the format fp8d trains on) and deterministic batch sampling.
//
// Shard layout: a header of 256 little-endian int32 — [0] magic, [1] version, [2] number of
// tokens — then that many tokens: uint16 for magic 20240520 / version 1 (vocabularies up to
// 65,536), uint32 for magic 20240801 / version 7 (llm.c's Llama-3 shards).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8::data {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int32_t kShard32Magic = 20240801;
constexpr int32_t kShard32Version = 7;
constexpr int kShardHeaderInts = 256;

// The token type picks the format. Both write under a temporary name and rename, so a failed
// write leaves no file at `path`.
Status WriteShard(const std::string& path, const std::vector<uint16_t>& tokens);
Status WriteShard(const std::string& path, const std::vector<uint32_t>& tokens);
// Reads a whole uint16 shard; DataLoss for a bad header (a uint32 shard too) or a truncated file.
StatusOr<std::vector<uint16_t>> ReadShard(const std::string& path);
// Reads a shard of either kind.
StatusOr<std::vector<uint32_t>> ReadAnyShard(const std::string& path);

// Sorted list of files matching a shell glob; NotFound when nothing matches.
StatusOr<std::vector<std::string>> ExpandGlob(const std::string& pattern);

// All shards of one split, in memory (the corpora fp8d trains on the CPU are small; a GPU
// backend would mmap instead). Sampling is a pure function of (seed, sample index), so a resumed
// run and a run with a different rank layout see exactly the same sequences.
class TokenDataset {
 public:
  // Loads every shard matching `glob`; DataLoss/NotFound name the file. Each shard must hold at
  // least seq_len + 1 tokens; token ids must be < vocab_size.
  static StatusOr<TokenDataset> Load(const std::string& glob, int seq_len, int vocab_size);

  // Writes seq_len inputs and seq_len targets (inputs shifted by one) of the sequence with
  // global index `sample` drawn with `seed`.
  void Sample(uint64_t seed, uint64_t sample, int32_t* inputs, int32_t* targets) const;

  int64_t num_tokens() const { return total_tokens_; }
  size_t num_shards() const { return shards_.size(); }

 private:
  int seq_len_ = 0;
  std::vector<std::vector<uint32_t>> shards_;
  std::vector<int64_t> start_cumsum_;  // prefix sums of the number of valid start positions
  int64_t total_tokens_ = 0;
};

// splitmix64: the stateless hash every sampling decision is derived from.
uint64_t Mix64(uint64_t x);

// `prepare-data`: a token stream split into train and val shards in `out_dir` (train_000.bin,
// val_000.bin): the last `val_fraction` of the tokens (at least 512) is val. uint16 shards when
// every id fits (vocab_size <= 65,536), else uint32. DataLoss for fewer than 1024 tokens; on any
// failure neither shard is left behind.
struct PrepareDataResult {
  std::string train_path, val_path;
  int64_t train_tokens = 0, val_tokens = 0;
};
StatusOr<PrepareDataResult> WriteTrainValShards(const std::vector<uint32_t>& tokens, int64_t vocab_size,
                                                const std::string& out_dir, double val_fraction = 0.1);
// Byte-level tokens (vocab 256) of a text file.
StatusOr<PrepareDataResult> PrepareByteData(const std::string& text_path, const std::string& out_dir,
                                             double val_fraction = 0.1);

}  // namespace fp8::data
