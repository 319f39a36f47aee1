// The one boundary where errno becomes a Status.
#pragma once

#include <cerrno>
#include <string>

#include "pmhash/status.h"

namespace pmhash {

// "<context>: <strerror(err)>" with a code that fits err: ENOENT -> NotFound, EEXIST ->
// AlreadyExists, EACCES/EPERM/EISDIR/ENOTDIR/EINVAL -> InvalidArgument, ENOSPC/ENOMEM ->
// ResourceExhausted, EFBIG -> ResourceExhausted, EWOULDBLOCK/EBUSY -> Busy, anything else
// -> IOError.
Status ErrnoStatus(const std::string& context, int err);

}  // namespace pmhash
