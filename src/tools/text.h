// Text helpers of the `pmhash` tool: sizes with K/M/G suffixes, hex, escaping for
// line-oriented output. Header-only so that src/tools/cli_test.cc can test them directly
// (the tool's .cc files are not part of the library).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace pmhash::tools {

// Parses "4096", "512K", "256M", "4G", "1T" (binary multiples; a trailing "B" or "iB"
// and lower case are accepted: "256MiB", "64k"). False on anything else, on zero and on
// overflow; *error then says why.
inline bool ParseSize(std::string_view text, uint64_t* bytes, std::string* error) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    const uint64_t digit = text[i] - '0';
    if (v > (UINT64_MAX - digit) / 10) {
      *error = "size '" + std::string(text) + "' is too large";
      return false;
    }
    v = v * 10 + digit;
    ++i;
  }
  if (i == 0) {
    *error = "invalid size '" + std::string(text) +
             "': expected a number with an optional K, M, G or T suffix (e.g. 256M)";
    return false;
  }
  std::string_view suffix = text.substr(i);
  unsigned shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 't': case 'T': shift = 40; break;
      case 'b': case 'B': shift = 0; break;
      default: shift = 64;  // invalid
    }
    std::string_view rest = suffix.substr(1);
    const bool unit_ok = shift == 0 ? rest.empty()
                                    : (rest.empty() || rest == "B" || rest == "b" ||
                                       rest == "iB" || rest == "ib");
    if (shift == 64 || !unit_ok) {
      *error = "invalid size '" + std::string(text) +
               "': expected a number with an optional K, M, G or T suffix (e.g. 256M)";
      return false;
    }
  }
  if (shift > 0 && v > (UINT64_MAX >> shift)) {
    *error = "size '" + std::string(text) + "' is too large";
    return false;
  }
  v <<= shift;
  if (v == 0) {
    *error = "size must be greater than zero";
    return false;
  }
  *bytes = v;
  return true;
}

// "256 MiB", "1.5 GiB", "4096 B": for humans, next to the exact byte count.
inline std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0 || v == static_cast<double>(static_cast<uint64_t>(v))) {
    std::snprintf(buf, sizeof(buf), "%.0f %s", v, kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, kUnits[unit]);
  }
  return buf;
}

inline std::string ToHex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// Decodes an even-length string of hex digits (either case). False if malformed.
inline bool FromHex(std::string_view hex, std::string* bytes) {
  if (hex.size() % 2 != 0) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi << 4 | lo);
  }
  *bytes = std::move(out);
  return true;
}

// Printable ASCII stays; backslash, tab, newline, CR and every other byte become C
// escapes (\\, \t, \n, \r, \xNN), so one record is always one line.
inline std::string Escape(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += static_cast<char>(c);
        } else {
          char buf[5];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        }
    }
  }
  return out;
}

// Joins the lines of a message with "; " (errors are printed as exactly one line).
inline std::string OneLine(std::string_view text) {
  std::string out;
  bool pending = false;
  for (char c : text) {
    if (c == '\n' || c == '\r') {
      pending = !out.empty();
      continue;
    }
    if (pending) {
      out += "; ";
      pending = false;
    }
    out += c;
  }
  return out;
}

// Splits "name=value" (name non-empty). False if there is no '=' or the name is empty.
inline bool SplitOption(std::string_view text, std::string* name, std::string* value) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) return false;
  *name = std::string(text.substr(0, eq));
  *value = std::string(text.substr(eq + 1));
  return true;
}

}  // namespace pmhash::tools
