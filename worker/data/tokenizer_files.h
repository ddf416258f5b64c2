// SPDX-License-Identifier: Apache-2.0
// The tokenizer files that travel with token shards and from them into a Hugging Face export:
// `prepare-data --tokenizer` records the tokenizer it encoded with beside the shards it writes,
// and `export: hf` / `fp8-worker export` copy those files into the export, so an exported model
// comes with the tokenizer its ids are from. Shards without these files are byte tokens (or
// ids from elsewhere): their exports have no tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace fp8::data {

inline constexpr const char* kTokenizerJson = "tokenizer.json";
inline constexpr const char* kTokenizerConfigJson = "tokenizer_config.json";
// tokenizer.json (required), then the side files Hugging Face loaders read when present; the
// names transformers writes.
inline constexpr std::array<const char*, 3> kTokenizerFiles = {kTokenizerJson, kTokenizerConfigJson,
                                                               "special_tokens_map.json"};

// The text of a token a tokenizer_config.json names under `key` ("eos_token", "bos_token": a
// string or an AddedToken object with "content"); "" when it names none.
std::string ConfigToken(const nlohmann::json& tokenizer_config, const std::string& key);

// Records in `out_dir` the tokenizer whose tokenizer.json is `tokenizer_json`: that file as
// tokenizer.json and the side files beside it, byte for byte, each written under a temporary
// name and renamed; side files it lacks are removed from `out_dir`, so no earlier run's are
// left. `eos`, when not empty and not the eos_token of its tokenizer_config.json (prepare-data's
// --eos, the token put between documents), becomes the recorded tokenizer_config.json's
// eos_token (a config of only that when there is none). An `out_dir` that is the tokenizer's own
// directory is left as it is; asking it to name another eos there is InvalidArgument.
Status RecordTokenizer(const std::string& tokenizer_json, const std::string& eos, const std::string& out_dir);

// A tokenizer recorded in a directory.
struct TokenizerFiles {
  std::string dir;
  std::vector<std::string> names;  // the files of kTokenizerFiles it holds, in that order
  int64_t vocab_size = 0;          // one more than the tokenizer's largest id
  // The ids of tokenizer_config.json's bos_token and eos_token, when it names them.
  std::optional<uint32_t> bos_id, eos_id;
};

// The tokenizer files in `dir`; nullopt when it has no tokenizer.json. DataLoss naming the file
// when one cannot be read, or tokenizer_config.json names a token the tokenizer does not have;
// InvalidArgument when the tokenizer.json is not one fp8d reads.
StatusOr<std::optional<TokenizerFiles>> ReadTokenizerFiles(const std::string& dir);

// What the export of a model trained on the shards of a data glob gets: the tokenizer recorded
// beside them, when every shard's directory holds the same one (byte for byte) and it has no
// more ids than the model's vocab_size. Otherwise `files` is empty, and `note` says why when
// some directory holds a tokenizer (the directories differ, the files cannot be read, the
// vocabulary is too large): the export then has none, which is not an error. Shards of byte
// tokens: neither. NotFound when the glob matches nothing.
struct ShardTokenizer {
  std::optional<TokenizerFiles> files;
  std::string note;
};
StatusOr<ShardTokenizer> FindShardTokenizer(const std::string& glob, int64_t model_vocab_size);

// FailedPrecondition naming the tokenizer when it has ids the model has no embedding for.
Status CheckTokenizerFitsVocab(const TokenizerFiles& files, int64_t model_vocab_size);

// Copies the files into `to_dir` (which exists), each atomically.
Status CopyTokenizerFiles(const TokenizerFiles& files, const std::string& to_dir);

}  // namespace fp8::data
