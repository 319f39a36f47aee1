// Pool: one file (or anonymous DRAM, or a crash image) holding one index.
//
// On-media layout (all offsets from the start of the file):
//
//   [0, 4096)            PoolHeader (below)     the whole page is validated at open
//     [0, 128)             identity and layout  immutable after creation
//     [128, 144)           key hashing          hash seed and its origin (layout 4; zero
//                                               in layout 3), immutable after creation
//     [144, 4080)          zero                 reserved; covered by the checksum
//     [4080, 4088)         checksum             Hash64 of [0, 4080)
//     [4088, 4096)         state                the one mutable word (PoolState)
//   [4096, 8192)         root area              owned by the engine, zero at creation
//   [log_offset, +size)  undo-log lanes         src/pm/undo_log.h
//   [heap_offset, +size) allocator heap         src/pm/alloc.h
//
// The state word is the only thing in the header that changes after creation; it is
// written with one failure-atomic 8-byte store, and holds one of three constants that
// differ in at least 4 of their 8 bytes (kPoolStateMinBytesApart), so a torn, flipped or
// zeroed state is never another valid state: it is Corruption, naming offset 4088.
//
//   kCreating   written with the header, before anything else. The file itself appears
//               whole (Pool::Create writes the header aside, fsyncs, renames), so what a
//               crash can leave half-done is the engine's creation in the mapped pool (root,
//               undo log, allocator): a pool that opens as kCreating never acknowledged
//               anything and is created again from nothing. This positive marker is the
//               only way a pool is ever formatted on open.
//   kOpen       the engine's empty index exists in full (set once at the end of creation,
//               after the whole pool is durable) and the pool is in use or crashed: the
//               next open recovers it.
//   kClean      closed cleanly (Close): the next open skips recovery.
//
// Transitions: kCreating -> kOpen (MarkCreated), kClean -> kOpen (MarkInUse, at every
// open), kOpen -> kClean (MarkClean). Opening validates everything before mapping and never
// writes on failure.
//
// The key-hash seed (layout 4): every engine hashes user keys with xxh3 seeded with it
// (engines/engine.h, Engine::KeyHash), so that keys crafted to collide under one seed do
// not collide in another pool (docs/reliability.md, "Crafted keys"). It is chosen when the
// pool is created (random by default, from getrandom; or given by the creator, e.g. a
// benchmark that wants its figures to repeat) and never changes: every key's place in the
// pool depends on it. A pool of layout 3 (made before seeds) has no seed field; it opens
// as before, hashing with seed 0, and says so (hash_seed_origin() is kNone).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "pm/persist.h"
#include "pmhash/status.h"

namespace pmhash::pm {

inline constexpr char kPoolMagic[8] = {'P', 'M', 'H', 'A', 'S', 'H', 'P', 'L'};
// 3: the whole header page checksummed, the state word (was: clean and initialized flags
// outside the checksum); checksummed chunk-table entries, undo-log lanes and records.
// 4: as 3, plus the key-hash seed and its origin at offset 128 (zero in a layout-3 header,
// so layout 3 still opens, with seed 0). New pools are made with kPoolLayoutVersion.
inline constexpr uint32_t kPoolLayoutVersion = 4;
inline constexpr uint32_t kOldestPoolLayoutVersion = 3;
inline constexpr size_t kPoolHeaderSize = 4096;
inline constexpr size_t kRootOffset = 4096;
inline constexpr size_t kRootSize = 4096;
inline constexpr size_t kEngineNameSize = 32;
inline constexpr uint64_t kMinPoolSize = 4ull << 20;
inline constexpr uint64_t kMaxPoolSize = 1ull << 40;

// The values of the header's state word (ASCII, readable in a hex dump).
enum class PoolState : uint64_t {
  kCreating = 0x474e495441455243,  // "CREATING"
  kOpen = 0x4553552d4e45504f,      // "OPEN-USE": in use, or crashed
  kClean = 0x4b4f4445534f4c43,     // "CLOSEDOK": closed cleanly
};
const char* PoolStateName(PoolState state);  // "creating", "open", "clean"

// Where a pool's key-hash seed came from (PoolHeader::hash_seed_origin).
enum class HashSeedOrigin : uint32_t {
  kNone = 0,    // layout 3: no seed field; keys hash with seed 0
  kRandom = 1,  // drawn from getrandom at creation (the default)
  kChosen = 2,  // given by the creator (Options::hash_seed)
};
// "none (layout 3: seed 0)", "random", "chosen".
const char* HashSeedOriginName(HashSeedOrigin origin);

struct PoolHeader {
  char magic[8];
  uint32_t layout_version;
  uint32_t header_size;
  char engine[kEngineNameSize];  // NUL-padded registered engine name
  uint8_t uuid[16];
  uint64_t pool_size;
  uint64_t root_offset, root_size;
  uint64_t log_offset, log_size;
  uint64_t heap_offset, heap_size;
  uint64_t created_unix_ns;
  uint64_t hash_seed;         // layout 4: the key-hash seed (layout 3: zero, no seed)
  uint32_t hash_seed_origin;  // layout 4: a HashSeedOrigin other than kNone (layout 3: 0)
  uint32_t pad;               // zero
  uint8_t reserved[3936];     // zero
  uint64_t checksum;       // Hash64 of every byte before this field
  uint64_t state;          // a PoolState; outside the checksum (it changes)
};
static_assert(offsetof(PoolHeader, magic) == 0 && offsetof(PoolHeader, layout_version) == 8 &&
                  offsetof(PoolHeader, header_size) == 12 && offsetof(PoolHeader, engine) == 16 &&
                  offsetof(PoolHeader, uuid) == 48 && offsetof(PoolHeader, pool_size) == 64 &&
                  offsetof(PoolHeader, root_offset) == 72 &&
                  offsetof(PoolHeader, root_size) == 80 &&
                  offsetof(PoolHeader, log_offset) == 88 && offsetof(PoolHeader, log_size) == 96 &&
                  offsetof(PoolHeader, heap_offset) == 104 &&
                  offsetof(PoolHeader, heap_size) == 112 &&
                  offsetof(PoolHeader, created_unix_ns) == 120 &&
                  offsetof(PoolHeader, hash_seed) == 128 &&
                  offsetof(PoolHeader, hash_seed_origin) == 136 &&
                  offsetof(PoolHeader, reserved) == 144,
              "the identity fields are on-media format (see the layout above); the seed "
              "lies where layout 3 kept zero, so a layout-3 header reads as seed 0");
static_assert(offsetof(PoolHeader, checksum) == 4080 && offsetof(PoolHeader, state) == 4088 &&
                  sizeof(PoolHeader) == kPoolHeaderSize,
              "the checksum covers [0, 4080); the state word is the page's last 8 bytes");
inline constexpr size_t kPoolStateOffset = offsetof(PoolHeader, state);

// How many of their 8 bytes the state constants differ in, pairwise (at least).
constexpr int kPoolStateMinBytesApart = 4;
constexpr int BytesApart(uint64_t a, uint64_t b) {
  int n = 0;
  for (int i = 0; i < 8; ++i) n += ((a >> (8 * i)) & 0xff) != ((b >> (8 * i)) & 0xff);
  return n;
}
static_assert(BytesApart(uint64_t(PoolState::kCreating), uint64_t(PoolState::kOpen)) >=
                      kPoolStateMinBytesApart &&
                  BytesApart(uint64_t(PoolState::kCreating), uint64_t(PoolState::kClean)) >=
                      kPoolStateMinBytesApart &&
                  BytesApart(uint64_t(PoolState::kOpen), uint64_t(PoolState::kClean)) >=
                      kPoolStateMinBytesApart,
              "no damage to fewer bytes than this turns one valid state into another");

// Where a pool's memory comes from.
enum class Mapping : uint8_t {
  kDax,     // MAP_SYNC file mapping: flushed stores are durable
  kShared,  // MAP_SHARED file mapping: durable against process crash; msync for power
  kDram,    // anonymous memory: volatile (benchmarks, crash-simulator images)
};
const char* MappingName(Mapping m);

// What a header says, for `pmhash pool info` and for tests.
struct PoolInfo {
  std::string engine;
  std::string uuid;  // 32 hex digits
  uint64_t pool_size = 0;
  uint64_t file_size = 0;
  uint32_t layout_version = 0;
  uint32_t header_size = 0;
  uint64_t root_offset = 0, root_size = 0, log_offset = 0, log_size = 0, heap_offset = 0,
           heap_size = 0;
  uint64_t created_unix_ns = 0;
  uint64_t hash_seed = 0;  // 0 for layout 3
  HashSeedOrigin hash_seed_origin = HashSeedOrigin::kNone;
  uint64_t checksum = 0;
  PoolState state = PoolState::kCreating;
};

class Pool {
 public:
  // Creates a pool file of `size` bytes for `engine` (fails with AlreadyExists if the
  // path exists). Space is reserved up front, so a full file system is an error here,
  // not a SIGBUS later. The file appears atomically (written aside, then renamed).
  // `hash_seed`: the pool's key-hash seed (any value); unset, a random one (getrandom;
  // IOError if the kernel gives none).
  static Status Create(const std::string& path, std::string_view engine, uint64_t size,
                       std::unique_ptr<Pool>* pool,
                       std::optional<uint64_t> hash_seed = std::nullopt);

  // Opens an existing pool, locking it against other processes (Busy if locked).
  // `engine` may be empty (accept any); otherwise it must match the header.
  static Status Open(const std::string& path, std::string_view engine,
                     std::unique_ptr<Pool>* pool);

  // A volatile pool in anonymous memory, laid out like a file pool (`hash_seed` as Create).
  static Status CreateDram(std::string_view engine, uint64_t size, std::unique_ptr<Pool>* pool,
                           std::optional<uint64_t> hash_seed = std::nullopt);

  // A volatile pool whose bytes are a copy of `image` (a crash image). Validated like
  // a file.
  static Status FromImage(const void* image, size_t size, std::string_view engine,
                          std::unique_ptr<Pool>* pool);

  // A pool over caller-owned memory that already holds a pool image, validated like
  // FromImage but without copying: the crash simulator rebuilds images in one reused
  // buffer. The memory is not freed by the Pool and must outlive it.
  static Status Adopt(void* base, size_t size, std::string_view engine,
                      std::unique_ptr<Pool>* pool);

  // Reads and validates the header of a file without locking or mapping it.
  static Status Inspect(const std::string& path, PoolInfo* info);

  // Opens `path` (open(2) flags, e.g. O_RDONLY) for what reads or maps a pool file, and
  // its size. Anything but a regular file (a directory, FIFO, socket or device) is
  // InvalidArgument naming its type, found without blocking: the path is opened with
  // O_NONBLOCK (cleared afterwards) and checked with fstat, so a FIFO never hangs the
  // caller. Device DAX (a character device) is not supported: use a file on a DAX-mounted
  // file system. The caller closes *fd.
  static Status OpenFile(const std::string& path, int flags, int* fd, uint64_t* size);

  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  char* base() const { return base_; }
  uint64_t size() const { return size_; }
  Mapping mapping() const { return mapping_; }
  const PoolHeader& header() const { return *reinterpret_cast<const PoolHeader*>(base_); }
  std::string engine() const;
  const std::string& path() const { return path_; }
  // The key-hash seed (0 for a layout-3 pool) and where it came from.
  uint64_t hash_seed() const;
  HashSeedOrigin hash_seed_origin() const;

  void* root() const { return base_ + kRootOffset; }
  char* log_area() const { return base_ + header().log_offset; }
  uint64_t log_size() const { return header().log_size; }
  char* heap() const { return base_ + header().heap_offset; }
  uint64_t heap_offset() const { return header().heap_offset; }
  uint64_t heap_size() const { return header().heap_size; }

  // Pool offsets <-> addresses. Offset 0 is the header, so it serves as "null".
  uint64_t ToOffset(const void* p) const { return static_cast<const char*>(p) - base_; }
  template <typename T = void>
  T* At(uint64_t offset) const { return reinterpret_cast<T*>(base_ + offset); }
  bool Contains(uint64_t offset, uint64_t len) const {
    return offset <= size_ && len <= size_ - offset;
  }

  // The state word (see the layout above) as it was when the pool was opened or made.
  PoolState state_at_open() const { return state_at_open_; }
  bool was_clean_at_open() const { return state_at_open_ == PoolState::kClean; }
  // True when the pool must be created from nothing: new, or its creation crashed.
  bool needs_creation() const { return state_at_open_ == PoolState::kCreating; }
  // The state word now.
  PoolState state() const { return static_cast<PoolState>(header().state); }
  // kClean -> kOpen, durably (an open pool is "not clean" until Close); for a file
  // mapping also msyncs the header page. Any other state is left as it is.
  Status MarkInUse(Persister& persister);
  // kCreating -> kOpen once the engine's empty index exists: syncs the whole pool first
  // (file mappings), so the state never vouches for a creation that is not durable.
  // InvalidArgument in any other state.
  Status MarkCreated(Persister& persister);
  // kOpen -> kClean, durably; for a file mapping also msyncs the whole pool first.
  // InvalidArgument while the pool is kCreating (its creation never finished).
  Status MarkClean(Persister& persister);

  // Durability against power failure for kShared mappings (msync); no-op otherwise.
  Status Sync();

 private:
  Pool() = default;
  // `h` is a whole header page.
  static Status Validate(const PoolHeader& h, uint64_t file_size, std::string_view engine,
                         const std::string& what);
  // A DRAM pool over a validated image, in the image's state.
  static std::unique_ptr<Pool> OverValidImage(char* base, bool owns_memory);
  Status StoreState(Persister& persister, PoolState state);
  static Status InspectFd(int fd, uint64_t file_size, const std::string& path, PoolInfo* info);
  Status SyncRange(uint64_t offset, uint64_t len);
  static Status InitHeader(PoolHeader* h, std::string_view engine, uint64_t size,
                           std::optional<uint64_t> hash_seed);

  char* base_ = nullptr;
  uint64_t size_ = 0;
  Mapping mapping_ = Mapping::kDram;
  int fd_ = -1;
  PoolState state_at_open_ = PoolState::kCreating;
  bool owns_memory_ = true;  // false for Adopt
  std::string path_;
};

}  // namespace pmhash::pm
