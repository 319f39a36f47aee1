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
// opened pool is "dax"), "tmpfs file", or "file on a non-DAX file system" (page cache).
// `mapping` may be empty (nothing was opened): the file system decides.
std::string PoolKind(const BenchConfig& config, const std::string& mapping);

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
