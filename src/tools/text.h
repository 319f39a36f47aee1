// Text helpers of the `pmhash` tool: sizes with K/M/G suffixes, hex, escaping for
// line-oriented output. Header-only so that src/tools/cli_test.cc can test them directly
// (the tool's .cc files are not part of the library).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace pmhash::tools {

inline std::string Escape(std::string_view bytes);  // below
inline std::string ToHex(std::string_view bytes);   // below

// How many bytes of a key, value or argument an error message shows.
inline constexpr size_t kShownBytes = 64;

// A key, value or command-line argument as an error message shows it: quoted, escaped
// (or hex), and cut after kShownBytes bytes with "..." and the full length, so that a
// 64 KiB key does not end up on stderr: 'abc', 'aaaa...' (70000 bytes).
inline std::string Shown(std::string_view bytes, bool hex = false) {
  const std::string_view head = bytes.substr(0, kShownBytes);
  std::string out(1, '\'');
  out.append(hex ? ToHex(head) : Escape(head));
  if (head.size() < bytes.size()) {
    out.append("...' (").append(std::to_string(bytes.size())).append(" bytes)");
  } else {
    out.push_back('\'');
  }
  return out;
}

// Parses a count: decimal digits only ("0", "1000"). False on a sign, spaces, a
// suffix, an empty string or overflow; *error then says why (naming the text).
inline bool ParseCount(std::string_view text, uint64_t* value, std::string* error) {
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      *error = Shown(text) + " is not a whole number >= 0";
      return false;
    }
    const uint64_t digit = c - '0';
    if (v > (UINT64_MAX - digit) / 10) {
      *error = Shown(text) + " is too large";
      return false;
    }
    v = v * 10 + digit;
  }
  if (text.empty()) {
    *error = "an empty string is not a whole number";
    return false;
  }
  *value = v;
  return true;
}

// Parses "4096", "512K", "256M", "4G", "1T" (binary multiples; a trailing "B" or "iB"
// and lower case are accepted: "256MiB", "64k"). False on anything else, on zero and on
// overflow; *error then says why.
inline bool ParseSize(std::string_view text, uint64_t* bytes, std::string* error) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    const uint64_t digit = text[i] - '0';
    if (v > (UINT64_MAX - digit) / 10) {
      *error = "size " + Shown(text) + " is too large";
      return false;
    }
    v = v * 10 + digit;
    ++i;
  }
  if (i == 0) {
    *error = "invalid size " + Shown(text) +
             ": expected a number with an optional K, M, G or T suffix (e.g. 256M)";
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
      *error = "invalid size " + Shown(text) +
               ": expected a number with an optional K, M, G or T suffix (e.g. 256M)";
      return false;
    }
  }
  if (shift > 0 && v > (UINT64_MAX >> shift)) {
    *error = "size " + Shown(text) + " is too large";
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

// The one line Fail prints: OneLine(message), cut after kMaxMessageBytes with a note of
// the full length. A safety net for messages that embed an argument whole (CLI11's own
// parse errors do); the tool's messages show keys and arguments through Shown.
inline constexpr size_t kMaxMessageBytes = 1024;
inline std::string ErrorLine(std::string_view message) {
  std::string line = OneLine(message);
  if (line.size() > kMaxMessageBytes) {
    const size_t full = line.size();
    line.resize(kMaxMessageBytes);
    line += "... (message cut: " + std::to_string(full) + " bytes)";
  }
  return line;
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
