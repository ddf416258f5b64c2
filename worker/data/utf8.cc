// SPDX-License-Identifier: Apache-2.0
#include "worker/data/utf8.h"

namespace fp8::data {

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  const size_t n = s.size();
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < n) {
    const unsigned char b = byte(i);
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    }
    size_t len = 1;  // bytes of the maximal subpart seen so far
    bool ok = need > 0;
    for (size_t k = 0; ok && k < need; ++k) {
      const size_t at = i + 1 + k;
      const unsigned char l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
      if (at >= n || byte(at) < l || byte(at) > h) {
        ok = false;
        break;
      }
      ++len;
    }
    if (ok) {
      out.append(s.substr(i, len));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += len;
  }
  return out;
}

const std::array<std::string, 256>& ByteToUnicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    // Printable Latin-1 bytes map to themselves; the rest to 256, 257, ... in byte order.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      AppendUtf8(printable ? static_cast<char32_t>(b) : next++, &t[b]);
    }
    return t;
  }();
  return table;
}

}  // namespace fp8::data
