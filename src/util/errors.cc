#include "util/errors.h"

#include <cstring>

namespace pmhash {

Status ErrnoStatus(const std::string& context, int err) {
  const std::string msg = context + ": " + std::strerror(err);
  switch (err) {
    case ENOENT: return Status::NotFound(msg);
    case EEXIST: return Status::AlreadyExists(msg);
    case EACCES:
    case EPERM:
    case EISDIR:
    case ENOTDIR:
    case EINVAL: return Status::InvalidArgument(msg);
    case ENOSPC:
    case ENOMEM:
    case EFBIG: return Status::ResourceExhausted(msg);
    case EWOULDBLOCK:
    case EBUSY: return Status::Busy(msg);
    default: return Status::IOError(msg);
  }
}

}  // namespace pmhash
