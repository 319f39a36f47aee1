// RESP2, the Redis serialization protocol, as `pmhash serve` speaks it: a request parser
// that takes bytes as they arrive and hands out whole commands, and the reply encoders.
//
// A request is an array of bulk strings ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") or an inline
// command (words on one line, as telnet sends them). The parser never trusts a length it
// reads: an array of more than `max_args` elements, a bulk string longer than
// `max_bulk_bytes`, an inline line longer than kMaxInlineBytes, a negative or non-numeric
// length, or a missing "\r\n" is a protocol error, after which the connection is closed
// (as Redis does): what follows an error cannot be framed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pmhash::serve {

inline constexpr size_t kMaxInlineBytes = 64 << 10;

class RespParser {
 public:
  enum class Result {
    kCommand,     // *args holds a whole command (views into the parser's buffer)
    kIncomplete,  // feed more bytes
    kError,       // protocol error: error() says what; the connection must close
  };

  RespParser(size_t max_bulk_bytes, size_t max_args)
      : max_bulk_bytes_(max_bulk_bytes), max_args_(max_args) {}

  // Appends received bytes.
  void Feed(std::string_view bytes) { buffer_.append(bytes); }

  // The next whole command, if the buffer holds one. The views in *args stay valid until
  // the next call of Next or Feed. Empty inline lines are skipped.
  Result Next(std::vector<std::string_view>* args);

  const std::string& error() const { return error_; }
  // Bytes received and not yet consumed by a command.
  size_t pending_bytes() const { return buffer_.size() - consumed_; }

 private:
  Result Fail(std::string message);
  Result ParseMultibulk(std::vector<std::string_view>* args);
  Result ParseInline(std::vector<std::string_view>* args);
  // The number after a '*' or '$' prefix at `pos`, its line ended by "\r\n"; *end is
  // the position after it. kIncomplete, kError, or kCommand for a number.
  Result ReadLength(size_t pos, char prefix, int64_t* value, size_t* end);

  const size_t max_bulk_bytes_;
  const size_t max_args_;
  std::string buffer_;
  size_t consumed_ = 0;  // bytes of buffer_ already handed out as commands
  std::string error_;
};

// Reply encoders: append one RESP2 value to *out.
void AppendSimple(std::string* out, std::string_view text);  // +text
void AppendError(std::string* out, std::string_view text);   // -text (one line)
void AppendInteger(std::string* out, int64_t value);         // :value
void AppendBulk(std::string* out, std::string_view bytes);   // $n bytes
void AppendNull(std::string* out);                           // $-1
void AppendArrayHeader(std::string* out, size_t n);          // *n

}  // namespace pmhash::serve
