#include "bench/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pmhash::bench {

void Json::Set(const std::string& name, Json value) {
  for (auto& [n, v] : members_) {
    if (n == name) {
      v = std::move(value);
      return;
    }
  }
  members_.emplace_back(name, std::move(value));
}

const Json* Json::Find(std::string_view name) const {
  for (const auto& [n, v] : members_) {
    if (n == name) return &v;
  }
  return nullptr;
}

namespace {

void DumpString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\t': *out += "\\t"; break;
      case '\r': *out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void DumpNumber(double d, std::string* out) {
  if (!std::isfinite(d)) {
    *out += "null";
    return;
  }
  char buf[40];
  if (d == std::floor(d) && std::fabs(d) < 9e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", d);
  } else {
    // The shortest of 6..17 significant digits that reads back as the same double.
    for (int digits = 6; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof(buf), "%.*g", digits, d);
      if (std::strtod(buf, nullptr) == d) break;
    }
  }
  *out += buf;
}

void Newline(std::string* out, int indent, int level) {
  if (indent < 0) return;
  out->push_back('\n');
  out->append(static_cast<size_t>(indent * level), ' ');
}

}  // namespace

void Json::DumpTo(std::string* out, int indent, int level) const {
  switch (type_) {
    case Type::kNull: *out += "null"; break;
    case Type::kBool: *out += bool_ ? "true" : "false"; break;
    case Type::kNumber:
      if (integer_) {
        *out += std::to_string(uint_);
      } else {
        DumpNumber(number_, out);
      }
      break;
    case Type::kString: DumpString(string_, out); break;
    case Type::kArray: {
      out->push_back('[');
      // Arrays of scalars stay on one line: easier to read, still valid JSON.
      bool flat = true;
      for (const Json& j : items_) flat = flat && !j.is_array() && !j.is_object();
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i > 0) *out += flat && indent >= 0 ? ", " : ",";
        if (!flat) Newline(out, indent, level + 1);
        items_[i].DumpTo(out, indent, level + 1);
      }
      if (!flat && !items_.empty()) Newline(out, indent, level);
      out->push_back(']');
      break;
    }
    case Type::kObject: {
      out->push_back('{');
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i > 0) out->push_back(',');
        Newline(out, indent, level + 1);
        DumpString(members_[i].first, out);
        *out += indent >= 0 ? ": " : ":";
        members_[i].second.DumpTo(out, indent, level + 1);
      }
      if (!members_.empty()) Newline(out, indent, level);
      out->push_back('}');
      break;
    }
  }
}

std::string Json::Dump(int indent) const {
  std::string out;
  DumpTo(&out, indent, 0);
  if (indent >= 0) out.push_back('\n');
  return out;
}

// ---- Parser -------------------------------------------------------------------------

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Status Document(Json* out) {
    PMHASH_RETURN_IF_ERROR(Value(out, 0));
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the document");
    return Status::OK();
  }

 private:
  Status Error(const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Status::InvalidArgument("JSON " + std::to_string(line) + ":" + std::to_string(col) +
                                   ": " + what);
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool Literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status Value(Json* out, int depth) {
    if (depth > 64) return Error("nesting too deep");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end of input");
    char c = text_[pos_];
    if (c == '{') return ObjectValue(out, depth);
    if (c == '[') return ArrayValue(out, depth);
    if (c == '"') {
      std::string s;
      PMHASH_RETURN_IF_ERROR(StringValue(&s));
      *out = Json(std::move(s));
      return Status::OK();
    }
    if (Literal("true")) {
      *out = Json(true);
      return Status::OK();
    }
    if (Literal("false")) {
      *out = Json(false);
      return Status::OK();
    }
    if (Literal("null")) {
      *out = Json();
      return Status::OK();
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t start = pos_;
      while (pos_ < text_.size() &&
             std::string_view("+-0123456789.eE").find(text_[pos_]) != std::string_view::npos) {
        ++pos_;
      }
      std::string num(text_.substr(start, pos_ - start));
      if (num.find_first_not_of("0123456789") == std::string::npos) {
        // An integer literal: exact when it fits 64 bits.
        uint64_t u = 0;
        auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), u);
        if (ec == std::errc() && p == num.data() + num.size()) {
          *out = Json(u);
          return Status::OK();
        }
      }
      char* end = nullptr;
      double d = std::strtod(num.c_str(), &end);
      if (end != num.c_str() + num.size()) {
        pos_ = start;
        return Error("malformed number '" + num + "'");
      }
      *out = Json(d);
      return Status::OK();
    }
    return Error(std::string("unexpected character '") + c + "'");
  }

  Status StringValue(std::string* s) {
    ++pos_;  // opening quote
    while (pos_ < text_.size()) {
      char c = text_[pos_++];
      if (c == '"') return Status::OK();
      if (c != '\\') {
        s->push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) break;
      char e = text_[pos_++];
      switch (e) {
        case '"': s->push_back('"'); break;
        case '\\': s->push_back('\\'); break;
        case '/': s->push_back('/'); break;
        case 'n': s->push_back('\n'); break;
        case 't': s->push_back('\t'); break;
        case 'r': s->push_back('\r'); break;
        case 'b': s->push_back('\b'); break;
        case 'f': s->push_back('\f'); break;
        case 'u': {
          if (pos_ + 4 > text_.size()) return Error("truncated \\u escape");
          unsigned cp = static_cast<unsigned>(
              std::strtoul(std::string(text_.substr(pos_, 4)).c_str(), nullptr, 16));
          pos_ += 4;
          // UTF-8 encode (surrogate pairs are not needed by scenario files).
          if (cp < 0x80) {
            s->push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
            s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          } else {
            s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
            s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          }
          break;
        }
        default: return Error(std::string("bad escape \\") + e);
      }
    }
    return Error("unterminated string");
  }

  Status ArrayValue(Json* out, int depth) {
    ++pos_;
    *out = Json::Array();
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return Status::OK();
    }
    for (;;) {
      Json item;
      PMHASH_RETURN_IF_ERROR(Value(&item, depth + 1));
      out->Push(std::move(item));
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated array");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == ']') {
        ++pos_;
        return Status::OK();
      }
      return Error("expected ',' or ']'");
    }
  }

  Status ObjectValue(Json* out, int depth) {
    ++pos_;
    *out = Json::Object();
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return Status::OK();
    }
    for (;;) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a member name");
      std::string name;
      PMHASH_RETURN_IF_ERROR(StringValue(&name));
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      Json value;
      PMHASH_RETURN_IF_ERROR(Value(&value, depth + 1));
      out->Set(name, std::move(value));
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated object");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == '}') {
        ++pos_;
        return Status::OK();
      }
      return Error("expected ',' or '}'");
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Status Json::Parse(std::string_view text, Json* out) {
  Parser parser(text);
  return parser.Document(out);
}

}  // namespace pmhash::bench
