// SPDX-License-Identifier: Apache-2.0
// Hugging Face byte-level BPE tokenizers (the GPT-2, Llama-3 and Qwen2 kind), read from their
// tokenizer.json and encoding text to the same ids as the `tokenizers` library's
// `encode(text, add_special_tokens=False)`.
//
// Supported: model BPE (merges as "a b" strings or [a, b] pairs, ignore_merges, unk_token,
// fuse_unk); added_tokens (split out before pre-tokenization, longest first); pre_tokenizer
// ByteLevel or Sequence[Split(regex, Isolated)..., ByteLevel]; no normalizer. Anything else is
// refused naming the field.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "worker/data/pre_tokenizer.h"

namespace fp8::data {

class BpeTokenizer {
 public:
  // `path`: a tokenizer.json, or a directory holding one. InvalidArgument naming the file and
  // the field for what is malformed or unsupported.
  static StatusOr<std::unique_ptr<BpeTokenizer>> Load(const std::string& path);

  // Appends the ids of `text`; ill-formed UTF-8 is read as the library's callers read it (each
  // maximal ill-formed subsequence one U+FFFD).
  void Encode(std::string_view text, std::vector<uint32_t>* out);

  // The id of a token (an added token's content, or a vocabulary entry in byte-level form).
  std::optional<uint32_t> TokenId(const std::string& token) const;
  // One more than the largest id.
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& path() const { return path_; }

  struct AddedToken {
    std::string content;
    uint32_t id = 0;
    bool normalized = true;
  };
  struct Merge {
    uint32_t rank = 0, new_id = 0;
  };

 private:
  BpeTokenizer() = default;
  // Pass 0 and 1 split `text` at the added tokens matched on raw text (normalized=false), then at
  // the others (no normalizer, so the same text); added tokens become ids in `out` and the text
  // between them goes on to the next pass. Pass 2 pre-tokenizes and runs BPE.
  void EncodeSegment(std::string_view text, int pass, std::vector<uint32_t>* out);
  void EncodePreToken(std::string_view bytes, std::vector<uint32_t>* out);
  void MergeWord(std::vector<uint32_t>* word) const;

  std::string path_;
  int64_t vocab_size_ = 0;
  // The vocabulary keyed by raw bytes (byte-level strings decoded); entries with characters
  // outside the byte alphabet cannot come out of a pre-token and are only in `token_ids_`.
  std::unordered_map<std::string, uint32_t> byte_vocab_;
  std::unordered_map<std::string, uint32_t> token_ids_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id)
  std::optional<uint32_t> byte_ids_[256];
  std::optional<uint32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  // Added tokens by first byte, longest first: [0] those matched on the raw text
  // (normalized=false), [1] those matched after normalization (the same text here).
  std::vector<const AddedToken*> added_by_byte_[2][256];
  std::deque<AddedToken> added_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unordered_map<std::string, std::vector<uint32_t>> cache_;
  // Per-call scratch, kept to reuse its memory.
  std::deque<std::string> arena_;
  std::vector<std::string_view> pieces_;
};

}  // namespace fp8::data
