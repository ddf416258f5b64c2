// SPDX-License-Identifier: Apache-2.0
#include "worker/data/tokenizer_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "worker/data/shards.h"
#include "worker/data/tokenizer.h"
#include "worker/safetensors/safetensors.h"

namespace fp8::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

StatusOr<std::string> Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return DataLossError(p.string() + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLossError(p.string() + ": cannot be read");
  return ss.str();
}

bool IsFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

template <typename Json>
std::string TokenOf(const Json& config, const std::string& key) {
  if (!config.is_object() || !config.contains(key)) return "";
  const auto& e = config[key];
  if (e.is_string()) return e.template get<std::string>();
  if (e.is_object() && e.contains("content") && e["content"].is_string()) return e["content"].template get<std::string>();
  return "";
}

}  // namespace

std::string ConfigToken(const json& tokenizer_config, const std::string& key) { return TokenOf(tokenizer_config, key); }

Status RecordTokenizer(const std::string& tokenizer_json, const std::string& eos, const std::string& out_dir) {
  fs::path from = fs::path(tokenizer_json).parent_path();
  if (from.empty()) from = ".";
  std::vector<std::pair<std::string, std::string>> files;  // name, contents
  FP8_ASSIGN_OR_RETURN(std::string tokenizer, Slurp(tokenizer_json));
  files.emplace_back(kTokenizerJson, std::move(tokenizer));
  for (size_t i = 1; i < kTokenizerFiles.size(); ++i) {
    if (!IsFile(from / kTokenizerFiles[i])) continue;
    FP8_ASSIGN_OR_RETURN(std::string text, Slurp(from / kTokenizerFiles[i]));
    files.emplace_back(kTokenizerFiles[i], std::move(text));
  }
  // The document separator the model learns is its end of text: the export's eos_token.
  bool eos_changed = false;
  if (!eos.empty()) {
    auto config_it = std::find_if(files.begin(), files.end(), [](const auto& f) { return f.first == kTokenizerConfigJson; });
    // ordered_json keeps the user's field order in the rewritten file.
    nlohmann::ordered_json config = nlohmann::ordered_json::object();
    if (config_it != files.end()) {
      config = nlohmann::ordered_json::parse(config_it->second, nullptr, /*allow_exceptions=*/false);
      if (config.is_discarded() || !config.is_object())
        return DataLossError((from / kTokenizerConfigJson).string() + ": not a JSON object");
    }
    if (TokenOf(config, "eos_token") != eos) {
      eos_changed = true;
      config["eos_token"] = eos;
      const std::string text = config.dump(2) + "\n";
      if (config_it != files.end()) config_it->second = text;
      else files.emplace_back(kTokenizerConfigJson, text);
    }
  }
  std::error_code ec;
  if (fs::exists(out_dir, ec) && fs::equivalent(from, out_dir, ec)) {
    if (eos_changed)
      return InvalidArgumentError(out_dir + " holds the tokenizer itself, whose " + kTokenizerConfigJson +
                                  " does not name --eos \"" + eos + "\" as its eos_token: write the shards elsewhere");
    return OkStatus();
  }
  for (const auto& [name, text] : files)
    FP8_RETURN_IF_ERROR(safetensors::WriteFileAtomically((fs::path(out_dir) / name).string(), text));
  for (const char* name : kTokenizerFiles) {
    const bool written = std::any_of(files.begin(), files.end(), [&](const auto& f) { return f.first == name; });
    if (!written) fs::remove(fs::path(out_dir) / name, ec);
  }
  return OkStatus();
}

StatusOr<std::optional<TokenizerFiles>> ReadTokenizerFiles(const std::string& dir) {
  const fs::path d(dir);
  if (!IsFile(d / kTokenizerJson)) return std::optional<TokenizerFiles>();
  TokenizerFiles files;
  files.dir = dir;
  for (const char* name : kTokenizerFiles)
    if (IsFile(d / name)) files.names.push_back(name);
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> tokenizer, BpeTokenizer::Load((d / kTokenizerJson).string()));
  files.vocab_size = tokenizer->vocab_size();
  if (IsFile(d / kTokenizerConfigJson)) {
    const std::string path = (d / kTokenizerConfigJson).string();
    FP8_ASSIGN_OR_RETURN(std::string text, Slurp(path));
    const json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) return DataLossError(path + ": not a JSON object");
    auto id_of = [&](const char* key, std::optional<uint32_t>* id) -> Status {
      const std::string token = ConfigToken(config, key);
      if (token.empty()) return OkStatus();
      *id = tokenizer->TokenId(token);
      if (!*id) return DataLossError(path + ": " + key + " \"" + token + "\" is not a token of " + kTokenizerJson);
      return OkStatus();
    };
    FP8_RETURN_IF_ERROR(id_of("bos_token", &files.bos_id));
    FP8_RETURN_IF_ERROR(id_of("eos_token", &files.eos_id));
  }
  return std::optional<TokenizerFiles>(std::move(files));
}

StatusOr<ShardTokenizer> FindShardTokenizer(const std::string& glob, int64_t model_vocab_size) {
  FP8_ASSIGN_OR_RETURN(std::vector<std::string> shards, ExpandGlob(glob));
  std::vector<std::string> dirs;
  for (const std::string& s : shards) {
    std::string dir = fs::path(s).parent_path().string();
    if (dir.empty()) dir = ".";
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
  }
  // Each directory's tokenizer files by name and contents; a directory without a tokenizer.json has none.
  auto contents = [](const std::string& dir) {
    std::vector<std::pair<std::string, std::optional<std::string>>> files;
    if (!IsFile(fs::path(dir) / kTokenizerJson)) return files;
    for (const char* name : kTokenizerFiles) {
      if (!IsFile(fs::path(dir) / name)) continue;
      auto text = Slurp(fs::path(dir) / name);
      files.emplace_back(name, text.ok() ? std::optional<std::string>(std::move(text).value()) : std::nullopt);
    }
    return files;
  };
  ShardTokenizer out;
  const auto first = contents(dirs[0]);
  bool same = true;
  for (size_t i = 1; i < dirs.size() && same; ++i) same = contents(dirs[i]) == first;
  if (!same) {
    std::string list;
    for (const std::string& d : dirs) list += (list.empty() ? "" : ", ") + d;
    out.note = "its shards lie in " + std::to_string(dirs.size()) + " directories (" + list +
               ") that do not hold the same tokenizer files";
    return out;
  }
  auto files = ReadTokenizerFiles(dirs[0]);
  if (!files.ok()) {
    out.note = files.status().message();
  } else if (*files) {
    if (Status s = CheckTokenizerFitsVocab(**files, model_vocab_size); !s.ok()) out.note = s.message();
    else out.files = std::move(*files);
  }
  return out;
}

Status CheckTokenizerFitsVocab(const TokenizerFiles& files, int64_t model_vocab_size) {
  if (files.vocab_size <= model_vocab_size) return OkStatus();
  return FailedPreconditionError((fs::path(files.dir) / kTokenizerJson).string() + " has " +
                                 std::to_string(files.vocab_size) + " ids, more than the model's vocab_size " +
                                 std::to_string(model_vocab_size));
}

Status CopyTokenizerFiles(const TokenizerFiles& files, const std::string& to_dir) {
  for (const std::string& name : files.names) {
    FP8_ASSIGN_OR_RETURN(std::string text, Slurp(fs::path(files.dir) / name));
    FP8_RETURN_IF_ERROR(safetensors::WriteFileAtomically((fs::path(to_dir) / name).string(), text));
  }
  return OkStatus();
}

}  // namespace fp8::data
