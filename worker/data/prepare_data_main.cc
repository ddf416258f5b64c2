// SPDX-License-Identifier: Apache-2.0
#include "worker/data/prepare_data_main.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/common/events.h"
#include "worker/data/shards.h"
#include "worker/data/tokenizer.h"
#include "worker/data/tokenizer_files.h"

namespace fp8::data {
namespace {

constexpr const char* kUsage =
    "usage: fp8-worker prepare-data --text FILE --out DIR [--val-fraction 0.1]\n"
    "                               [--tokenizer DIR|tokenizer.json [--doc-separator STR] [--eos TOKEN]]\n";

// "\n", "\t" and "\\" in a command-line separator, so a blank line can be written '\n\n'.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The eos_token of the tokenizer_config.json beside the tokenizer, if there is one.
std::string ConfigEosToken(const std::string& tokenizer_file) {
  std::ifstream in(std::filesystem::path(tokenizer_file).parent_path() / kTokenizerConfigJson);
  if (!in) return "";
  auto j = nlohmann::json::parse(in, nullptr, false);
  return j.is_discarded() ? "" : ConfigToken(j, "eos_token");
}

int Fail(const Status& s, int code) {
  std::fprintf(stderr, "fp8-worker prepare-data: %s\n", s.message().c_str());
  return code;
}

int ExitCodeOf(const Status& s) {
  return s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kNotFound ? worker::kExitBadData
                                                                                  : worker::kExitInternal;
}

int PrepareTokenized(const std::string& text_path, const std::string& out, double val_fraction,
                     const std::string& tokenizer_path, const std::optional<std::string>& separator,
                     std::string eos) {
  auto tok = BpeTokenizer::Load(tokenizer_path);
  if (!tok.ok()) return Fail(tok.status(), worker::kExitBadData);
  BpeTokenizer& t = **tok;
  std::optional<uint32_t> eos_id;
  if (separator) {
    if (separator->empty()) return Fail(InvalidArgumentError("--doc-separator: empty"), worker::kExitInvalidSpec);
    if (eos.empty()) eos = ConfigEosToken(t.path());
    if (eos.empty())
      return Fail(InvalidArgumentError("--doc-separator needs the EOS token: pass --eos TOKEN (no eos_token in a "
                                       "tokenizer_config.json beside " + t.path() + ")"),
                  worker::kExitBadData);
    eos_id = t.TokenId(eos);
    if (!eos_id) return Fail(InvalidArgumentError(t.path() + ": EOS token \"" + eos + "\" is not in it"), worker::kExitBadData);
  }
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return Fail(NotFoundError("cannot open text file " + text_path), worker::kExitBadData);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint32_t> tokens;
  int64_t docs = 0;
  for (size_t at = 0;;) {
    const size_t end = separator ? std::min(text.find(*separator, at), text.size()) : text.size();
    if (docs++ > 0) tokens.push_back(*eos_id);
    t.Encode(std::string_view(text).substr(at, end - at), &tokens);
    if (end == text.size()) break;
    at = end + separator->size();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto r = WriteTrainValShards(tokens, t.vocab_size(), out, val_fraction);
  if (!r.ok()) return Fail(Status(r.status().code(), text_path + ": " + r.status().message()), ExitCodeOf(r.status()));
  // The tokenizer beside its shards, so an export of a model trained on them carries it.
  if (Status s = RecordTokenizer(t.path(), eos_id ? eos : "", out); !s.ok()) {
    std::error_code ec;
    std::filesystem::remove(r->train_path, ec);
    std::filesystem::remove(r->val_path, ec);
    return Fail(s, s.code() == StatusCode::kInvalidArgument ? worker::kExitInvalidSpec : ExitCodeOf(s));
  }
  std::fprintf(stderr,
               "fp8-worker prepare-data: %lld documents, %lld tokens in %.3f s (%.0f tokens/s); %lld train tokens → %s, "
               "%lld val tokens → %s (vocab %lld, %s tokens)\n",
               static_cast<long long>(docs), static_cast<long long>(tokens.size()), secs,
               secs > 0 ? static_cast<double>(tokens.size()) / secs : 0.0, static_cast<long long>(r->train_tokens),
               r->train_path.c_str(), static_cast<long long>(r->val_tokens), r->val_path.c_str(),
               static_cast<long long>(t.vocab_size()), t.vocab_size() <= 65536 ? "uint16" : "uint32");
  return 0;
}

}  // namespace

int PrepareDataMain(int argc, char** argv) {
  std::string text, out, tokenizer, eos;
  std::optional<std::string> separator;
  double val_fraction = 0.1;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--text" && has_value) text = argv[++i];
    else if (a == "--out" && has_value) out = argv[++i];
    else if (a == "--val-fraction" && has_value) val_fraction = std::atof(argv[++i]);
    else if (a == "--tokenizer" && has_value) tokenizer = argv[++i];
    else if (a == "--doc-separator" && has_value) separator = Unescape(argv[++i]);
    else if (a == "--eos" && has_value) eos = argv[++i];
    else {
      std::fprintf(stderr, "%s", kUsage);
      return worker::kExitInvalidSpec;
    }
  }
  if (text.empty() || out.empty() || !(val_fraction > 0 && val_fraction < 0.9) ||
      (tokenizer.empty() && (separator || !eos.empty()))) {
    std::fprintf(stderr, "%s", kUsage);
    return worker::kExitInvalidSpec;
  }
  if (!tokenizer.empty()) return PrepareTokenized(text, out, val_fraction, tokenizer, separator, eos);
  // Byte shards beside a tokenizer.json would pass for that tokenizer's ids in an export.
  if (std::error_code ec; std::filesystem::exists(std::filesystem::path(out) / kTokenizerJson, ec))
    return Fail(InvalidArgumentError("--out " + out + " holds a " + kTokenizerJson +
                                     " (from a --tokenizer run?), which byte-level shards there would be taken for; "
                                     "remove it or write elsewhere"),
                worker::kExitInvalidSpec);

  auto r = PrepareByteData(text, out, val_fraction);
  if (!r.ok()) return Fail(r.status(), ExitCodeOf(r.status()));
  std::fprintf(stderr, "fp8-worker prepare-data: %lld train tokens → %s, %lld val tokens → %s (vocab 256)\n",
               static_cast<long long>(r->train_tokens), r->train_path.c_str(), static_cast<long long>(r->val_tokens),
               r->val_path.c_str());
  return 0;
}

}  // namespace fp8::data
