// Pool files of a benchmark run: where each goes, how large it is, and its removal when
// the run ends, also on SIGINT / SIGTERM (InstallCleanupHandler, runner.h).
#pragma once

#include <cstdint>
#include <string>

#include "bench/config.h"
#include "pmhash/status.h"

namespace pmhash::bench {

// A fresh pool file for `config.pool` ("" for a DRAM pool): a new name in the directory
// given (default /dev/shm, else /tmp), or the file given + `suffix`. AlreadyExists if that
// file exists (the benchmark never measures on an old pool).
Status PoolPath(const BenchConfig& config, const std::string& suffix, std::string* path);

// What the run's pools are, for the machine block: "DRAM", "DAX file" (`mapping` of an
// opened pool is "dax"), "tmpfs file", or "file on a non-DAX file system" (page cache),
// and for DRAM and tmpfs the pages their mapping gets as the system is configured (not
// measured), e.g. "tmpfs file, 4 KiB pages (mounted without huge=)": a random lookup
// that misses the TLB walks the page tables first, so the page size moves every figure
// (BENCHMARKS.md, "Pools on 2 MiB pages"). `mapping` may be empty (nothing was opened):
// the file system decides.
std::string PoolKind(const BenchConfig& config, const std::string& mapping);

// The pages of a tmpfs file's mapping, from its mount's options (as /proc/mounts lists
// them) and /sys/kernel/mm/transparent_hugepage/shmem_enabled ("" if unreadable).
std::string TmpfsPages(const std::string& mount_options, const std::string& shmem_enabled);
// The pages of a DRAM pool (anonymous memory the pool advises MADV_HUGEPAGE), from
// /sys/kernel/mm/transparent_hugepage/enabled; "" if that is unreadable.
std::string AnonymousPages(const std::string& thp_enabled);
// The options of the mount that holds `path` (an absolute path with no symbolic links),
// from the text of /proc/mounts: the longest mount point that contains it; "" if none.
std::string MountOptions(const std::string& proc_mounts, const std::string& path);

// The pool size for `keys` keys: --pool-size, else EstimatePoolSize (runner.h); under
// --redundancy capped at kDefaultRedundancyPool (the crash simulator shadows it).
uint64_t PoolSizeFor(const BenchConfig& config, uint64_t keys);

// A pool file that is removed when the guard goes, whatever happens, and by the signal
// handler meanwhile. An empty path (DRAM) guards nothing.
class PoolGuard {
 public:
  explicit PoolGuard(std::string path);
  ~PoolGuard();
  PoolGuard(const PoolGuard&) = delete;
  PoolGuard& operator=(const PoolGuard&) = delete;

 private:
  std::string path_;
};

}  // namespace pmhash::bench
