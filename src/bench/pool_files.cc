#include "bench/pool_files.h"

#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "bench/runner.h"
#include "pm/pool.h"

namespace pmhash::bench {

namespace {

constexpr int kMaxCleanup = 4;
char g_cleanup[kMaxCleanup][1024];  // paths of pools in use (signal handler unlinks them)

void OnSignal(int sig) {
  for (auto& path : g_cleanup) {
    if (path[0] != '\0') ::unlink(path);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void TrackPool(const std::string& path) {
  for (auto& slot : g_cleanup) {
    if (slot[0] == '\0' && path.size() < sizeof(slot)) {
      std::memcpy(slot, path.c_str(), path.size() + 1);
      return;
    }
  }
}

void ForgetPool(const std::string& path) {
  if (path.empty()) return;
  ::unlink(path.c_str());
  for (auto& slot : g_cleanup) {
    if (path == slot) slot[0] = '\0';
  }
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string ReadText(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ", " + pages, or nothing when they are unknown.
std::string WithPages(const std::string& pages) { return pages.empty() ? "" : ", " + pages; }

}  // namespace

std::string TmpfsPages(const std::string& mount_options, const std::string& shmem_enabled) {
  // shmem_enabled's force and deny override every mount (the kernel's transhuge doc).
  if (shmem_enabled.find("[force]") != std::string::npos) {
    return "2 MiB pages (shmem_enabled force)";
  }
  if (shmem_enabled.find("[deny]") != std::string::npos) return "4 KiB pages (shmem_enabled deny)";
  std::string huge;
  std::stringstream options(mount_options);
  for (std::string option; std::getline(options, option, ',');) {
    if (option.rfind("huge=", 0) == 0) huge = option.substr(5);
  }
  if (huge == "always" || huge == "within_size") return "2 MiB pages (huge=" + huge + ")";
  if (huge == "advise") return "4 KiB pages (huge=advise: file pools do not advise)";
  if (huge.empty() || huge == "never") return "4 KiB pages (mounted without huge=)";
  return "";
}

std::string AnonymousPages(const std::string& thp_enabled) {
  if (thp_enabled.find("[always]") != std::string::npos ||
      thp_enabled.find("[madvise]") != std::string::npos) {
    return "2 MiB pages (transparent huge pages)";
  }
  if (thp_enabled.find("[never]") != std::string::npos) {
    return "4 KiB pages (transparent huge pages off)";
  }
  return "";
}

std::string MountOptions(const std::string& proc_mounts, const std::string& path) {
  std::string best_point, best_options;
  std::stringstream lines(proc_mounts);
  for (std::string line; std::getline(lines, line);) {
    std::stringstream fields(line);
    std::string device, point, type, options;
    if (!(fields >> device >> point >> type >> options)) continue;
    const bool contains =
        path.rfind(point, 0) == 0 &&
        (point == "/" || path.size() == point.size() || path[point.size()] == '/');
    // The later of two mounts on one point hides the earlier: >= keeps the last.
    if (contains && point.size() >= best_point.size()) {
      best_point = point;
      best_options = options;
    }
  }
  return best_options;
}

std::string PoolKind(const BenchConfig& config, const std::string& mapping) {
  if (config.pool == "dram" || config.redundancy || mapping == "dram") {
    const std::string thp = ReadText("/sys/kernel/mm/transparent_hugepage/enabled");
    return "DRAM" + WithPages(AnonymousPages(thp));
  }
  if (mapping == "dax") return "DAX file";
  std::string dir = config.pool;
  if (dir.empty()) {
    dir = IsDirectory("/dev/shm") ? "/dev/shm" : "/tmp";
  } else if (!IsDirectory(dir)) {
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
  }
  struct statfs fs;
  if (::statfs(dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
    std::string pages;
    if (char* real = ::realpath(dir.c_str(), nullptr)) {
      pages = TmpfsPages(MountOptions(ReadText("/proc/mounts"), real),
                         ReadText("/sys/kernel/mm/transparent_hugepage/shmem_enabled"));
      std::free(real);
    }
    return "tmpfs file" + WithPages(pages);
  }
  return "file on a non-DAX file system";
}

Status PoolPath(const BenchConfig& config, const std::string& suffix, std::string* path) {
  static std::atomic<int> counter{0};
  if (config.pool == "dram") {
    path->clear();
    return Status::OK();
  }
  std::string dir = config.pool;
  if (dir.empty()) dir = IsDirectory("/dev/shm") ? "/dev/shm" : "/tmp";
  if (IsDirectory(dir)) {
    *path = dir + "/pmhash-bench-" + std::to_string(::getpid()) + "-" +
            std::to_string(counter.fetch_add(1)) + suffix + ".pool";
  } else {
    *path = config.pool + suffix;
  }
  if (Exists(*path)) {
    return Status::AlreadyExists("--pool " + *path +
                                 " exists; the benchmark needs a fresh pool (remove it, or "
                                 "pass a directory)");
  }
  return Status::OK();
}

PoolGuard::PoolGuard(std::string path) : path_(std::move(path)) {
  if (!path_.empty()) TrackPool(path_);
}

PoolGuard::~PoolGuard() { ForgetPool(path_); }

void InstallCleanupHandler() {
  ::signal(SIGINT, OnSignal);
  ::signal(SIGTERM, OnSignal);
}

uint64_t EstimatePoolSize(const BenchConfig& config, uint64_t keys) {
  const bool inline_kv = config.key_size == 8 && config.value_size.fixed() &&
                         config.value_size.min == 8;
  // Out-of-line record: lengths + key + value, in the allocator's size classes.
  uint64_t record = 0;
  if (!inline_kv) {
    record = 8 + config.key_size + config.value_size.max;
    record = record < 64 ? (record + 15) / 16 * 16 : record < 256 ? (record + 63) / 64 * 64
                                                                  : (record + 255) / 256 * 256;
  }
  // Tables: slots of 16 bytes plus metadata, at a load factor as low as 1/4 after a
  // doubling, with the old table alive while the new one fills.
  const uint64_t table = keys * 32 * 4;
  uint64_t size = table + keys * record * 5 / 4 + (64ull << 20);
  size = (size + (2ull << 20) - 1) / (2ull << 20) * (2ull << 20);
  return std::clamp<uint64_t>(size, pm::kMinPoolSize, pm::kMaxPoolSize);
}

uint64_t PoolSizeFor(const BenchConfig& config, uint64_t keys) {
  if (config.pool_size != 0) return config.pool_size;
  const uint64_t size = EstimatePoolSize(config, keys);
  return config.redundancy ? std::min(size, kDefaultRedundancyPool) : size;
}

}  // namespace pmhash::bench
