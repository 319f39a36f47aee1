// Status and Result<T>: how every pmhash call reports success or failure.
//
// A Status is OK or one of a small fixed set of codes with a message that says why.
// errno becomes a Status at one boundary (src/util/errors.h); nothing else in the
// library reports errors any other way: no exceptions cross the API, no exit().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace pmhash {

class [[nodiscard]] Status {
 public:
  enum class Code : uint8_t {
    kOk = 0,
    kNotFound,           // the key (or file) does not exist
    kAlreadyExists,      // Insert of a key that is present; create of a pool that exists
    kInvalidArgument,    // bad option, oversized key/value, wrong engine for a pool
    kCorruption,         // a pool file that fails validation
    kIOError,            // the operating system refused (open, mmap, msync, ...)
    kResourceExhausted,  // the pool, or a table that may not grow, is full (see SubCode)
    kBusy,               // the pool is in use by another process
  };
  // Why a ResourceExhausted happened, for callers that act on it (the benchmark's fill
  // phase tells a table that refused from a pool that ran out). kNone for other codes.
  enum class SubCode : uint8_t {
    kNone = 0,
    kPoolFull,   // the pool has no block of the size needed
    kTableFull,  // the engine's table has no place for the key and may not grow
  };

  Status() = default;  // OK
  static Status OK() { return Status(); }

  // Each factory takes a message that says why. The common answers of the operations
  // (NotFound(), AlreadyExists() with no argument) use a fixed message and allocate
  // nothing, so a negative search costs no heap allocation; a message given as text is
  // copied (for the cold paths that explain an error in detail).
  static Status NotFound() { return Status(Code::kNotFound, "key not found"); }
  static Status AlreadyExists() { return Status(Code::kAlreadyExists, "key already exists"); }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, msg); }
  static Status AlreadyExists(std::string_view msg) { return Status(Code::kAlreadyExists, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  static Status ResourceExhausted(std::string_view msg, SubCode sub = SubCode::kNone) {
    Status s(Code::kResourceExhausted, msg);
    s.subcode_ = sub;
    return s;
  }
  static Status PoolFull(std::string_view msg) {
    return ResourceExhausted(msg, SubCode::kPoolFull);
  }
  static Status TableFull(std::string_view msg) {
    return ResourceExhausted(msg, SubCode::kTableFull);
  }
  static Status Busy(std::string_view msg) { return Status(Code::kBusy, msg); }

  Status(const Status& other) { *this = other; }
  Status& operator=(const Status& other);
  Status(Status&& other) noexcept = default;
  Status& operator=(Status&& other) noexcept = default;
  ~Status() = default;

  bool ok() const { return code_ == Code::kOk; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsAlreadyExists() const { return code_ == Code::kAlreadyExists; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsIOError() const { return code_ == Code::kIOError; }
  bool IsResourceExhausted() const { return code_ == Code::kResourceExhausted; }
  bool IsPoolFull() const { return subcode_ == SubCode::kPoolFull; }
  bool IsTableFull() const { return subcode_ == SubCode::kTableFull; }
  bool IsBusy() const { return code_ == Code::kBusy; }

  Code code() const { return code_; }
  SubCode subcode() const { return subcode_; }
  // The message alone, without the code's name ("" for OK). Valid while the Status lives.
  std::string_view message() const {
    return detail_ != nullptr ? std::string_view(*detail_) : std::string_view(fixed_);
  }
  // "NotFound: key not found", or "OK".
  std::string ToString() const;
  static std::string_view CodeName(Code code);

  bool operator==(const Status& other) const { return code_ == other.code_; }

 private:
  // A fixed message (a string literal: static storage, nothing to free).
  Status(Code code, const char* fixed) : code_(code), fixed_(fixed) {}
  Status(Code code, std::string_view msg)
      : code_(code), detail_(std::make_unique<std::string>(msg)) {}

  Code code_ = Code::kOk;
  SubCode subcode_ = SubCode::kNone;
  const char* fixed_ = "";
  std::unique_ptr<std::string> detail_;  // a message given as text
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {}  // NOLINT; must not be OK

  bool ok() const { return std::holds_alternative<T>(state_); }
  Status status() const { return ok() ? Status::OK() : std::get<Status>(state_); }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace pmhash

// Returns early from the enclosing function when `expr` is not OK.
#define PMHASH_RETURN_IF_ERROR(expr)        \
  do {                                      \
    ::pmhash::Status _pmhash_st = (expr);   \
    if (!_pmhash_st.ok()) return _pmhash_st; \
  } while (0)
