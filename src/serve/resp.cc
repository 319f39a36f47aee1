#include "serve/resp.h"

#include <charconv>

namespace pmhash::serve {

RespParser::Result RespParser::Fail(std::string message) {
  error_ = "Protocol error: " + std::move(message);
  return Result::kError;
}

RespParser::Result RespParser::Next(std::vector<std::string_view>* args) {
  args->clear();
  if (!error_.empty()) return Result::kError;
  // Drop what earlier commands consumed once it is most of the buffer, so that a long
  // pipeline costs a move now and then, not one per command.
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  } else if (consumed_ > (16u << 10) && consumed_ > buffer_.size() / 2) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  while (consumed_ < buffer_.size()) {
    const Result r = buffer_[consumed_] == '*' ? ParseMultibulk(args) : ParseInline(args);
    if (r != Result::kCommand || !args->empty()) return r;
    // An empty inline line or "*0": nothing to run; its bytes were consumed.
  }
  return Result::kIncomplete;
}

RespParser::Result RespParser::ReadLength(size_t pos, char prefix, int64_t* value,
                                          size_t* end) {
  if (pos >= buffer_.size()) return Result::kIncomplete;
  if (buffer_[pos] != prefix) {
    return Fail(std::string("expected '") + prefix + "', got '" +
                (static_cast<unsigned char>(buffer_[pos]) >= 0x20 &&
                         static_cast<unsigned char>(buffer_[pos]) < 0x7f
                     ? std::string(1, buffer_[pos])
                     : "\\x" + std::to_string(static_cast<unsigned char>(buffer_[pos]))) +
                "'");
  }
  const size_t cr = buffer_.find('\r', pos + 1);
  if (cr == std::string::npos) {
    // A length line is at most 21 bytes; more without a '\r' is not RESP.
    if (buffer_.size() - pos > 32) return Fail("length line too long");
    return Result::kIncomplete;
  }
  if (cr - pos > 32) return Fail("length line too long");
  if (cr + 1 >= buffer_.size()) return Result::kIncomplete;
  if (buffer_[cr + 1] != '\n') return Fail("length line not ended by CRLF");
  const char* first = buffer_.data() + pos + 1;
  const char* last = buffer_.data() + cr;
  auto [ptr, ec] = std::from_chars(first, last, *value);
  if (ec != std::errc() || ptr != last || first == last) {
    return Fail(std::string("invalid ") + (prefix == '*' ? "multibulk" : "bulk") + " length");
  }
  *end = cr + 2;
  return Result::kCommand;
}

RespParser::Result RespParser::ParseMultibulk(std::vector<std::string_view>* args) {
  int64_t count = 0;
  size_t pos = 0;
  Result r = ReadLength(consumed_, '*', &count, &pos);
  if (r != Result::kCommand) return r;
  if (count < 0 || static_cast<uint64_t>(count) > max_args_) {
    return Fail("invalid multibulk length (at most " + std::to_string(max_args_) +
                " arguments)");
  }
  if (count == 0) {  // "*0\r\n": nothing to run
    consumed_ = pos;
    return Result::kCommand;
  }
  for (int64_t i = 0; i < count; ++i) {
    int64_t len = 0;
    r = ReadLength(pos, '$', &len, &pos);
    if (r != Result::kCommand) {
      args->clear();
      return r;
    }
    if (len < 0 || static_cast<uint64_t>(len) > max_bulk_bytes_) {
      args->clear();
      return Fail("invalid bulk length (at most " + std::to_string(max_bulk_bytes_) +
                  " bytes)");
    }
    const size_t n = static_cast<size_t>(len);
    if (buffer_.size() - pos < n + 2) {
      args->clear();
      return Result::kIncomplete;
    }
    if (buffer_[pos + n] != '\r' || buffer_[pos + n + 1] != '\n') {
      args->clear();
      return Fail("bulk string not ended by CRLF");
    }
    args->emplace_back(buffer_.data() + pos, n);
    pos += n + 2;
  }
  consumed_ = pos;
  return Result::kCommand;
}

RespParser::Result RespParser::ParseInline(std::vector<std::string_view>* args) {
  const size_t nl = buffer_.find('\n', consumed_);
  if (nl == std::string::npos) {
    if (buffer_.size() - consumed_ > kMaxInlineBytes) return Fail("too big inline request");
    return Result::kIncomplete;
  }
  if (nl - consumed_ > kMaxInlineBytes) return Fail("too big inline request");
  const size_t line_end = nl > consumed_ && buffer_[nl - 1] == '\r' ? nl - 1 : nl;
  // Words separated by spaces or tabs; no quoting (redis-cli and every client library
  // send multibulk; inline is for a person at a terminal).
  size_t i = consumed_;
  while (i < line_end) {
    while (i < line_end && (buffer_[i] == ' ' || buffer_[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line_end && buffer_[i] != ' ' && buffer_[i] != '\t') ++i;
    if (i > start) {
      if (args->size() == max_args_) {
        args->clear();
        return Fail("too many inline arguments");
      }
      args->emplace_back(buffer_.data() + start, i - start);
    }
  }
  consumed_ = nl + 1;
  return Result::kCommand;
}

void AppendSimple(std::string* out, std::string_view text) {
  out->push_back('+');
  out->append(text);
  out->append("\r\n");
}

void AppendError(std::string* out, std::string_view text) {
  out->push_back('-');
  // One line: a message with a line break would end the reply early.
  for (char c : text) out->push_back(c == '\r' || c == '\n' ? ' ' : c);
  out->append("\r\n");
}

void AppendInteger(std::string* out, int64_t value) {
  out->push_back(':');
  out->append(std::to_string(value));
  out->append("\r\n");
}

void AppendBulk(std::string* out, std::string_view bytes) {
  out->push_back('$');
  out->append(std::to_string(bytes.size()));
  out->append("\r\n");
  out->append(bytes);
  out->append("\r\n");
}

void AppendNull(std::string* out) { out->append("$-1\r\n"); }

void AppendArrayHeader(std::string* out, size_t n) {
  out->push_back('*');
  out->append(std::to_string(n));
  out->append("\r\n");
}

}  // namespace pmhash::serve
