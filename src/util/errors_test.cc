#include "util/errors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace pmhash {
namespace {

struct Mapping {
  int err;
  Status::Code code;
};

TEST(ErrnoStatus, MapsErrnoToTheDocumentedCodes) {
  const Mapping cases[] = {
      {ENOENT, Status::Code::kNotFound},
      {EEXIST, Status::Code::kAlreadyExists},
      {EACCES, Status::Code::kInvalidArgument},
      {EPERM, Status::Code::kInvalidArgument},
      {EISDIR, Status::Code::kInvalidArgument},
      {ENOTDIR, Status::Code::kInvalidArgument},
      {EINVAL, Status::Code::kInvalidArgument},
      {ENOSPC, Status::Code::kResourceExhausted},
      {ENOMEM, Status::Code::kResourceExhausted},
      {EFBIG, Status::Code::kResourceExhausted},  // file too large for the file system
      {EWOULDBLOCK, Status::Code::kBusy},        // flock held by another process
      {EAGAIN, Status::Code::kBusy},             // same value as EWOULDBLOCK on Linux
      {EBUSY, Status::Code::kBusy},
      {EIO, Status::Code::kIOError},
      {EBADF, Status::Code::kIOError},
      {ENODEV, Status::Code::kIOError},  // e.g. mmap on a file system without mmap
      {EOPNOTSUPP, Status::Code::kIOError},
      {12345, Status::Code::kIOError},  // not an errno at all
  };
  for (const Mapping& m : cases) {
    const Status s = ErrnoStatus("ctx", m.err);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), m.code) << "errno " << m.err << " gave " << s.ToString();
  }
}

TEST(ErrnoStatus, MessageCarriesContextAndReason) {
  const std::string context = "cannot open pool /tmp/x.pool";
  const Status s = ErrnoStatus(context, ENOENT);
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_EQ(s.message(), context + ": " + std::strerror(ENOENT));
  EXPECT_NE(s.message().find("No such file"), std::string::npos) << s.message();
  EXPECT_EQ(s.ToString(), "NotFound: " + std::string(s.message()));

  const Status full = ErrnoStatus("cannot reserve 1 GiB for /mnt/pm/a.pool", ENOSPC);
  EXPECT_NE(full.message().find("/mnt/pm/a.pool"), std::string::npos);
  EXPECT_NE(full.message().find(std::strerror(ENOSPC)), std::string::npos);
  EXPECT_NE(full.ToString().find("ResourceExhausted"), std::string::npos) << full.ToString();

  // An unknown errno still yields a message with the context.
  const Status odd = ErrnoStatus("mmap", 12345);
  EXPECT_EQ(odd.message().rfind("mmap: ", 0), 0u) << odd.message();
  EXPECT_GT(odd.message().size(), std::string("mmap: ").size());
}

}  // namespace
}  // namespace pmhash
