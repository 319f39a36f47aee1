// The implementation of include/pmhash/status.h.
#include "pmhash/status.h"

namespace pmhash {

std::string_view Status::CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kCorruption: return "Corruption";
    case Code::kIOError: return "IOError";
    case Code::kResourceExhausted: return "ResourceExhausted";
    case Code::kBusy: return "Busy";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  if (!message().empty()) s.append(": ").append(message());
  return s;
}

Status& Status::operator=(const Status& other) {
  if (this == &other) return *this;
  code_ = other.code_;
  subcode_ = other.subcode_;
  fixed_ = other.fixed_;
  detail_ = other.detail_ == nullptr ? nullptr : std::make_unique<std::string>(*other.detail_);
  return *this;
}

}  // namespace pmhash
