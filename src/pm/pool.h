// Pool: one file (or anonymous DRAM, or a crash image) holding one index.
//
// On-media layout (all offsets from the start of the file):
//
//   [0, 4096)            PoolHeader            immutable after creation, checksummed
//     [0, 192)             identity and layout (below)
//     [2048, 2056)         clean_shutdown       1 after Close(), 0 while open or crashed
//     [2056, 2064)         initialized          1 once the engine's empty index exists in
//                                               full; 0 in a new pool, or one whose
//                                               creation a crash interrupted (it is then
//                                               created again from nothing)
//   [4096, 8192)         root area              owned by the engine, zero at creation
//   [log_offset, +size)  undo-log lanes         src/pm/undo_log.h
//   [heap_offset, +size) allocator heap         src/pm/alloc.h
//
// Opening validates everything before mapping and never writes on failure. The mutable
// flags sit outside the checksummed bytes, on a line of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "pm/persist.h"
#include "pmhash/status.h"

namespace pmhash::pm {

inline constexpr char kPoolMagic[8] = {'P', 'M', 'H', 'A', 'S', 'H', 'P', 'L'};
inline constexpr uint32_t kPoolLayoutVersion = 2;  // 2: the initialized flag
inline constexpr size_t kPoolHeaderSize = 4096;
inline constexpr size_t kRootOffset = 4096;
inline constexpr size_t kRootSize = 4096;
inline constexpr size_t kEngineNameSize = 32;
inline constexpr uint64_t kMinPoolSize = 4ull << 20;
inline constexpr uint64_t kMaxPoolSize = 1ull << 40;
inline constexpr size_t kCleanFlagOffset = 2048;
inline constexpr size_t kInitializedFlagOffset = 2056;

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
  uint64_t checksum;  // xxh3-64 of every byte before this field
};
static_assert(sizeof(PoolHeader) <= kCleanFlagOffset,
              "the checksummed header must not overlap the mutable clean flag");
static_assert(kCleanFlagOffset % 64 == 0 && kInitializedFlagOffset / 64 == kCleanFlagOffset / 64,
              "the mutable flags share a cache line of their own");

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
  uint64_t root_offset = 0, log_offset = 0, log_size = 0, heap_offset = 0, heap_size = 0;
  bool clean_shutdown = false;
  bool initialized = false;  // false: the engine's creation never finished
  uint64_t created_unix_ns = 0;
};

class Pool {
 public:
  // Creates a pool file of `size` bytes for `engine` (fails with AlreadyExists if the
  // path exists). Space is reserved up front, so a full file system is an error here,
  // not a SIGBUS later. The file appears atomically (written aside, then renamed).
  static Status Create(const std::string& path, std::string_view engine, uint64_t size,
                       std::unique_ptr<Pool>* pool);

  // Opens an existing pool, locking it against other processes (Busy if locked).
  // `engine` may be empty (accept any); otherwise it must match the header.
  static Status Open(const std::string& path, std::string_view engine,
                     std::unique_ptr<Pool>* pool);

  // A volatile pool in anonymous memory, laid out like a file pool.
  static Status CreateDram(std::string_view engine, uint64_t size, std::unique_ptr<Pool>* pool);

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

  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  char* base() const { return base_; }
  uint64_t size() const { return size_; }
  Mapping mapping() const { return mapping_; }
  const PoolHeader& header() const { return *reinterpret_cast<const PoolHeader*>(base_); }
  std::string engine() const;
  const std::string& path() const { return path_; }

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

  // The clean flag as it was when the pool was opened (true for a new pool).
  bool was_clean_at_open() const { return was_clean_; }
  // Clears the flag durably (an open pool is "not clean" until Close); for a file
  // mapping also msyncs the header page.
  Status MarkInUse(Persister& persister);
  // Whether the engine's creation finished (see the layout above), and marking it so.
  bool initialized() const;
  Status MarkInitialized(Persister& persister);
  // Sets the flag durably; for a file mapping also msyncs the whole pool.
  Status MarkClean(Persister& persister);

  // Durability against power failure for kShared mappings (msync); no-op otherwise.
  Status Sync();

 private:
  Pool() = default;
  static Status Validate(const PoolHeader& h, uint64_t file_size, std::string_view engine,
                         const std::string& what);
  static Status InspectFd(int fd, uint64_t file_size, const std::string& path, PoolInfo* info);
  Status SyncRange(uint64_t offset, uint64_t len);
  static void InitHeader(PoolHeader* h, std::string_view engine, uint64_t size);

  char* base_ = nullptr;
  uint64_t size_ = 0;
  Mapping mapping_ = Mapping::kDram;
  int fd_ = -1;
  bool was_clean_ = true;
  bool owns_memory_ = true;  // false for Adopt
  std::string path_;
};

}  // namespace pmhash::pm
