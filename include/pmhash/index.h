// The persistent hash index: one interface over every engine.
//
//   pmhash::Options options;
//   options.engine = "group";
//   options.path = "/mnt/pmem/my.pool";
//   options.create_if_missing = true;                   // default: open only
//   std::unique_ptr<pmhash::Index> index;
//   pmhash::Status s = pmhash::Open(options, &index);   // creates or recovers
//   s = index->Put("key", "value");
//
// Keys and values are byte strings (zero bytes allowed, empty allowed). Keys of up to
// kMaxKeySize bytes and values of up to kMaxValueSize bytes are accepted; longer ones are
// InvalidArgument. A key and value of exactly 8 bytes each are stored inline in the
// engine's slot (the papers' fast path); anything else is stored out of line.
//
// Durability: when a mutating call returns OK the change is durable (in kAdr and kEadr
// modes, on a DAX mapping; on a non-DAX file mapping it survives a process crash and,
// after Sync(), a power failure). A call interrupted by a crash is all-or-nothing.
//
// Threads: every method may be called from many threads at once, except Close().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash {

inline constexpr size_t kMaxKeySize = 64 * 1024;
inline constexpr size_t kMaxValueSize = 1024 * 1024;

// Persistence cost counters, summed over the calling threads since Open, with
// Options::count_stats (off by default: then all 0, and IndexStats::counted false). The
// media figures come from the substrate's model of an Optane-like device
// (docs/architecture.md, "Media model"): 256-byte media lines behind per-DIMM
// write-combining buffers and, in kEadr mode, a persistent CPU cache.
struct PersistCounters {
  uint64_t flushes = 0;          // cache lines written back for durability (kAdr only)
  uint64_t fences = 0;           // sfence/mfence issued
  uint64_t bytes_stored = 0;     // bytes the engine stored into PM
  uint64_t media_writes = 0;     // 256-byte media writes (write-combining buffer entries taken)
  uint64_t lines_read = 0;       // PM cache lines the operations read (each once per op)
  uint64_t redundant_flushes = 0;  // set only under the crash simulator
  uint64_t redundant_fences = 0;   // set only under the crash simulator
  uint64_t write_backs = 0;      // cache lines named by write-back hints (kAdr: also flushes)
  uint64_t lines_written = 0;    // 64-byte lines that reached the device (kAdr: flushed;
                                 // kEadr: evicted from or written back by the cache model)
  uint64_t media_reads = 0;      // 256-byte media lines the operations read (each once per op)
  uint64_t media_rmw_reads = 0;  // media reads of read-modify-writes (partly written lines)
  uint64_t user_bytes = 0;       // key + value bytes of the operations reported
  uint64_t ops = 0;              // operations reported (the engine's per-op bracketing)
  uint64_t emulated_write_waits = 0;   // media writes charged the emulated write latency
  uint64_t emulated_read_waits = 0;    // media reads charged the emulated read latency
  uint64_t emulated_reads_hidden = 0;  // ... of which a Prefetch had already covered all
};

struct IndexStats {
  std::string engine;
  uint64_t count = 0;           // keys stored
  uint64_t key_slots = 0;       // key slots allocated in PM (load factor denominator)
  double load_factor = 0;       // count / key_slots
  uint64_t pm_bytes = 0;        // PM bytes in use by the engine (allocated blocks)
  uint64_t pool_bytes = 0;      // size of the pool
  uint64_t dram_bytes = 0;      // DRAM the engine holds beside PM (filters, locks, hints)
  std::string mapping;          // "dax", "shared" (file, msync for power-fail), "dram"
  bool recovered = false;       // opened after an unclean shutdown
  double recovery_ms = 0;       // time Open spent recovering (0 after a clean shutdown)
  bool counted = false;         // Options::count_stats: persist holds counts (else all 0)
  PersistCounters persist;      // flushes, fences, ... summed over threads since Open
  std::map<std::string, uint64_t> engine_counters;  // engine-specific figures
};

// One operation of a write batch (Index::Write).
struct WriteOp {
  enum class Kind : uint8_t { kInsert, kUpdate, kPut, kDelete };
  Kind kind = Kind::kPut;
  std::string_view key;
  std::string_view value;  // not read for kDelete
};

class Index {
 public:
  virtual ~Index() = default;  // closes cleanly if Close() was not called

  // Adds key -> value. AlreadyExists if the key is present (nothing changes).
  // ResourceExhausted if the pool or (with resizing off) the table is full.
  virtual Status Insert(std::string_view key, std::string_view value) = 0;

  // Replaces the value of an existing key. NotFound if absent (nothing changes).
  // After a crash a reader sees the old or the new value, never a mix.
  virtual Status Update(std::string_view key, std::string_view value) = 0;

  // Insert or update.
  virtual Status Put(std::string_view key, std::string_view value);

  // Copies the value into *value. NotFound if absent (*value is then unchanged).
  virtual Status Get(std::string_view key, std::string* value) = 0;

  // Get for an 8-byte key with an 8-byte value, in machine words: the key is the 8 bytes
  // of `key` as it lies in memory (Get(std::string_view(reinterpret_cast<const char*>(&key),
  // 8), ...) names the same key), and *value receives the value's 8 bytes likewise. OK
  // with *value set; NotFound if absent; InvalidArgument if the key's value is not 8 bytes
  // long (it was stored with a value of another size). *value is unchanged unless OK.
  // The answer is Get's; the call is shorter (no string to fill): the one for a
  // lookup-heavy caller whose keys and values are words.
  virtual Status GetU64(uint64_t key, uint64_t* value);

  // Removes the key. NotFound if absent.
  virtual Status Delete(std::string_view key) = 0;

  // Get for many keys; engines may pipeline (prefetch). values and statuses must have
  // keys.size() elements.
  virtual void MultiGet(std::span<const std::string_view> keys, std::span<std::string> values,
                        std::span<Status> statuses);

  // Applies ops[i] as Insert, Update, Put or Delete would and stores what that call
  // would return in statuses[i] (statuses must have ops.size() elements). The ops run in
  // order, each its own all-or-nothing operation; the batch is not a transaction: a crash
  // during Write leaves ops[0, k) applied and the others not, for some k. Every op whose
  // status is OK is durable when Write returns (as a single call's is when it returns),
  // and a key written twice in one batch ends with the later write. Engines may pipeline
  // the batch: load the buckets of the next ops while the earlier ones commit. An engine
  // option may group the batch's commits under one fence (spash's group_commit): a crash
  // during Write then leaves each key at the state after a prefix of its own ops in the
  // batch (the keys' prefixes may differ); the rest of this contract holds as said.
  virtual void Write(std::span<const WriteOp> ops, std::span<Status> statuses);

  // Number of keys stored. Exact when no mutation is in flight.
  virtual uint64_t Count() const = 0;

  // Calls fn for every key and value until it returns false. Keys mutated concurrently
  // may or may not be seen; no key is seen twice.
  using Visitor = std::function<bool(std::string_view key, std::string_view value)>;
  virtual Status ForEach(const Visitor& fn) const = 0;

  // Resumable iteration, one page per call, with the guarantee of Redis's SCAN. Start
  // with cursor 0 and pass each call the cursor the previous call stored in
  // *next_cursor; 0 there means the scan is complete. *next_cursor is set only on OK.
  //  - Every key present from the first call to the last (not deleted in between) is
  //    passed to fn at least once, whatever inserts, deletes, resizes, splits and
  //    doublings happen between the calls or during them. A key may be passed more than
  //    once (rarely; the engine's header says when), and a key inserted or deleted during
  //    the scan may or may not be passed. A value is the key's value when its page was
  //    read.
  //  - A page holds the keys of the next home buckets (the cell or bucket a key's hash
  //    picks) in hash order, whole buckets, until it holds max_keys keys or more. So it
  //    may hold more than max_keys (the rest of a bucket), and fewer only at the end.
  //    max_keys 0 is InvalidArgument.
  //  - fn is called with no lock held: it may call any method of this index. Returning
  //    false ends the page after that key; *next_cursor then resumes at the bucket of the
  //    next key, whose keys fn already saw are passed again (a visitor that stops within
  //    the page's first bucket gets the same page again).
  //  - The cursor is opaque and valid for this pool only, in this session or a later one
  //    (it names a position in hash order, not a table address). A value no Scan of this
  //    pool handed out is InvalidArgument (one from another pool is caught but for a
  //    chance of 2^-16, and then resumes at some position, never a crash).
  //  - Any number of scans may run beside each other and beside writers.
  virtual Status Scan(uint64_t cursor, size_t max_keys, const Visitor& fn,
                      uint64_t* next_cursor) const = 0;

  virtual IndexStats Stats() const = 0;

  // Makes everything durable against power failure on a non-DAX mapping (msync).
  virtual Status Sync() = 0;

  // Clean shutdown: persists what the next open needs to skip recovery, marks the pool
  // clean and unmaps it. The index must not be used afterwards (except destruction).
  virtual Status Close() = 0;
};

// Opens and recovers the index at options.path, or creates it (a missing path with
// create_if_missing; an empty path: a new DRAM index). NotFound for a missing path
// without create_if_missing, AlreadyExists for an existing one with error_if_exists.
Status Open(const Options& options, std::unique_ptr<Index>* index);

struct EngineDescription {
  std::string name;
  std::string summary;          // one line
  std::string paper;            // source paper, or "baseline"
  bool crash_consistent = true;  // false: a crash may corrupt it (e.g. `linear`)
};

// Every registered engine, sorted by name.
std::vector<EngineDescription> RegisteredEngines();

}  // namespace pmhash
