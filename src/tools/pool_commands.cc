// `pmhash pool create|info|check`.
#include <fcntl.h>
#include <linux/mman.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "engines/engine.h"
#include "pm/pool.h"
#include "pmhash/index.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/text.h"

namespace pmhash::tools {

int Fail(int code, std::string_view message) {
  std::fprintf(stderr, "pmhash: %s\n", ErrorLine(message).c_str());
  return code;
}

int CmdPoolCreate(const std::string& path, const std::string& engine, const std::string& size,
                  const std::string& hash_seed, const std::vector<std::string>& opts) {
  Options options;
  std::string error;
  if (!ParsePoolSize(size, &options.pool_size, &error)) return Fail(kExitUsage, error);
  if (!ParseHashSeed(hash_seed, &options.hash_seed, &error)) return Fail(kExitUsage, error);
  if (!ParseEngineOptions(opts, &options.engine_options, &error)) return Fail(kExitUsage, error);
  options.engine = engine;
  options.path = path;
  options.create_if_missing = true;
  options.error_if_exists = true;
  std::unique_ptr<Index> index;
  Status s = Open(options, &index);
  if (!s.ok()) return Fail(kExitFailure, s.message());
  const IndexStats stats = index->Stats();
  s = index->Close();
  if (!s.ok()) return Fail(kExitFailure, "closing " + path + ": " + std::string(s.message()));
  std::printf("created %s: engine %s, %llu bytes (%s), mapping %s\n", path.c_str(),
              engine.c_str(), static_cast<unsigned long long>(stats.pool_bytes),
              HumanBytes(stats.pool_bytes).c_str(), stats.mapping.c_str());
  return kExitOk;
}

namespace {

std::string FormatUnixNs(uint64_t ns) {
  const time_t secs = static_cast<time_t>(ns / 1000000000ull);
  struct tm tm;
  if (gmtime_r(&secs, &tm) == nullptr) return "?";
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What Pool::Open would get, probed read-only: a MAP_SYNC mapping needs a DAX file.
// Also reports whether another process holds the pool's lock.
void ProbeFile(const std::string& path, std::string* mapping, std::string* in_use) {
  *mapping = "unknown";
  *in_use = "unknown";
  int fd;
  uint64_t size;
  if (!pm::Pool::OpenFile(path, O_RDONLY, &fd, &size).ok()) return;
  void* p = mmap(nullptr, pm::kPoolHeaderSize, PROT_READ, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0);
  if (p != MAP_FAILED) {
    munmap(p, pm::kPoolHeaderSize);
    *mapping = "dax (MAP_SYNC: flushed stores are durable)";
  } else {
    *mapping = "shared (MAP_SHARED: durable against a process crash; against power loss "
               "only after msync)";
  }
  if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
    *in_use = "no";
    flock(fd, LOCK_UN);
  } else if (errno == EWOULDBLOCK) {
    *in_use = "yes (another process has it open)";
  }
  ::close(fd);
}

// What the state word means for the next open.
const char* StateMeaning(pm::PoolState state) {
  switch (state) {
    case pm::PoolState::kCreating:
      return "creating (its creation never finished: the next open creates the index afresh)";
    case pm::PoolState::kOpen:
      return "open (in use now, crashed, or never closed: the next open recovers it)";
    case pm::PoolState::kClean:
      return "clean (closed cleanly: the next open skips recovery)";
  }
  return "?";
}

}  // namespace

int CmdPoolInfo(const std::string& path) {
  pm::PoolInfo info;
  Status s = pm::Pool::Inspect(path, &info);
  if (!s.ok()) return Fail(kExitFailure, s.message());
  std::string mapping, in_use;
  ProbeFile(path, &mapping, &in_use);
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf("path            %s\n", path.c_str());
  std::printf("magic           %.8s\n", pm::kPoolMagic);
  std::printf("layout version  %u\n", info.layout_version);
  std::printf("header size     %u\n", info.header_size);
  std::printf("engine          %s\n", info.engine.c_str());
  std::printf("uuid            %s\n", info.uuid.c_str());
  std::printf("created         %s (%llu ns since the epoch)\n",
              FormatUnixNs(info.created_unix_ns).c_str(), u(info.created_unix_ns));
  if (info.hash_seed_origin == pm::HashSeedOrigin::kNone) {
    std::printf("hash seed       none: layout 3, made before per-pool seeds; keys hash with "
                "seed 0, so keys crafted against seed 0 collide here\n");
  } else {
    std::printf("hash seed       %016llx (%s at creation)\n", u(info.hash_seed),
                pm::HashSeedOriginName(info.hash_seed_origin));
  }
  std::printf("pool size       %llu (%s)\n", u(info.pool_size), HumanBytes(info.pool_size).c_str());
  std::printf("file size       %llu (%s)\n", u(info.file_size), HumanBytes(info.file_size).c_str());
  std::printf("root area       offset %llu, size %llu\n", u(info.root_offset), u(info.root_size));
  std::printf("undo log        offset %llu, size %llu\n", u(info.log_offset), u(info.log_size));
  std::printf("heap            offset %llu, size %llu\n", u(info.heap_offset), u(info.heap_size));
  std::printf("checksum        %016llx (valid)\n", u(info.checksum));
  std::printf("state           %s\n", StateMeaning(info.state));
  std::printf("in use          %s\n", in_use.c_str());
  std::printf("mapping         %s\n", mapping.c_str());
  return kExitOk;
}

int CmdPoolCheck(const std::string& path, const std::string& engine,
                 const std::vector<std::string>& opts) {
  Options options;
  std::string error;
  if (!ParseEngineOptions(opts, &options.engine_options, &error)) return Fail(kExitUsage, error);
  pm::PoolInfo info;
  Status s = pm::Pool::Inspect(path, &info);
  if (!s.ok()) return Fail(kExitFailure, s.message());
  if (!engine.empty() && engine != info.engine) {
    return Fail(kExitFailure, path + " holds engine '" + info.engine + "', not '" + engine + "'");
  }
  std::printf("header          ok (engine %s, %llu bytes, layout version %u)\n",
              info.engine.c_str(), static_cast<unsigned long long>(info.pool_size),
              info.layout_version);
  std::printf("state           %s\n",
              info.state == pm::PoolState::kClean  ? "clean"
              : info.state == pm::PoolState::kOpen ? "not closed cleanly: recovering"
                                                   : "creation never finished: creating afresh");
  std::fflush(stdout);

  options.engine = engine;
  options.path = path;
  options.create_if_missing = false;
  std::unique_ptr<engines::Engine> index;
  s = engines::Open(options, &index);
  if (!s.ok()) return Fail(kExitFailure, "opening " + path + ": " + std::string(s.message()));
  const IndexStats stats = index->Stats();
  if (stats.recovered) std::printf("recovery        done in %.3f ms\n", stats.recovery_ms);
  index->WaitForBackgroundWork();  // CheckInvariants needs a quiet index
  // The engine's own invariants first: only a structure that passes them is iterated.
  std::vector<std::string> problems;
  const Status structure = index->CheckInvariants();
  if (structure.ok()) {
    std::printf("structure       ok (every key where its hash allows, none twice, counts, "
                "slot metadata, records and metadata checks)\n");
    uint64_t seen = 0;
    s = index->ForEach([&](std::string_view, std::string_view) {
      ++seen;
      return true;
    });
    const uint64_t count = index->Count();
    if (!s.ok()) {
      problems.push_back("iterating: " + std::string(s.message()));
    } else {
      std::printf("keys            %llu by iteration, Count() = %llu\n",
                  static_cast<unsigned long long>(seen), static_cast<unsigned long long>(count));
      if (seen != count) {
        problems.push_back("iteration found " + std::to_string(seen) + " keys but Count() is " +
                           std::to_string(count));
      }
    }
  } else {
    std::printf("structure       DAMAGED: %s\n", std::string(structure.message()).c_str());
    problems.push_back(std::string(structure.message()));
  }
  const Result<uint64_t> blocks = index->VerifyBlocks();
  if (blocks.ok()) {
    std::printf("allocator       %llu blocks reachable, each allocated once, none leaked\n",
                static_cast<unsigned long long>(blocks.value()));
  } else {
    std::printf("allocator       DAMAGED: %s\n", std::string(blocks.status().message()).c_str());
    problems.push_back(std::string(blocks.status().message()));
  }
  s = index->Close();
  if (!s.ok()) return Fail(kExitFailure, "closing " + path + ": " + std::string(s.message()));
  if (!problems.empty()) {
    std::printf("verdict         INCONSISTENT\n");
    return Fail(kExitFailure, path + " is inconsistent: " + problems.front());
  }
  std::printf("verdict         OK\n");
  return kExitOk;
}

}  // namespace pmhash::tools
