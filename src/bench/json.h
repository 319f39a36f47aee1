// A small JSON value for the benchmark driver: written for --json results, parsed for
// scenario files and by tests that check the result shape. Objects keep insertion order
// so the output reads in the order the contract lists the fields.
//
// Numbers: a non-negative integer (counts, seeds, checksums) is kept exactly as a
// uint64_t and written in full (18446744073709551615, never 1.84467e+19); other numbers
// are doubles written with 17 significant digits where needed. The parser keeps an
// integer literal that fits 64 bits exactly too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pmhash/status.h"

namespace pmhash::bench {

class Json {
 public:
  enum class Type : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };

  Json() = default;  // null
  Json(std::nullptr_t) {}  // NOLINT: implicit by design
  Json(bool b) : type_(Type::kBool), bool_(b) {}  // NOLINT
  Json(double d) : type_(Type::kNumber), number_(d) {}  // NOLINT
  Json(int v)  // NOLINT
      : type_(Type::kNumber), integer_(v >= 0), uint_(v >= 0 ? static_cast<uint64_t>(v) : 0),
        number_(v) {}
  Json(uint64_t v)  // NOLINT
      : type_(Type::kNumber), integer_(true), uint_(v), number_(static_cast<double>(v)) {}
  Json(const char* s) : type_(Type::kString), string_(s) {}  // NOLINT
  Json(std::string s) : type_(Type::kString), string_(std::move(s)) {}  // NOLINT

  static Json Array() { Json j; j.type_ = Type::kArray; return j; }
  static Json Object() { Json j; j.type_ = Type::kObject; return j; }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  bool is_bool() const { return type_ == Type::kBool; }

  double number() const { return number_; }
  // True for a number held exactly as a non-negative 64-bit integer.
  bool is_uint() const { return type_ == Type::kNumber && integer_; }
  // The exact integer (is_uint()), else the number truncated (0 if negative or NaN).
  uint64_t uint() const {
    if (integer_) return uint_;
    return number_ >= 0 && number_ < 18446744073709551616.0 ? static_cast<uint64_t>(number_) : 0;
  }
  bool boolean() const { return bool_; }
  const std::string& string() const { return string_; }
  const std::vector<Json>& items() const { return items_; }
  const std::vector<std::pair<std::string, Json>>& members() const { return members_; }

  // Array append.
  void Push(Json value) { items_.push_back(std::move(value)); }
  // Object: sets (replacing an existing member of that name).
  void Set(const std::string& name, Json value);
  // Object member or nullptr.
  const Json* Find(std::string_view name) const;
  bool Has(std::string_view name) const { return Find(name) != nullptr; }

  // Compact when indent < 0, else pretty-printed with `indent` spaces per level.
  // Non-finite numbers are written as null (JSON has no NaN).
  std::string Dump(int indent = 2) const;

  // Parses a whole document. InvalidArgument with line:column on malformed input.
  static Status Parse(std::string_view text, Json* out);

 private:
  void DumpTo(std::string* out, int indent, int level) const;

  Type type_ = Type::kNull;
  bool bool_ = false;
  bool integer_ = false;  // number held exactly in uint_
  uint64_t uint_ = 0;
  double number_ = 0;
  std::string string_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

// A number, or null when `known` is false (a figure the engine cannot report).
inline Json NumberOrNull(bool known, double value) { return known ? Json(value) : Json(); }

}  // namespace pmhash::bench
