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

Status WriteShard(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(kShardHeaderInts, 0);
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return InvalidArgumentError("cannot create " + path + ": " + std::strerror(errno));
  bool ok = std::fwrite(header.data(), sizeof(int32_t), header.size(), f) == header.size() &&
            std::fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), f) == tokens.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return InternalError("write failed: " + path);
  return OkStatus();
}

StatusOr<std::vector<uint16_t>> ReadShard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open shard " + path);
  std::vector<int32_t> header(kShardHeaderInts);
  in.read(reinterpret_cast<char*>(header.data()), kShardHeaderInts * sizeof(int32_t));
  if (in.gcount() != static_cast<std::streamsize>(kShardHeaderInts * sizeof(int32_t)))
    return DataLossError(path + ": truncated header");
  if (header[0] != kShardMagic)
    return DataLossError(path + ": bad magic " + std::to_string(header[0]) + " (want 20240520)");
  if (header[1] != kShardVersion)
    return DataLossError(path + ": unsupported version " + std::to_string(header[1]));
  if (header[2] < 0) return DataLossError(path + ": negative token count");
  std::vector<uint16_t> tokens(static_cast<size_t>(header[2]));
  in.read(reinterpret_cast<char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
  if (in.gcount() != static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)))
    return DataLossError(path + ": truncated: header says " + std::to_string(header[2]) + " tokens");
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
    FP8_ASSIGN_OR_RETURN(std::vector<uint16_t> tokens, ReadShard(f));
    if (static_cast<int64_t>(tokens.size()) < seq_len + 1)
      return DataLossError(f + ": " + std::to_string(tokens.size()) + " tokens, need at least seq_len+1 = " +
                           std::to_string(seq_len + 1));
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] >= vocab_size)
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
  const uint16_t* t = shards_[s].data() + pos;
  for (int i = 0; i < seq_len_; ++i) {
    inputs[i] = t[i];
    targets[i] = t[i + 1];
  }
}

StatusOr<PrepareDataResult> PrepareByteData(const std::string& text_path, const std::string& out_dir,
                                             double val_fraction) {
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return NotFoundError("cannot open text file " + text_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() < 1024) return DataLossError(text_path + ": too short (" + std::to_string(text.size()) +
                                               " bytes, need at least 1024)");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return InvalidArgumentError("cannot create " + out_dir + ": " + ec.message());
  size_t n_val = static_cast<size_t>(static_cast<double>(text.size()) * val_fraction);
  n_val = std::max<size_t>(n_val, 512);
  const size_t n_train = text.size() - n_val;
  std::vector<uint16_t> train(n_train), val(n_val);
  for (size_t i = 0; i < n_train; ++i) train[i] = static_cast<unsigned char>(text[i]);
  for (size_t i = 0; i < n_val; ++i) val[i] = static_cast<unsigned char>(text[n_train + i]);
  PrepareDataResult r;
  r.train_path = (std::filesystem::path(out_dir) / "train_000.bin").string();
  r.val_path = (std::filesystem::path(out_dir) / "val_000.bin").string();
  FP8_RETURN_IF_ERROR(WriteShard(r.train_path, train));
  FP8_RETURN_IF_ERROR(WriteShard(r.val_path, val));
  r.train_tokens = static_cast<int64_t>(n_train);
  r.val_tokens = static_cast<int64_t>(n_val);
  return r;
}

}  // namespace fp8::data
