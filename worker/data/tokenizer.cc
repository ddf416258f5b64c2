// SPDX-License-Identifier: Apache-2.0
#include "worker/data/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <queue>

#include <nlohmann/json.hpp>

#include "worker/data/utf8.h"

namespace fp8::data {
namespace {

using nlohmann::json;

// Inverse of ByteToUnicode: the raw bytes of a byte-level string, or nullopt when it has a
// character outside the byte alphabet.
std::optional<std::string> ByteLevelToBytes(const std::string& s) {
  static const std::unordered_map<std::string, unsigned char> inverse = [] {
    std::unordered_map<std::string, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[ByteToUnicode()[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8CharLen(static_cast<unsigned char>(s[i]));
    auto it = inverse.find(s.substr(i, len));
    if (it == inverse.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
    i += len;
  }
  return out;
}

bool IsNullOr(const json& j, const char* key, const json& allowed) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() || *it == allowed;
}

bool FlagOf(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it == j.end() || !it->is_boolean() ? fallback : it->get<bool>();
}

// The pre_tokenizer steps; `field` names the JSON path for errors.
Status AddPreTokenizerSteps(const json& pt, const std::string& field, bool last, std::vector<PreTokenizerStep>* steps,
                            bool* byte_level) {
  if (!pt.is_object() || !pt.contains("type") || !pt["type"].is_string())
    return InvalidArgumentError(field + ": missing or not an object with a \"type\"");
  const std::string type = pt["type"];
  if (type == "Sequence") {
    if (!pt.contains("pretokenizers") || !pt["pretokenizers"].is_array())
      return InvalidArgumentError(field + ".pretokenizers: missing or not an array");
    const json& list = pt["pretokenizers"];
    for (size_t i = 0; i < list.size(); ++i)
      FP8_RETURN_IF_ERROR(AddPreTokenizerSteps(list[i], field + ".pretokenizers[" + std::to_string(i) + "]",
                                               last && i + 1 == list.size(), steps, byte_level));
    return OkStatus();
  }
  if (*byte_level) return InvalidArgumentError(field + ": only the last pre-tokenizer may be ByteLevel");
  if (type == "Split") {
    if (pt.value("behavior", "") != "Isolated")
      return InvalidArgumentError(field + ".behavior: only \"Isolated\" is supported");
    if (FlagOf(pt, "invert", false)) return InvalidArgumentError(field + ".invert: only false is supported");
    const json* pattern = pt.contains("pattern") ? &pt["pattern"] : nullptr;
    std::string regex;
    if (pattern && pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
      regex = (*pattern)["Regex"];
    } else if (pattern && pattern->contains("String") && (*pattern)["String"].is_string()) {
      regex = RE2::QuoteMeta((*pattern)["String"].get<std::string>());
    } else {
      return InvalidArgumentError(field + ".pattern: missing, or neither {\"Regex\": ...} nor {\"String\": ...}");
    }
    PreTokenizerStep step;
    FP8_ASSIGN_OR_RETURN(step.split, SplitRegex::Compile(regex, field + ".pattern"));
    steps->push_back(std::move(step));
    return OkStatus();
  }
  if (type == "ByteLevel") {
    if (!last) return InvalidArgumentError(field + ": ByteLevel must be the last pre-tokenizer");
    *byte_level = true;
    if (FlagOf(pt, "add_prefix_space", true)) steps->push_back(PreTokenizerStep{});
    if (FlagOf(pt, "use_regex", true)) {
      PreTokenizerStep step;
      FP8_ASSIGN_OR_RETURN(step.split, SplitRegex::Compile(kGpt2SplitPattern, field + " (the GPT-2 regex)"));
      steps->push_back(std::move(step));
    }
    return OkStatus();
  }
  return InvalidArgumentError(field + ".type: \"" + type +
                              "\" is not supported (ByteLevel, Split or a Sequence of them)");
}

StatusOr<uint32_t> IdOf(const json& v, const std::string& field) {
  if (!v.is_number_integer()) return InvalidArgumentError(field + ": id is not an integer");
  // Tokens reach the trainer as int32.
  if (v.is_number_unsigned() ? v.get<uint64_t>() > 0x7FFFFFFFull : v.get<int64_t>() < 0 || v.get<int64_t>() > 0x7FFFFFFFll)
    return InvalidArgumentError(field + ": id " + v.dump() + " does not fit a token (0 .. 2^31-1)");
  return static_cast<uint32_t>(v.get<int64_t>());
}

}  // namespace

StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Load(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "tokenizer.json").string();
  std::ifstream in(file);
  if (!in) return InvalidArgumentError("cannot open tokenizer " + file);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgumentError(file + ": not a JSON object");
  auto bad = [&](const std::string& m) { return InvalidArgumentError(file + ": " + m); };

  auto t = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
  t->path_ = file;
  if (!IsNullOr(j, "normalizer", nullptr))
    return bad("normalizer: " + j["normalizer"].value("type", std::string("?")) +
               " is not supported (only tokenizers without a normalizer)");

  if (!j.contains("model") || !j["model"].is_object()) return bad("model: missing or not an object");
  const json& model = j["model"];
  const std::string type = model.value("type", std::string(model.contains("merges") ? "BPE" : ""));
  if (type != "BPE") return bad("model.type: \"" + type + "\" is not supported (only BPE)");
  if (!IsNullOr(model, "dropout", 0.0) && !IsNullOr(model, "dropout", 0))
    return bad("model.dropout: only null is supported");
  if (!IsNullOr(model, "continuing_subword_prefix", "") || !IsNullOr(model, "end_of_word_suffix", ""))
    return bad("model.continuing_subword_prefix / end_of_word_suffix: byte-level BPE has none");
  if (FlagOf(model, "byte_fallback", false)) return bad("model.byte_fallback: only false is supported");
  t->fuse_unk_ = FlagOf(model, "fuse_unk", false);
  t->ignore_merges_ = FlagOf(model, "ignore_merges", false);

  if (!model.contains("vocab") || !model["vocab"].is_object()) return bad("model.vocab: missing or not an object");
  std::vector<std::string> id_to_token;
  for (const auto& [token, v] : model["vocab"].items()) {
    FP8_ASSIGN_OR_RETURN(uint32_t id, IdOf(v, file + ": model.vocab[\"" + token + "\"]"));
    t->token_ids_[token] = id;
    t->vocab_size_ = std::max<int64_t>(t->vocab_size_, int64_t{id} + 1);
    if (auto bytes = ByteLevelToBytes(token)) t->byte_vocab_[*bytes] = id;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = t->byte_vocab_.find(std::string(1, static_cast<char>(b)));
    if (it != t->byte_vocab_.end()) t->byte_ids_[b] = it->second;
  }
  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string() || !t->token_ids_.contains(it->get<std::string>()))
      return bad("model.unk_token: " + it->dump() + " is not in model.vocab");
    t->unk_id_ = t->token_ids_[it->get<std::string>()];
  }

  if (!model.contains("merges") || !model["merges"].is_array()) return bad("model.merges: missing or not an array");
  const json& merges = model["merges"];
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    std::string a, b;
    const json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m;
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return bad(field + ": \"" + s + "\" is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0];
      b = m[1];
    } else {
      return bad(field + ": neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto ia = t->token_ids_.find(a), ib = t->token_ids_.find(b), ic = t->token_ids_.find(a + b);
    if (ia == t->token_ids_.end() || ib == t->token_ids_.end() || ic == t->token_ids_.end())
      return bad(field + ": \"" + (ia == t->token_ids_.end() ? a : ib == t->token_ids_.end() ? b : a + b) +
                 "\" is not in model.vocab");
    t->merges_[(uint64_t{ia->second} << 32) | ib->second] = Merge{static_cast<uint32_t>(i), ic->second};
  }

  // Added tokens get their ids as the library gives them (the model's id for a token already in
  // the vocabulary, else the next one after the model's); an id in the file that differs is refused.
  const uint32_t model_size = static_cast<uint32_t>(model["vocab"].size());
  std::unordered_map<std::string, uint32_t> added_ids;
  std::optional<uint32_t> max_added;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) return bad("added_tokens: not an array");
    const json& list = j["added_tokens"];
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      const json& a = list[i];
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id"))
        return bad(field + ": needs \"id\" and \"content\"");
      for (const char* flag : {"single_word", "lstrip", "rstrip"})
        if (FlagOf(a, flag, false)) return bad(field + "." + flag + ": only false is supported");
      AddedToken tok;
      tok.content = a["content"];
      tok.normalized = FlagOf(a, "normalized", true);
      if (tok.content.empty() || added_ids.contains(tok.content)) continue;  // as the library: ignored
      FP8_ASSIGN_OR_RETURN(uint32_t file_id, IdOf(a["id"], file + ": " + field + ".id"));
      auto in_vocab = t->token_ids_.find(tok.content);
      tok.id = in_vocab != t->token_ids_.end() ? in_vocab->second
               : !max_added                    ? model_size
               : (*max_added >= model_size || model_size == 0) ? *max_added + 1
                                                               : model_size;
      if (tok.id != file_id)
        return bad(field + ".id: " + std::to_string(file_id) + " for \"" + tok.content + "\", but the library gives it " +
                   std::to_string(tok.id));
      added_ids[tok.content] = tok.id;
      max_added = std::max(max_added.value_or(0), tok.id);
      t->vocab_size_ = std::max<int64_t>(t->vocab_size_, int64_t{tok.id} + 1);
      t->added_.push_back(tok);
    }
  }
  for (const AddedToken& tok : t->added_) {
    t->token_ids_[tok.content] = tok.id;
    t->added_by_byte_[tok.normalized ? 1 : 0][static_cast<unsigned char>(tok.content[0])].push_back(&tok);
  }
  for (auto& kind : t->added_by_byte_)
    for (auto& list : kind)
      std::stable_sort(list.begin(), list.end(),
                       [](const AddedToken* x, const AddedToken* y) { return x->content.size() > y->content.size(); });

  if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null())
    return bad("pre_tokenizer: missing (byte-level BPE needs ByteLevel)");
  std::vector<PreTokenizerStep> steps;
  bool byte_level = false;
  if (Status s = AddPreTokenizerSteps(j["pre_tokenizer"], "pre_tokenizer", true, &steps, &byte_level); !s.ok())
    return bad(s.message());
  if (!byte_level) return bad("pre_tokenizer: has no ByteLevel step (only byte-level BPE is supported)");
  t->pre_tokenizer_ = std::make_unique<PreTokenizer>(std::move(steps));
  return t;
}

std::optional<uint32_t> BpeTokenizer::TokenId(const std::string& token) const {
  auto it = token_ids_.find(token);
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

void BpeTokenizer::Encode(std::string_view text, std::vector<uint32_t>* out) {
  const std::string clean = SanitizeUtf8(text);
  EncodeSegment(clean, 0, out);
}

void BpeTokenizer::EncodeSegment(std::string_view text, int pass, std::vector<uint32_t>* out) {
  if (text.empty()) return;
  if (pass == 2) {
    arena_.clear();
    pieces_.clear();
    pre_tokenizer_->Run(text, &arena_, &pieces_);
    for (std::string_view piece : pieces_) EncodePreToken(piece, out);
    return;
  }
  // Leftmost-longest matching, as the library's Aho-Corasick automaton does.
  const auto& table = added_by_byte_[pass];
  size_t last = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    for (const AddedToken* tok : table[static_cast<unsigned char>(text[i])]) {
      if (text.substr(i).starts_with(tok->content)) {
        EncodeSegment(text.substr(last, i - last), pass + 1, out);
        out->push_back(tok->id);
        i += tok->content.size() - 1;
        last = i + 1;
        break;
      }
    }
  }
  EncodeSegment(text.substr(last), pass + 1, out);
}

void BpeTokenizer::EncodePreToken(std::string_view bytes, std::vector<uint32_t>* out) {
  if (bytes.empty()) return;
  const std::string key(bytes);
  if (ignore_merges_) {
    if (auto it = byte_vocab_.find(key); it != byte_vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (auto it = cache_.find(key); it != cache_.end()) {
    out->insert(out->end(), it->second.begin(), it->second.end());
    return;
  }
  // A byte missing from the vocabulary becomes unk_token (runs of them one, with fuse_unk), or
  // is dropped when there is none, as the library does.
  std::vector<uint32_t> word;
  bool last_unk = false;
  for (char c : bytes) {
    const auto& id = byte_ids_[static_cast<unsigned char>(c)];
    if (id) {
      word.push_back(*id);
      last_unk = false;
    } else if (unk_id_) {
      if (!(last_unk && fuse_unk_)) word.push_back(*unk_id_);
      last_unk = true;
    }
  }
  MergeWord(&word);
  out->insert(out->end(), word.begin(), word.end());
  // Bounded: a huge corpus of unique pre-tokens must not grow it without end.
  if (cache_.size() < (1u << 20)) cache_.emplace(key, std::move(word));
}

void BpeTokenizer::MergeWord(std::vector<uint32_t>* word) const {
  // The library's Word::merge_all: a heap of candidate merges, lowest rank then leftmost first;
  // stale entries (a side already merged away) are skipped.
  struct Symbol {
    uint32_t id;
    int prev, next;
    bool alive;
  };
  struct Candidate {
    uint32_t rank;
    int pos;
    uint32_t new_id;
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int n = static_cast<int>(word->size());
  if (n < 2) return;
  std::vector<Symbol> sym(n);
  for (int i = 0; i < n; ++i) sym[i] = Symbol{(*word)[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  auto find = [&](uint32_t a, uint32_t b) -> const Merge* {
    auto it = merges_.find((uint64_t{a} << 32) | b);
    return it == merges_.end() ? nullptr : &it->second;
  };
  std::priority_queue<Candidate> queue;
  for (int i = 0; i + 1 < n; ++i)
    if (const Merge* m = find(sym[i].id, sym[i + 1].id)) queue.push({m->rank, i, m->new_id});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& s = sym[top.pos];
    if (!s.alive || s.next < 0) continue;
    const Merge* current = find(s.id, sym[s.next].id);
    if (!current || current->new_id != top.new_id) continue;
    const int right = s.next;
    s.id = top.new_id;
    sym[right].alive = false;
    s.next = sym[right].next;
    if (s.next >= 0) sym[s.next].prev = top.pos;
    if (s.prev >= 0)
      if (const Merge* m = find(sym[s.prev].id, s.id)) queue.push({m->rank, s.prev, m->new_id});
    if (s.next >= 0)
      if (const Merge* m = find(s.id, sym[s.next].id)) queue.push({m->rank, top.pos, m->new_id});
  }
  word->clear();
  for (int i = 0; i >= 0; i = sym[i].next) word->push_back(sym[i].id);
}

}  // namespace fp8::data
