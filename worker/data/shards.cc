// SPDX-License-Identifier: Apache-2.0
#include "worker/data/shards.h"

#include <glob.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace fp8::data {

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace {

template <typename T>
Status WriteShardOf(const std::string& path, const std::vector<T>& tokens, int32_t magic, int32_t version) {
  std::vector<int32_t> header(kShardHeaderInts, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return InvalidArgumentError("cannot create " + tmp + ": " + std::strerror(errno));
  bool ok = std::fwrite(header.data(), sizeof(int32_t), header.size(), f) == header.size() &&
            std::fwrite(tokens.data(), sizeof(T), tokens.size(), f) == tokens.size();
  ok = (std::fclose(f) == 0) && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) return OkStatus();
  const std::string why = std::strerror(errno);
  std::remove(tmp.c_str());
  return InternalError("write failed: " + path + ": " + why);
}

// The header and the raw token bytes of a shard of either kind; `width` is 2 or 4.
struct RawShard {
  int width = 0;
  int64_t count = 0;
  std::string bytes;
};

StatusOr<RawShard> ReadRawShard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open shard " + path);
  std::vector<int32_t> header(kShardHeaderInts);
  in.read(reinterpret_cast<char*>(header.data()), kShardHeaderInts * sizeof(int32_t));
  if (in.gcount() != static_cast<std::streamsize>(kShardHeaderInts * sizeof(int32_t)))
    return DataLossError(path + ": truncated header");
  RawShard r;
  if (header[0] == kShardMagic) {
    if (header[1] != kShardVersion)
      return DataLossError(path + ": unsupported version " + std::to_string(header[1]) + " for magic 20240520");
    r.width = 2;
  } else if (header[0] == kShard32Magic) {
    if (header[1] != kShard32Version)
      return DataLossError(path + ": unsupported version " + std::to_string(header[1]) + " for magic 20240801");
    r.width = 4;
  } else {
    return DataLossError(path + ": bad magic " + std::to_string(header[0]) + " (want 20240520 or 20240801)");
  }
  if (header[2] < 0) return DataLossError(path + ": negative token count");
  r.count = header[2];
  r.bytes.resize(static_cast<size_t>(r.count) * r.width);
  in.read(r.bytes.data(), static_cast<std::streamsize>(r.bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(r.bytes.size()))
    return DataLossError(path + ": truncated: header says " + std::to_string(header[2]) + " tokens");
  return r;
}

}  // namespace

Status WriteShard(const std::string& path, const std::vector<uint16_t>& tokens) {
  return WriteShardOf(path, tokens, kShardMagic, kShardVersion);
}

Status WriteShard(const std::string& path, const std::vector<uint32_t>& tokens) {
  return WriteShardOf(path, tokens, kShard32Magic, kShard32Version);
}

StatusOr<std::vector<uint16_t>> ReadShard(const std::string& path) {
  FP8_ASSIGN_OR_RETURN(RawShard raw, ReadRawShard(path));
  if (raw.width != 2) return DataLossError(path + ": holds uint32 tokens (magic 20240801), not uint16");
  std::vector<uint16_t> tokens(static_cast<size_t>(raw.count));
  std::memcpy(tokens.data(), raw.bytes.data(), raw.bytes.size());
  return tokens;
}

StatusOr<std::vector<uint32_t>> ReadAnyShard(const std::string& path) {
  FP8_ASSIGN_OR_RETURN(RawShard raw, ReadRawShard(path));
  std::vector<uint32_t> tokens(static_cast<size_t>(raw.count));
  if (raw.width == 4) {
    std::memcpy(tokens.data(), raw.bytes.data(), raw.bytes.size());
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      uint16_t t;
      std::memcpy(&t, raw.bytes.data() + 2 * i, 2);
      tokens[i] = t;
    }
  }
  return tokens;
}

StatusOr<std::vector<std::string>> ExpandGlob(const std::string& pattern) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  if (out.empty()) return NotFoundError("no file matches '" + pattern + "'");
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<TokenDataset> TokenDataset::Load(const std::string& glob, int seq_len, int vocab_size) {
  FP8_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandGlob(glob));
  TokenDataset ds;
  ds.seq_len_ = seq_len;
  int64_t cum = 0;
  for (const std::string& f : files) {
    FP8_ASSIGN_OR_RETURN(std::vector<uint32_t> tokens, ReadAnyShard(f));
    if (static_cast<int64_t>(tokens.size()) < seq_len + 1)
      return DataLossError(f + ": " + std::to_string(tokens.size()) + " tokens, need at least seq_len+1 = " +
                           std::to_string(seq_len + 1));
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] >= static_cast<uint32_t>(vocab_size))
        return DataLossError(f + ": token " + std::to_string(tokens[i]) + " at " + std::to_string(i) +
                             " is >= vocab_size " + std::to_string(vocab_size));
    }
    ds.total_tokens_ += static_cast<int64_t>(tokens.size());
    cum += static_cast<int64_t>(tokens.size()) - seq_len;  // starts 0 .. n-seq_len-1
    ds.start_cumsum_.push_back(cum);
    ds.shards_.push_back(std::move(tokens));
  }
  return ds;
}

void TokenDataset::Sample(uint64_t seed, uint64_t sample, int32_t* inputs, int32_t* targets) const {
  const int64_t total = start_cumsum_.back();
  const uint64_t h = Mix64(Mix64(seed) ^ Mix64(sample + 0x5851f42d4c957f2dULL));
  int64_t pos = static_cast<int64_t>(h % static_cast<uint64_t>(total));
  size_t s = static_cast<size_t>(std::upper_bound(start_cumsum_.begin(), start_cumsum_.end(), pos) -
                                 start_cumsum_.begin());
  if (s > 0) pos -= start_cumsum_[s - 1];
  const uint32_t* t = shards_[s].data() + pos;
  for (int i = 0; i < seq_len_; ++i) {
    inputs[i] = static_cast<int32_t>(t[i]);
    targets[i] = static_cast<int32_t>(t[i + 1]);
  }
}

StatusOr<PrepareDataResult> WriteTrainValShards(const std::vector<uint32_t>& tokens, int64_t vocab_size,
                                                const std::string& out_dir, double val_fraction) {
  if (tokens.size() < 1024)
    return DataLossError("too few tokens (" + std::to_string(tokens.size()) + ", need at least 1024)");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return InvalidArgumentError("cannot create " + out_dir + ": " + ec.message());
  size_t n_val = static_cast<size_t>(static_cast<double>(tokens.size()) * val_fraction);
  n_val = std::max<size_t>(n_val, 512);
  const size_t n_train = tokens.size() - n_val;
  PrepareDataResult r;
  r.train_path = (std::filesystem::path(out_dir) / "train_000.bin").string();
  r.val_path = (std::filesystem::path(out_dir) / "val_000.bin").string();
  r.train_tokens = static_cast<int64_t>(n_train);
  r.val_tokens = static_cast<int64_t>(n_val);
  auto write = [&](const std::string& path, size_t from, size_t n) -> Status {
    if (vocab_size <= 65536)
      return WriteShard(path, std::vector<uint16_t>(tokens.begin() + from, tokens.begin() + from + n));
    return WriteShard(path, std::vector<uint32_t>(tokens.begin() + from, tokens.begin() + from + n));
  };
  FP8_RETURN_IF_ERROR(write(r.train_path, 0, n_train));
  if (Status s = write(r.val_path, n_train, n_val); !s.ok()) {
    std::filesystem::remove(r.train_path, ec);
    return s;
  }
  return r;
}

StatusOr<PrepareDataResult> PrepareByteData(const std::string& text_path, const std::string& out_dir,
                                             double val_fraction) {
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return NotFoundError("cannot open text file " + text_path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<uint32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  auto r = WriteTrainValShards(tokens, 256, out_dir, val_fraction);
  if (!r.ok() && r.status().code() == StatusCode::kDataLoss)
    return DataLossError(text_path + ": " + r.status().message());
  return r;
}

}  // namespace fp8::data
