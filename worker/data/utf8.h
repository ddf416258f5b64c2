// SPDX-License-Identifier: Apache-2.0
// UTF-8 helpers of the tokenizer: lossy decoding and GPT-2's byte-to-unicode map.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace fp8::data {

// `s` with every ill-formed UTF-8 sequence replaced by U+FFFD, one per maximal subpart (the
// WHATWG / Unicode §3.9 rule that Rust's from_utf8_lossy and Node's decoder follow, so the text
// the Hugging Face library sees and the text fp8-worker tokenizes are the same).
std::string SanitizeUtf8(std::string_view s);

// Byte length of the UTF-8 character starting with lead byte `b` (valid UTF-8 assumed).
inline size_t Utf8CharLen(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

// Appends code point `cp` as UTF-8.
void AppendUtf8(char32_t cp, std::string* out);

// GPT-2's bijection from bytes to printable code points, as UTF-8 strings: byte-level BPE
// vocabularies are written in these characters ("Ġ" is the space byte).
const std::array<std::string, 256>& ByteToUnicode();

}  // namespace fp8::data
