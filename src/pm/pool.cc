#include "pm/pool.h"

#include <fcntl.h>
#include <linux/mman.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "pm/regions.h"
#include "util/errors.h"
#include "util/hash.h"

namespace pmhash::pm {

namespace {

uint64_t HeaderChecksum(const PoolHeader& h) {
  return Hash64(&h, offsetof(PoolHeader, checksum), 0x706d68617368ull);
}

bool KnownState(uint64_t word) {
  return word == uint64_t(PoolState::kCreating) || word == uint64_t(PoolState::kOpen) ||
         word == uint64_t(PoolState::kClean);
}

std::string Hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Reads exactly len bytes at offset 0; a short file is reported through *got.
Status ReadPrefix(int fd, void* buf, size_t len, size_t* got, const std::string& path) {
  *got = 0;
  while (*got < len) {
    ssize_t n = pread(fd, static_cast<char*>(buf) + *got, len - *got, *got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("cannot read " + path, errno);
    }
    if (n == 0) break;
    *got += n;
  }
  return Status::OK();
}

std::string HexUuid(const uint8_t* uuid) {
  char buf[33];
  for (int i = 0; i < 16; ++i) std::snprintf(buf + 2 * i, 3, "%02x", uuid[i]);
  return std::string(buf, 32);
}

std::string EngineName(const PoolHeader& h) {
  return std::string(h.engine, strnlen(h.engine, kEngineNameSize));
}

const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

Status NotRegular(const std::string& path, mode_t mode) {
  std::string msg = path + " is " + FileTypeName(mode) + ", not a regular file";
  if (S_ISCHR(mode) || S_ISBLK(mode)) {
    msg += " (devices, device DAX included, are not supported: use a file on a DAX-mounted "
           "file system)";
  }
  return Status::InvalidArgument(msg);
}

}  // namespace

Status Pool::OpenFile(const std::string& path, int flags, int* fd_out, uint64_t* size) {
  // The type first, for a clear message (open(2) fails on a socket with ENXIO); then open
  // without blocking (a FIFO opened for reading would wait for a writer) and fstat the
  // descriptor itself, in case the path changed in between.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  const int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open pool " + path, errno);
  Status s;
  if (fstat(fd, &st) != 0) {
    s = ErrnoStatus("cannot stat " + path, errno);
  } else if (!S_ISREG(st.st_mode)) {
    s = NotRegular(path, st.st_mode);
  } else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    s = ErrnoStatus("cannot open pool " + path, errno);
  }
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  *fd_out = fd;
  *size = st.st_size;
  return Status::OK();
}

const char* PoolStateName(PoolState state) {
  switch (state) {
    case PoolState::kCreating: return "creating";
    case PoolState::kOpen: return "open";
    case PoolState::kClean: return "clean";
  }
  return "?";
}

const char* RegionName(Region region) {
  switch (region) {
    case Region::kFree: return "free space";
    case Region::kPoolHeader: return "pool header";
    case Region::kUndoLog: return "undo log";
    case Region::kAllocator: return "allocator metadata";
    case Region::kEngineMetadata: return "engine root/metadata";
    case Region::kSlots: return "slots";
    case Region::kRecords: return "records";
  }
  return "?";
}

const char* HashSeedOriginName(HashSeedOrigin origin) {
  switch (origin) {
    case HashSeedOrigin::kNone: return "none (layout 3: seed 0)";
    case HashSeedOrigin::kRandom: return "random";
    case HashSeedOrigin::kChosen: return "chosen";
  }
  return "?";
}

const char* MappingName(Mapping m) {
  switch (m) {
    case Mapping::kDax: return "dax";
    case Mapping::kShared: return "shared";
    case Mapping::kDram: return "dram";
  }
  return "?";
}

Status Pool::InitHeader(PoolHeader* h, std::string_view engine, uint64_t size,
                        std::optional<uint64_t> hash_seed) {
  std::memset(static_cast<void*>(h), 0, sizeof(*h));
  if (hash_seed.has_value()) {
    h->hash_seed = *hash_seed;
    h->hash_seed_origin = static_cast<uint32_t>(HashSeedOrigin::kChosen);
  } else {
    // No fallback to a clock: a guessable seed is what the seed exists to prevent.
    if (getrandom(&h->hash_seed, sizeof(h->hash_seed), 0) != sizeof(h->hash_seed)) {
      return ErrnoStatus("cannot draw a random hash seed for a new pool (getrandom)", errno);
    }
    h->hash_seed_origin = static_cast<uint32_t>(HashSeedOrigin::kRandom);
  }
  std::memcpy(h->magic, kPoolMagic, sizeof(kPoolMagic));
  h->layout_version = kPoolLayoutVersion;
  h->header_size = kPoolHeaderSize;
  std::memcpy(h->engine, engine.data(), engine.size());
  if (getrandom(h->uuid, sizeof(h->uuid), 0) != sizeof(h->uuid)) {
    const uint64_t t = std::chrono::steady_clock::now().time_since_epoch().count();
    std::memcpy(h->uuid, &t, sizeof(t));
  }
  h->pool_size = size;
  h->root_offset = kRootOffset;
  h->root_size = kRootSize;
  // Undo-log lanes: 1/64 of the pool, between 256 KiB and 4 MiB.
  h->log_offset = kRootOffset + kRootSize;
  h->log_size = std::clamp<uint64_t>(AlignUp(size / 64, 4096), 256 << 10, 4 << 20);
  h->heap_offset = AlignUp(h->log_offset + h->log_size, 4096);
  h->heap_size = size - h->heap_offset;
  h->created_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  h->checksum = HeaderChecksum(*h);
  h->state = uint64_t(PoolState::kCreating);
  return Status::OK();
}

Status Pool::Validate(const PoolHeader& h, uint64_t file_size, std::string_view engine,
                      const std::string& what) {
  if (std::memcmp(h.magic, kPoolMagic, sizeof(kPoolMagic)) != 0) {
    return Status::Corruption(what + " is not a pmhash pool (bad magic)");
  }
  if (h.layout_version < kOldestPoolLayoutVersion || h.layout_version > kPoolLayoutVersion) {
    return Status::InvalidArgument(
        what + " has pool layout version " + std::to_string(h.layout_version) +
        "; this pmhash reads versions " + std::to_string(kOldestPoolLayoutVersion) + " and " +
        std::to_string(kPoolLayoutVersion) +
        (h.layout_version < kOldestPoolLayoutVersion
             ? " (the pool was made by an older pmhash: re-create it and load its data again)"
             : " (the pool was made by a newer pmhash)"));
  }
  if (HeaderChecksum(h) != h.checksum) {
    return Status::Corruption(what + ": pool header checksum mismatch over bytes [0, " +
                              std::to_string(offsetof(PoolHeader, checksum)) +
                              ") (header damaged)");
  }
  if (!KnownState(h.state)) {
    return Status::Corruption(what + ": pool state word at offset " +
                              std::to_string(kPoolStateOffset) + " reads " + Hex64(h.state) +
                              ", which is not creating, open or clean (header damaged)");
  }
  // Every area within the pool, in order, with no sum that can overflow (the checksum
  // only proves the header is as written, not that a crafted one is sane).
  if (h.header_size != kPoolHeaderSize || h.root_offset != kRootOffset ||
      h.root_size != kRootSize || h.pool_size < kMinPoolSize || h.pool_size > kMaxPoolSize ||
      h.log_offset != kRootOffset + kRootSize || h.log_size > h.pool_size ||
      h.heap_offset > h.pool_size || h.heap_offset < h.log_offset + h.log_size ||
      h.heap_size != h.pool_size - h.heap_offset || h.engine[kEngineNameSize - 1] != 0) {
    return Status::Corruption(what + ": pool header fields are inconsistent");
  }
  // Layout 3 kept zero where layout 4 keeps the seed: a seed there is not layout 3's.
  const bool seeded = h.layout_version >= 4;
  const auto origin = static_cast<HashSeedOrigin>(h.hash_seed_origin);
  if (h.pad != 0 || (seeded ? origin != HashSeedOrigin::kRandom && origin != HashSeedOrigin::kChosen
                            : h.hash_seed != 0 || origin != HashSeedOrigin::kNone)) {
    return Status::Corruption(what + ": pool header hash seed fields (offset " +
                              std::to_string(offsetof(PoolHeader, hash_seed)) +
                              ") do not fit layout version " + std::to_string(h.layout_version));
  }
  if (file_size < h.pool_size) {
    return Status::Corruption(what + " is truncated: the header says " +
                              std::to_string(h.pool_size) + " bytes, the file has " +
                              std::to_string(file_size));
  }
  if (!engine.empty() && EngineName(h) != engine) {
    return Status::InvalidArgument(what + " holds engine '" + EngineName(h) +
                                   "', not '" + std::string(engine) + "'");
  }
  return Status::OK();
}

static Status CheckCreateArgs(std::string_view engine, uint64_t size) {
  if (engine.empty() || engine.size() >= kEngineNameSize) {
    return Status::InvalidArgument("engine name must be 1 to 31 characters");
  }
  if (size < kMinPoolSize || size > kMaxPoolSize) {
    return Status::InvalidArgument("pool size must be between 4 MiB and 1 TiB, got " +
                                   std::to_string(size) + " bytes");
  }
  return Status::OK();
}

Status Pool::Create(const std::string& path, std::string_view engine, uint64_t size,
                    std::unique_ptr<Pool>* pool, std::optional<uint64_t> hash_seed) {
  PMHASH_RETURN_IF_ERROR(CheckCreateArgs(engine, size));
  size = AlignUp(size, 4096);
  if (access(path.c_str(), F_OK) == 0) {
    return Status::AlreadyExists("pool " + path + " already exists");
  }
  const std::string tmp = path + ".creating." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create pool " + path, errno);
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  if (int err = posix_fallocate(fd, 0, size); err != 0) {
    return fail(ErrnoStatus("cannot reserve " + std::to_string(size) + " bytes for " + path, err));
  }
  PoolHeader h;
  if (Status s = InitHeader(&h, engine, size, hash_seed); !s.ok()) return fail(s);
  if (pwrite(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h)) || fsync(fd) != 0) {
    return fail(ErrnoStatus("cannot write pool header of " + path, errno));
  }
  // Appear atomically, never replacing a file created meanwhile.
  if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
    return fail(ErrnoStatus("cannot create pool " + path, errno));
  }
  ::close(fd);
  return Open(path, engine, pool);  // in state kCreating
}

Status Pool::Inspect(const std::string& path, PoolInfo* info) {
  int fd = -1;
  uint64_t file_size = 0;
  PMHASH_RETURN_IF_ERROR(OpenFile(path, O_RDONLY, &fd, &file_size));
  Status s = InspectFd(fd, file_size, path, info);
  ::close(fd);
  return s;
}

Status Pool::InspectFd(int fd, uint64_t file_size, const std::string& path, PoolInfo* info) {
  alignas(64) char buf[kPoolHeaderSize];
  size_t got;
  PMHASH_RETURN_IF_ERROR(ReadPrefix(fd, buf, sizeof(buf), &got, path));
  if (got == 0) return Status::Corruption(path + " is empty, not a pmhash pool");
  if (got < kPoolHeaderSize) {
    if (got < sizeof(kPoolMagic) || std::memcmp(buf, kPoolMagic, sizeof(kPoolMagic)) != 0) {
      return Status::Corruption(path + " is not a pmhash pool (too short, bad magic)");
    }
    return Status::Corruption(path + " is truncated: " + std::to_string(got) +
                              " bytes, shorter than the 4096-byte pool header");
  }
  const PoolHeader& h = *reinterpret_cast<const PoolHeader*>(buf);
  PMHASH_RETURN_IF_ERROR(Validate(h, file_size, "", path));
  info->engine = EngineName(h);
  info->uuid = HexUuid(h.uuid);
  info->pool_size = h.pool_size;
  info->file_size = file_size;
  info->layout_version = h.layout_version;
  info->header_size = h.header_size;
  info->root_offset = h.root_offset;
  info->root_size = h.root_size;
  info->log_offset = h.log_offset;
  info->log_size = h.log_size;
  info->heap_offset = h.heap_offset;
  info->heap_size = h.heap_size;
  info->created_unix_ns = h.created_unix_ns;
  info->hash_seed = h.hash_seed;
  info->hash_seed_origin = static_cast<HashSeedOrigin>(h.hash_seed_origin);
  info->checksum = h.checksum;
  info->state = static_cast<PoolState>(h.state);
  return Status::OK();
}

Status Pool::Open(const std::string& path, std::string_view engine,
                  std::unique_ptr<Pool>* pool) {
  int fd = -1;
  uint64_t file_size = 0;
  PMHASH_RETURN_IF_ERROR(OpenFile(path, O_RDWR, &fd, &file_size));
  auto fail = [&](Status s) {
    ::close(fd);
    return s;
  };
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return fail(Status::Busy("pool " + path + " is in use by another process"));
    }
    return fail(ErrnoStatus("cannot lock pool " + path, errno));
  }
  // Read through the locked descriptor: the header is the one of the file we hold.
  PoolInfo info;
  Status s = InspectFd(fd, file_size, path, &info);
  if (!s.ok()) return fail(s);
  if (!engine.empty() && info.engine != engine) {
    return fail(Status::InvalidArgument(path + " holds engine '" + info.engine + "', not '" +
                                        std::string(engine) + "'"));
  }
  const uint64_t size = info.pool_size;
  Mapping mapping = Mapping::kDax;
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                    MAP_SHARED_VALIDATE | MAP_SYNC | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    mapping = Mapping::kShared;
    base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  }
  if (base == MAP_FAILED) return fail(ErrnoStatus("cannot map pool " + path, errno));
  std::unique_ptr<Pool> p(new Pool);
  p->base_ = static_cast<char*>(base);
  p->size_ = size;
  p->mapping_ = mapping;
  p->fd_ = fd;
  p->path_ = path;
  p->state_at_open_ = info.state;
  *pool = std::move(p);
  return Status::OK();
}

Status Pool::CreateDram(std::string_view engine, uint64_t size, std::unique_ptr<Pool>* pool,
                        std::optional<uint64_t> hash_seed) {
  PMHASH_RETURN_IF_ERROR(CheckCreateArgs(engine, size));
  size = AlignUp(size, 4096);
  PoolHeader h;
  PMHASH_RETURN_IF_ERROR(InitHeader(&h, engine, size, hash_seed));
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return ErrnoStatus("cannot allocate a DRAM pool", errno);
  madvise(base, size, MADV_HUGEPAGE);
  std::unique_ptr<Pool> p(new Pool);
  p->base_ = static_cast<char*>(base);
  p->size_ = size;
  p->mapping_ = Mapping::kDram;
  std::memcpy(p->base_, &h, sizeof(h));
  p->state_at_open_ = PoolState::kCreating;
  *pool = std::move(p);
  return Status::OK();
}

Status Pool::FromImage(const void* image, size_t size, std::string_view engine,
                       std::unique_ptr<Pool>* pool) {
  if (size < kPoolHeaderSize) return Status::Corruption("crash image shorter than a header");
  const PoolHeader& h = *static_cast<const PoolHeader*>(image);
  PMHASH_RETURN_IF_ERROR(Validate(h, size, engine, "crash image"));
  void* base =
      mmap(nullptr, h.pool_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return ErrnoStatus("cannot allocate a DRAM pool", errno);
  std::memcpy(base, image, h.pool_size);
  *pool = OverValidImage(static_cast<char*>(base), /*owns_memory=*/true);
  return Status::OK();
}

std::unique_ptr<Pool> Pool::OverValidImage(char* base, bool owns_memory) {
  std::unique_ptr<Pool> p(new Pool);
  p->base_ = base;
  p->size_ = reinterpret_cast<const PoolHeader*>(base)->pool_size;
  p->mapping_ = Mapping::kDram;
  p->owns_memory_ = owns_memory;
  p->state_at_open_ = p->state();
  return p;
}

Pool::~Pool() {
  if (base_ != nullptr && owns_memory_) munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::string Pool::engine() const { return EngineName(header()); }

uint64_t Pool::hash_seed() const { return header().hash_seed; }  // layout 3: 0 (Validate)

HashSeedOrigin Pool::hash_seed_origin() const {
  return static_cast<HashSeedOrigin>(header().hash_seed_origin);
}

Status Pool::Adopt(void* base, size_t size, std::string_view engine,
                   std::unique_ptr<Pool>* pool) {
  if (size < kPoolHeaderSize) return Status::Corruption("crash image shorter than a header");
  const PoolHeader& h = *static_cast<const PoolHeader*>(base);
  PMHASH_RETURN_IF_ERROR(Validate(h, size, engine, "crash image"));
  *pool = OverValidImage(static_cast<char*>(base), /*owns_memory=*/false);
  return Status::OK();
}

Status Pool::StoreState(Persister& persister, PoolState state) {
  auto* word = &reinterpret_cast<PoolHeader*>(base_)->state;
  persister.Store(word, uint64_t(state));  // one failure-atomic store
  persister.Persist(word, sizeof(*word));
  // Without DAX the kernel writes pages back in any order: the header page is synced
  // now, not left to a later write-back that could follow or precede the data's.
  return SyncRange(0, kPoolHeaderSize);
}

Status Pool::MarkInUse(Persister& persister) {
  // A power failure must not find "clean" over newer data.
  if (state() != PoolState::kClean) return Status::OK();
  return StoreState(persister, PoolState::kOpen);
}

Status Pool::MarkCreated(Persister& persister) {
  if (state() != PoolState::kCreating) {
    return Status::InvalidArgument(std::string("pool is ") + PoolStateName(state()) +
                                   ", not being created");
  }
  PMHASH_RETURN_IF_ERROR(Sync());  // the empty index durable before the state says so
  return StoreState(persister, PoolState::kOpen);
}

Status Pool::MarkClean(Persister& persister) {
  if (state() == PoolState::kCreating) {
    return Status::InvalidArgument("pool creation never finished: it cannot be marked clean");
  }
  PMHASH_RETURN_IF_ERROR(Sync());
  return StoreState(persister, PoolState::kClean);
}

Status Pool::Sync() { return SyncRange(0, size_); }

Status Pool::SyncRange(uint64_t offset, uint64_t len) {
  if (mapping_ != Mapping::kShared) return Status::OK();
  if (msync(base_ + offset, len, MS_SYNC) != 0) return ErrnoStatus("msync of " + path_, errno);
  return Status::OK();
}

}  // namespace pmhash::pm
