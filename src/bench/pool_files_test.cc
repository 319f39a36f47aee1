// Tests of what the machine block says about the run's pools (pool_files.h): the pages a
// tmpfs file or a DRAM pool gets, from the texts the kernel gives.
#include "bench/pool_files.h"

#include <gtest/gtest.h>

#include <string>

namespace pmhash::bench {
namespace {

TEST(PoolPages, TmpfsPagesFollowTheMountAndShmemEnabled) {
  const std::string never = "always within_size advise [never] deny force";
  EXPECT_EQ(TmpfsPages("rw,relatime,size=8388608k,huge=always", never),
            "2 MiB pages (huge=always)");
  EXPECT_EQ(TmpfsPages("rw,huge=within_size", never), "2 MiB pages (huge=within_size)");
  EXPECT_EQ(TmpfsPages("rw,relatime,size=24684092k", never),
            "4 KiB pages (mounted without huge=)");
  EXPECT_EQ(TmpfsPages("rw,huge=never", never), "4 KiB pages (mounted without huge=)");
  EXPECT_EQ(TmpfsPages("rw,huge=advise", never).rfind("4 KiB pages (huge=advise", 0), 0u);
  // force and deny override the mount.
  EXPECT_EQ(TmpfsPages("rw", "always within_size advise never deny [force]"),
            "2 MiB pages (shmem_enabled force)");
  EXPECT_EQ(TmpfsPages("rw,huge=always", "always within_size advise never [deny] force"),
            "4 KiB pages (shmem_enabled deny)");
  EXPECT_EQ(TmpfsPages("rw,huge=always", ""), "2 MiB pages (huge=always)");  // unreadable
  EXPECT_EQ(TmpfsPages("rw,huge=sometimes", never), "");  // unknown: not guessed
}

TEST(PoolPages, AnonymousPagesFollowTransparentHugePages) {
  EXPECT_EQ(AnonymousPages("always [madvise] never\n"), "2 MiB pages (transparent huge pages)");
  EXPECT_EQ(AnonymousPages("[always] madvise never\n"), "2 MiB pages (transparent huge pages)");
  EXPECT_EQ(AnonymousPages("always madvise [never]\n"),
            "4 KiB pages (transparent huge pages off)");
  EXPECT_EQ(AnonymousPages(""), "");
}

TEST(PoolPages, MountOptionsAreThoseOfTheInnermostMount) {
  const std::string mounts =
      "overlay / overlay rw,relatime 0 0\n"
      "tmpfs /dev/shm tmpfs rw,relatime,size=100k 0 0\n"
      "tmpfs /dev/shm tmpfs rw,relatime,size=200k 0 0\n"
      "tmpfs /tmp/hp tmpfs rw,relatime,huge=always 0 0\n"
      "garbage\n";
  EXPECT_EQ(MountOptions(mounts, "/tmp/hp"), "rw,relatime,huge=always");
  EXPECT_EQ(MountOptions(mounts, "/tmp/hp/pools"), "rw,relatime,huge=always");
  EXPECT_EQ(MountOptions(mounts, "/tmp/hpx"), "rw,relatime");  // not inside /tmp/hp
  EXPECT_EQ(MountOptions(mounts, "/dev/shm"), "rw,relatime,size=200k");  // the later mount
  EXPECT_EQ(MountOptions("", "/dev/shm"), "");
}

}  // namespace
}  // namespace pmhash::bench
