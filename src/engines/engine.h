// The engine kit: what every engine builds on.
//
// Engine (below) owns the public operations as a template method: Insert, Update, Put,
// Get, Delete and MultiGet are final here. Each checks the key (and value) against the
// limits once, hashes the key once (KeyHash: xxh3 seeded with the pool's seed) and calls
// the engine's small virtuals with the hash: DoGet, DoWrite (one WriteMode for insert,
// update and put, so an upsert is one lock round) and DoDelete. Each call of a virtual is
// one operation for the persistence counters (pm::Persister::BeginOp / EndOp around it,
// user bytes: key + value for a write, the key for a delete, 0 for a lookup): the splits,
// doublings and PM reads it performs on the calling thread count against it, and each of
// its media lines read is counted once. Engines report what they read from PM with
// Persister::NoteRead by address (their buckets, cells and headers; the slot codec reports
// records) and start loads through Persister::Prefetch, so emulated read latency can be
// hidden. MultiGet is pipelined for engines that can prefetch (Prefetch): it hashes and
// prefetches `multiget_depth` keys ahead of the one it finishes. The base also owns the
// pool, persister, allocator, undo log and slot codec, the root header every engine's root
// opens with (engines/root.h: CreateRoot, OpenRoot, the count stored at Close), and
// CheckInvariants, run by the generic suites. Shared pieces beside it: lock striping
// (engines/striping.h), the home-bucket reduction (Reduce, util/hash.h), the commit of a
// persist sequence (pm::Persister::Publish).
//
// Open sequence (src/engines/engine.cc):
//   new pool:        Pool::Create (state kCreating) -> Persister -> Configure ->
//                    UndoLog::Format -> Allocator::Format -> Create -> MarkCreated (kOpen)
//   existing pool:   Pool::Open -> Persister -> Configure -> MarkInUse (kClean -> kOpen) ->
//                    UndoLog::Recover -> (clean) Allocator::Load |
//                    (crashed) Allocator::Rebuild(EnumerateBlocks) -> Recover(clean)
//   a pool still kCreating (its creation crashed): zero the root, then as a new pool.
//   Only that positive marker formats a pool (src/pm/pool.h). Create therefore never has
//   to recognize a half-created root, and Recover may treat any root it cannot read as
//   Corruption.
//   Close():         Shutdown -> root count -> Allocator::PersistState -> Pool::MarkClean
//
// Adding an engine: a folder src/engines/<name>/ with its header, source, tests and doc,
// whose source defines
//   void RegisterEngines_<name>(EngineRegistry& registry);   // <name>: the folder's name
// adding one or more engines (registry.Add<Class>(EngineInfo{...}): description, options,
// capabilities, test profile; see engine_info.h). CMake finds the folder at configure
// time and generates a call to that function (build/<preset>/generated/engine_folders.cc);
// the registry calls them all on its first use. Registration is a plain function call
// the library makes, so it survives static linking without --whole-archive and depends
// on no static initializer. The conformance and crash suites, the CLI and the benchmark
// then pick the engine up; nothing else in the tree changes.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/locks.h"
#include "common/slot.h"
#include "engines/engine_info.h"
#include "engines/root.h"
#include "engines/scan.h"
#include "pm/alloc.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/regions.h"
#include "pm/undo_log.h"
#include "pmhash/index.h"
#include "util/hash.h"

namespace pmhash::engines {

// What a write does when the key is present or absent.
enum class WriteMode : uint8_t {
  kInsert,  // AlreadyExists if present
  kUpdate,  // NotFound if absent
  kPut,     // insert or update
};

inline constexpr size_t kMaxMultiGetDepth = 64;

// A key hash that replaces the pool's, for tests only (Engine::SetKeyHashForTesting).
using KeyHashFn = uint64_t (*)(std::string_view key);

// The answer of a search that takes no lock (validated by a VersionedRwLock): kFound or
// kAbsent stand; kRetry means a writer was in, try again; kLocked means only the locked
// search can answer (e.g. the key's bytes are in a record).
enum class Optimistic : uint8_t { kFound, kAbsent, kRetry, kLocked };

// What a quick lookup answered (Engine::QuickGet), in two registers: kFound with the
// value word, kAbsent, or anything else for DoGet to answer.
struct QuickAnswer {
  uint64_t value_word;
  Optimistic answer;
};

class Engine : public Index {
 public:
  // Without Close() the pool is dropped unclean (as Abandon): a base-class destructor
  // cannot call the engine's Shutdown. Engines made with MakeEngine (the registry's,
  // tests') are wrapped so that destruction closes cleanly (ClosingEngine below).
  ~Engine() override;

  // The Index operations (contracts in include/pmhash/index.h), once for every engine.
  Status Insert(std::string_view key, std::string_view value) final;
  Status Update(std::string_view key, std::string_view value) final;
  Status Put(std::string_view key, std::string_view value) final;
  Status Get(std::string_view key, std::string* value) final;
  // The quick lookup (QuickGet) straight into *value; else Index::GetU64 (through Get).
  Status GetU64(uint64_t key, uint64_t* value) final;
  Status Delete(std::string_view key) final;
  // Engines with capabilities.pipelined_multiget: key i + depth is hashed and prefetched
  // before key i is finished (depth: the multiget_depth option). Others: Get after Get.
  // Either way each key is an operation of its own (BeginOp / EndOp around its DoGet):
  // DoGet runs one key to its end, and the prefetches of the keys ahead are not reads
  // (they only note when a line was asked for), so each key's read set is its own.
  void MultiGet(std::span<const std::string_view> keys, std::span<std::string> values,
                std::span<Status> statuses) final;
  // Engines with capabilities.pipelined_write: op i + depth is checked, hashed and
  // prefetched (Prefetch) before op i runs (depth: the write_depth option); the others
  // run Insert / Update / Put / Delete one after another (Index::Write). Either way each
  // op is an operation of its own for the counters and runs whole before the next (but
  // for what an engine defers to EndWriteBatch: below).
  void Write(std::span<const WriteOp> ops, std::span<Status> statuses) final;
  // The cursor (engines/scan.h) decoded and checked, the engine's DoScan, then fn over
  // the page with no lock held, and the next cursor.
  Status Scan(uint64_t cursor, size_t max_keys, const Visitor& fn,
              uint64_t* next_cursor) const final;

  Status Close() final;
  Status Sync() final;
  bool is_open() const { return pool_ != nullptr; }

  // Drops the index without a clean shutdown, as a crash would (tests, bench recovery
  // time). The pool is unmapped; the next open recovers.
  void Abandon();

  // Tests' allocation-failure injection: every PM allocation of this open index (its
  // operations, its background work) asks `faults` first (pm::AllocationFaults; null:
  // none). Not owned; it must outlive its use. A reopened index starts without.
  void SetAllocationFaults(pm::AllocationFaults* faults) {
    if (allocator_ != nullptr) allocator_->SetFaults(faults);
  }

  IndexStats Stats() const override;

  // Waits until the background work started so far (PAB refills, filter rebuilds) has
  // finished: a quiet point for tests and for the benchmark's counters. Default: an
  // engine without background work returns at once.
  virtual void WaitForBackgroundWork() {}

  // The oracle hotspot detector (spash's Fig. 12a): a workload that knows which keys it
  // will access most tells the engine. HotKeyOracleSize is how many keys the engine wants
  // (0, the default: it takes no oracle); SetHotKeyOracle gives it at most that many,
  // hottest first, replacing those given before (an empty list: no key is hotter than
  // another). For the benchmark, between phases: no operation may be in flight.
  virtual uint64_t HotKeyOracleSize() const { return 0; }
  virtual void SetHotKeyOracle(const std::vector<std::string>& keys) { (void)keys; }

  // Checks the invariants the engine's header lists by a full scan: OK, or Corruption
  // naming the first violation. For the suites (after every script and recovery) and
  // `pmhash pool check`; no mutation may be in flight.
  virtual Status CheckInvariants() const = 0;

  // The engine's registry data (description, options, capabilities).
  const EngineInfo& info() const { return *info_; }
  // The engine name the pool holds ("linear" and "linear-log" share a class).
  const std::string& name() const { return engine_name_; }

  // The key hash of this index: xxh3 of the key seeded with the pool's seed
  // (pm::Pool::hash_seed, read once at open; 0 for a pool of layout 3), or the test hash
  // SetKeyHashForTesting installed. Every hash of a user key goes through it: the kit's,
  // once per operation, and an engine's when it rehashes stored keys (resize, recovery,
  // CheckInvariants); a key hashed any other way would be looked for in the wrong home.
  // The hot path pays a load of the seed and a never-taken branch, both in this object.
  uint64_t KeyHash(std::string_view key) const {
    if (test_key_hash_ != nullptr) [[unlikely]] return test_key_hash_(key);
    return HashKey(key, hash_seed_);
  }
  uint64_t hash_seed() const { return hash_seed_; }
  // Whether KeyHash is the pool's seeded xxh3 (no test hash installed): only then is the
  // hash of an 8-byte key a bijection (UnhashKey8), which an engine that stores the hash
  // in place of the key (spash) relies on.
  bool key_hash_invertible() const { return test_key_hash_ == nullptr; }
  // Tests only (the degenerate-hash conformance run, docs/testing.md): KeyHash becomes
  // `fn` (null: the pool's hash again). Set it before the index is opened (OpenEngine),
  // and again on the object of every reopen: the pool does not record it, and an index
  // reopened with another hash finds its keys in the wrong homes. A member of this object
  // rather than a global, so that tests running side by side keep their own.
  void SetKeyHashForTesting(KeyHashFn fn) { test_key_hash_ = fn; }
  pm::Pool& pool() const { return *pool_; }
  pm::Persister& persister() const { return *persister_; }

  // For `pmhash pool check`: the allocator against the blocks EnumerateBlocks reaches
  // (Allocator::Verify): the number of blocks, or Corruption naming leaked, twice-reached
  // and unallocated blocks. Waits for background work first; no other thread may use the
  // index meanwhile.
  Result<uint64_t> VerifyBlocks();

  // The pool's layout as its structures use it (pm/regions.h): the header page, the
  // root area, the undo log's and the allocator's metadata, then the engine's structures
  // (DescribeEngineLayout). For tools and the flip-fuzz test; no mutation may be in
  // flight.
  void DescribeLayout(const pm::RegionVisitor& mark) const;

 protected:
  Engine() = default;
  void SetInfo(const EngineInfo& info) { info_ = &info; }

  // ---- The operations: key (and value) within the limits, hash = KeyHash(key) ----
  // OK and *value, or NotFound() with *value unchanged.
  virtual Status DoGet(std::string_view key, uint64_t hash, std::string* value) = 0;
  // As `mode` says: AlreadyExists() (kInsert, present), NotFound() (kUpdate, absent),
  // TableFull (no place and resizing off), PoolFull (no room in the pool).
  virtual Status DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                         WriteMode mode) = 0;
  // OK, or NotFound() if absent.
  virtual Status DoDelete(std::string_view key, uint64_t hash) = 0;
  // One Scan page from page->from() (engines/scan.h): page->CollectHomes over the live
  // table, held still (no resize) until it returns, each home read under the lock that
  // guards it. The keys with their KeyHash; OK, or Corruption for a damaged structure.
  virtual Status DoScan(ScanPage* page) const = 0;
  // Pipelined MultiGet (capabilities.pipelined_multiget): starts loading the memory
  // DoGet(hash) reads first, through persister().Prefetch (so emulated read latency can
  // be hidden). A hint taken with no lock: it may touch a stale table, so it
  // may only prefetch, never dereference what it has not validated.
  virtual void Prefetch(uint64_t hash) const { (void)hash; }
  // The same for the pipelined Write (capabilities.pipelined_write), whose inserts read
  // what a search of an absent key may skip: Prefetch unless the engine says otherwise.
  virtual void PrefetchWrite(uint64_t hash) const { Prefetch(hash); }
  // A call of the pipeline with no key entering, made by MultiGet and Write in place of
  // Prefetch / PrefetchWrite once a batch has no key left to start: an engine whose
  // Prefetch works in stages (spash: a key's bucket two calls after its entry) runs the
  // later stages of the keys already in flight, which no later key's call would reach.
  virtual void PrefetchAdvance() const {}
  // The pipelines' depths (options multiget_depth, write_depth, as the kit clamps them):
  // a key prefetched now runs after depth - 1 more Prefetch calls, so a stage of an
  // engine's Prefetch that follows a key that many calls later still comes first.
  size_t multiget_depth() const { return std::clamp<size_t>(multiget_depth_, 1, kMaxMultiGetDepth); }
  size_t write_depth() const { return std::clamp<size_t>(write_depth_, 1, kMaxMultiGetDepth); }
  // Around a pipelined Write, on its thread: BeginWriteBatch before the first op,
  // EndWriteBatch after the last. An engine may hold back what makes an op durable until
  // EndWriteBatch (spash's group_commit), which must leave every OK op durable.
  virtual void BeginWriteBatch() {}
  virtual void EndWriteBatch() {}
  // The quick lookup (issue 29's first try, one call from Get): an engine whose searches
  // of 8-byte keys can mostly be answered with no lock overrides it and turns it on with
  // SetQuickGet. Get then calls it first for an 8-byte key when reads go unnoted
  // (key_word: the key's 8 bytes); kFound and kAbsent stand, any other answer goes on to
  // DoGet. It calls nothing on its path: a leaf answering in two registers, with no Status
  // and no string, so that a search's instructions between one miss and the next stay few.
  virtual QuickAnswer QuickGet(uint64_t hash, uint64_t key_word) {
    (void)hash;
    (void)key_word;
    return {0, Optimistic::kRetry};
  }
  // On only where reads go unnoted (reads_unnoted) and operations need no bracket or test
  // hash (GetChecked's). Configure may call it, or later.
  void SetQuickGet(bool on) { quick_get_ = on && reads_unnoted_ && !checked_ops_; }
  // The quick delete (Delete's first try, as QuickGet is Get's): an engine whose deletes
  // of 8-byte keys mostly take a short path overrides it and turns it on with
  // SetQuickDelete. Delete then calls it first for an 8-byte key (key_word), the hash
  // computed inline; kFound: deleted and durable, kAbsent: NotFound, any other answer goes
  // on to DoDelete, nothing changed. It answers in a register with no Status built, so
  // that few instructions lie between its fence and the next call's first miss (a write
  // waits for its write-back unless the next call's miss starts soon after the fence:
  // BENCHMARKS.md, "What follows a fence").
  virtual Optimistic QuickDelete(uint64_t hash, uint64_t key_word) {
    (void)hash;
    (void)key_word;
    return Optimistic::kRetry;
  }
  // On only where operations need no bracket or test hash (DeleteChecked's).
  void SetQuickDelete(bool on) { quick_delete_ = on && !checked_ops_; }

  // ---- Lifecycle ----
  // Reads engine options (sizes, switches) through the declared list, and checks what
  // the declared ranges cannot (e.g. a power of two): InvalidArgument naming the option.
  // Called before Create and Recover.
  virtual Status Configure(EngineOptions& options, const Options& index_options) = 0;
  // Builds an empty index in a new pool (the root area is zero).
  virtual Status Create() = 0;
  // Attaches to the structure in an existing pool. `clean` is false after a crash:
  // repair what the persist order allows to be torn. The allocator is ready.
  virtual Status Recover(bool clean) = 0;
  // Visits every block reachable from the root (for Allocator::Rebuild), each once. Runs
  // before Recover, reading raw PM: offsets must be checked (pool().Contains) before use;
  // VerifyBlocks also runs it on an open, quiet index.
  virtual Status EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const = 0;
  // Persists what a clean reopen needs beyond the root count (e.g. a DRAM filter).
  // Default: nothing.
  virtual Status Shutdown() { return Status::OK(); }
  // Engine-specific figures for Stats(): key slots, DRAM bytes, counters.
  virtual void FillStats(IndexStats* stats) const = 0;
  // Marks the engine's structures reachable from the root (pm/regions.h): table and block
  // headers (Region::kEngineMetadata), slot words and per-slot metadata (kSlots), and each
  // record's bytes (kRecords, SlotCodec::DescribeRecord); padding and slack stay
  // unmarked. `checked` as RegionVisitor says: true only where a damaged byte is always
  // found (by Recover, ValidateRoot or CheckInvariants). The root area is the kit's.
  virtual void DescribeEngineLayout(const pm::RegionVisitor& mark) const = 0;
  // Stops (joins) the engine's background threads before the pool goes away; called
  // first by Close() and Abandon(), so it must be idempotent. Default: nothing.
  virtual void StopBackgroundWork() {}

  // ---- What the kit reads for every engine, before Configure ----
  // The `resize` option (engines with capabilities.resize_switch; true for the others)
  // and Options::initial_capacity (0: none given).
  bool resize_enabled() const { return resize_enabled_; }
  // Whether the engine's reads go uncounted (Persister::notes_reads false, fixed at open):
  // then a search with no lock may take its first try with nothing noted (FirstTry).
  bool reads_unnoted() const { return reads_unnoted_; }
  uint64_t initial_capacity() const { return initial_capacity_; }

  // ---- The table block the root links (engines/root.h: TableHeader) ----
  // Allocates `bytes` for `what` ("a table of 4096 cells"), zeroes them and stores the
  // header {magic, size}, unflushed: the block is unreachable until the root links it,
  // so the caller flushes it with whatever else it writes (CreateRoot's `table_bytes`, a
  // resize's flush pass). PoolFull as AllocateBlock.
  Status NewTableBlock(uint64_t bytes, const std::string& what, uint64_t magic, uint64_t size,
                       uint64_t* offset);
  // Raw PM (EnumerateBlocks runs before Recover): Corruption naming the engine unless the
  // block at `table` has `magic` and a size in [1, max_size] whose `bytes(size)` lie in
  // the pool; *size gets it. The engine checks what else its header holds.
  Status ValidateTableBlock(uint64_t table, uint64_t magic, uint64_t max_size,
                            uint64_t (*bytes)(uint64_t size), uint64_t* size) const;

  // ---- The root header (engines/root.h) ----
  // Creation, once the engine's own root fields (after the header, within layout.bytes;
  // sealed ones through StoreSealed) are stored: persists the table block's first
  // `table_bytes` (0: the caller made it durable), stores version, check, table and
  // count 0, persists the root, then publishes the magic.
  void CreateRoot(const RootLayout& layout, uint64_t table, uint64_t table_bytes);
  // Validation in raw PM (EnumerateBlocks runs before Recover): Corruption naming the
  // engine, the field and its pool offset unless the root has the layout's magic and
  // version, its check holds, its sealed table and count words unseal, the table offset
  // is line aligned with room for `table_header_bytes` in the pool, and the root area is
  // zero after layout.bytes. *table and *count get the unsealed words.
  Status ValidateRoot(const RootLayout& layout, size_t table_header_bytes, uint64_t* table,
                      uint64_t* count) const;
  // ValidateRoot for Recover, which also attaches the header: Close then stores the
  // count in it.
  Status OpenRoot(const RootLayout& layout, size_t table_header_bytes, uint64_t* table,
                  uint64_t* count);
  // Recover: Corruption unless `table` is an allocated block of at least `bytes`.
  Status CheckTableBlock(uint64_t table, uint64_t bytes) const;
  // Stores and persists root.count (a recovery's recount, persist_count=on).
  void PersistRootCount(uint64_t count);
  // A resize's commit point: fence, one failure-atomic store of the sealed root.table,
  // persist (Persister::Publish).
  void PublishRootTable(uint64_t table);

  // ---- Checked metadata -----------------------------------------------------------
  // Sealed words (util/hash.h, salt = the word's pool offset): an engine's mutable
  // metadata words in PM, each still changed with one failure-atomic 8-byte store.
  // SealFor is the value to store into `word` for `payload` (< 2^48); LoadSealed reads
  // and unseals, or is Corruption naming the engine, `what` and the word's pool offset.
  uint64_t SealFor(const uint64_t* word, uint64_t payload) const {
    return SealWord(payload, SaltOf(word));
  }
  Status LoadSealed(const uint64_t* word, const char* what, uint64_t* payload) const;
  // Immutable metadata (table and block headers) checks itself: MetadataCheck is an xxh3
  // of its first `len` bytes seeded with its pool offset (a header copied elsewhere fails
  // too); VerifyMetadata is Corruption naming the engine, `what` and the pool offset
  // unless `stored` equals it.
  uint64_t MetadataCheck(const void* header, size_t len) const;
  Status VerifyMetadata(const void* header, size_t len, uint64_t stored,
                        const std::string& what) const;

  // Allocates `bytes` for `what` ("a table of 4096 cells"). PoolFull naming the engine,
  // what and the size when the pool has no room.
  Status AllocateBlock(uint64_t bytes, const std::string& what, uint64_t* offset);

  // Replaces the value of the slot `words` whose form byte is `*form`, as the shared slot
  // encoding prescribes (common/slot.h), and persists it before returning: an inline
  // value with one 8-byte store; a record by a new record, then the pointer published
  // (Persister::Publish), then the old record freed; inline -> record (words and form
  // change together) under an UndoLog transaction. The caller holds what excludes other
  // writers of the slot. `form_tag`: bits the engine keeps beside the SlotForm in the
  // form byte (group's hash tag), read past and kept. `undo_txs()` counts the
  // transactions.
  Status UpdateSlot(uint8_t* form, KvWords* words, std::string_view key, std::string_view value,
                    uint64_t key_hash, uint8_t form_tag = 0);
  uint64_t undo_txs() const { return undo_txs_.load(std::memory_order_relaxed); }

  pm::Allocator& allocator() const { return *allocator_; }
  pm::UndoLog& undo_log() const { return *undo_log_; }
  SlotCodec& codec() const { return *codec_; }
  template <typename T>
  T* root() const {
    static_assert(sizeof(T) <= pm::kRootSize, "an engine root must fit the 4 KiB root area");
    return static_cast<T*>(pool_->root());
  }

 private:
  template <typename E>
  friend class ClosingEngine;
  friend Status OpenEngine(std::unique_ptr<Engine> engine, std::unique_ptr<pm::Pool> pool,
                           bool fresh, const Options& options, pm::PersistObserver* observer,
                           std::unique_ptr<Engine>* out);
  Status Start(std::unique_ptr<pm::Pool> pool, bool fresh, const Options& options,
               pm::PersistObserver* observer);
  EngineRoot* root_header() const { return root<EngineRoot>(); }
  uint64_t SaltOf(const void* word) const { return pool_->ToOffset(word); }
  // Insert, Update and Put: checks, hash, DoWrite (bracketed when counting).
  Status WriteOne(std::string_view key, std::string_view value, WriteMode mode);
  // The operations' out-of-line paths: a key or value over the limits (refused), or an
  // operation bracketed for the counters or hashed by a test hash (checked_ops_).
  __attribute__((noinline)) Status WriteChecked(std::string_view key, std::string_view value,
                                                WriteMode mode);
  __attribute__((noinline)) Status GetChecked(std::string_view key, std::string* value);
  __attribute__((noinline)) Status DeleteChecked(std::string_view key);
  __attribute__((noinline)) Status GetU64Slowly(uint64_t key, uint64_t* value);
  // An 8-byte key's word and hash (Get's and Delete's quick paths).
  std::pair<uint64_t, uint64_t> WordAndHash(std::string_view key) const;
  // MultiGet's pipelined path.
  void MultiGetPipelined(std::span<const std::string_view> keys, std::span<std::string> values,
                         std::span<Status> statuses);

  const EngineInfo* info_ = nullptr;
  std::unique_ptr<pm::Pool> pool_;
  std::unique_ptr<pm::Persister> persister_;
  std::unique_ptr<pm::UndoLog> undo_log_;
  std::unique_ptr<pm::Allocator> allocator_;
  std::unique_ptr<SlotCodec> codec_;
  std::string engine_name_;
  uint64_t hash_seed_ = 0;                 // the pool's (Start)
  uint64_t scan_key_ = 0;                  // keys the cursors' check (Start)
  KeyHashFn test_key_hash_ = nullptr;      // SetKeyHashForTesting
  EngineRoot* attached_root_ = nullptr;  // set by CreateRoot / OpenRoot
  size_t root_bytes_ = 0;                // RootLayout::bytes, likewise
  size_t multiget_depth_ = 8;
  size_t write_depth_ = 4;
  // Every operation takes the checked path: it is bracketed for the counters
  // (persister_->tracks_ops()) or hashed by SetKeyHashForTesting's hash (Start).
  bool checked_ops_ = false;
  bool quick_get_ = false;  // SetQuickGet
  bool quick_delete_ = false;  // SetQuickDelete
  bool reads_unnoted_ = false;  // !persister_->notes_reads()
  bool resize_enabled_ = true;
  uint64_t initial_capacity_ = 0;
  bool recovered_ = false;
  double recovery_ms_ = 0;
  std::atomic<uint64_t> undo_txs_{0};
};

// The persistence settings of `options` (mode, flush instruction, emulated latencies,
// counting, media model): what Open validates (pm::PersistConfig::Validate) before it
// touches a file, and what the engine's Persister is made from.
pm::PersistConfig PersistConfigOf(const Options& options);

// Opens `engine` on a pool that is already mapped: the path every Open takes, and the
// one the crash simulator and tests use with their own pools, observers and test-only
// engines. `fresh` means the pool was just created.
Status OpenEngine(std::unique_ptr<Engine> engine, std::unique_ptr<pm::Pool> pool, bool fresh,
                  const Options& options, pm::PersistObserver* observer,
                  std::unique_ptr<Engine>* out);
Status OpenEngine(std::unique_ptr<Engine> engine, std::unique_ptr<pm::Pool> pool, bool fresh,
                  const Options& options, pm::PersistObserver* observer,
                  std::unique_ptr<Index>* index);
// pmhash::Open, keeping the engine's type: for callers inside the library that need what
// only an Engine offers (WaitForBackgroundWork, Abandon, persister, CheckInvariants).
Status Open(const Options& options, std::unique_ptr<Engine>* engine);

// Declares, inside an engine class, the overrides every engine implements (their
// contracts are Index's and Engine's; what is particular to an engine, e.g. what its
// ForEach holds, its header says): Count, ForEach, CheckInvariants, the three
// operations, the Scan page (DoScan) and the lifecycle. The engine declares the optional
// ones it needs itself (Prefetch, Shutdown, StopBackgroundWork, WaitForBackgroundWork).
// Leaves the class in `protected:`.
#define PMHASH_ENGINE_KIT_OVERRIDES                                                     \
 public:                                                                               \
  uint64_t Count() const override;                                                     \
  Status ForEach(const Visitor& fn) const override;                                    \
  Status CheckInvariants() const override;                                             \
                                                                                       \
 protected:                                                                            \
  Status DoGet(std::string_view key, uint64_t hash, std::string* value) override;     \
  Status DoWrite(std::string_view key, std::string_view value, uint64_t hash,          \
                 ::pmhash::engines::WriteMode mode) override;                           \
  Status DoDelete(std::string_view key, uint64_t hash) override;                       \
  Status DoScan(::pmhash::engines::ScanPage* page) const override;                     \
  Status Configure(::pmhash::engines::EngineOptions& options,                          \
                   const ::pmhash::Options& index_options) override;                    \
  Status Create() override;                                                            \
  Status Recover(bool clean) override;                                                 \
  Status EnumerateBlocks(const ::pmhash::pm::Allocator::LiveBlockVisitor& visit)       \
      const override;                                                                  \
  void FillStats(::pmhash::IndexStats* stats) const override;                          \
  void DescribeEngineLayout(const ::pmhash::pm::RegionVisitor& mark) const override

// How an engine's Get stores the value it found into the caller's string. A caller that
// reuses its string (the benchmark's loop, a server's buffer) already holds a value of the
// same size most of the time: then the bytes are copied over, with no call into
// std::string (whose assign was 78 of a lookup's instructions; issue 29).
inline void AssignValue(std::string* value, std::string_view v) {
  if (value->size() == v.size()) {
    if (!v.empty()) std::memcpy(value->data(), v.data(), v.size());
    return;
  }
  value->assign(v.data(), v.size());
}
// AssignWord into a string of another size: out of line, so that the common path has no
// call (which would give every search a frame).
[[gnu::noinline, gnu::cold]] void AssignWordResizing(std::string* value, uint64_t word);
// An inline value: its 8 bytes as one word (one store when *value holds 8 bytes already).
inline void AssignWord(std::string* value, uint64_t word) {
  if (value->size() != sizeof(word)) [[unlikely]] return AssignWordResizing(value, word);
  std::memcpy(value->data(), &word, sizeof(word));
}

inline constexpr int kOptimisticTries = 4;

// One lock-free search's state: the key as the inline word it would be stored as, the
// stripe version it started at and the inline value it found; Note reports the PM it
// reads (every try's: a retry reads again, and the operation counts each line once).
struct OptimisticRead {
  OptimisticRead(pm::Persister& persister, std::string_view key)
      : OptimisticRead(persister, key, persister.notes_reads()) {}
  // `notes` false: nothing is noted (FirstTry, when the engine's reads go unnoted).
  OptimisticRead(pm::Persister& persister, std::string_view key, bool notes)
      : persister(persister), inline_key(key.size() == 8), notes(notes) {
    if (inline_key) std::memcpy(&key_word, key.data(), 8);
  }
  // An 8-byte key's word, nothing noted (QuickTry).
  OptimisticRead(pm::Persister& persister, uint64_t key_word)
      : persister(persister), inline_key(true), notes(false), key_word(key_word) {}
  // Starts a try under `mu`: false if a writer holds it (retry).
  bool Begin(const VersionedRwLock& mu) {
    version = mu.ReadBegin();
    return version % 2 == 0;
  }
  // Whether no writer took `mu` since Begin.
  bool Valid(const VersionedRwLock& mu) const { return mu.ReadValidate(version); }
  // [addr, addr+len) of PM was read (Persister::NoteRead).
  void Note(const void* addr, size_t len) const {
    if (notes) persister.NoteRead(addr, len);
  }

  pm::Persister& persister;
  const bool inline_key;
  const bool notes;  // persister.notes_reads()
  uint64_t key_word = 0;
  uint64_t version = 0;
  uint64_t value_word = 0;  // set by a kFound answer
};

// The form bytes of up to four slots in one acquire load: byte i of the result is
// forms[i]. `forms` must be 4-byte aligned with all four bytes inside the bucket (the
// engines' buckets open with their form bytes: wophi's four tokens, smartht's three and a
// padding byte; linear's line has its three forms and padding at byte 48).
[[gnu::always_inline]] inline uint32_t LoadForms(const uint8_t* forms) {
  return __atomic_load_n(reinterpret_cast<const uint32_t*>(forms), __ATOMIC_ACQUIRE);
}

// Matches the key of `read` against N slots (N <= 4) of a bucket, whose form bytes are
// `forms` (byte i: slot i's SlotForm, LoadForms) and words `slots`, as a search with no
// lock does (every word an acquire load), with as few instructions and branches as a
// search of an absent key can take (issue 29): the key words compared without a branch,
// one branch on "some key word matched", one on "some slot holds a record". kFound
// (read->value_word set) when an inline slot holds the key; else kLocked when a record
// slot's hash word equals `hash` (the key may be there: its bytes are read under the
// lock); else kAbsent. A key is stored once, so an inline match is the answer whatever
// the other slots hold.
template <size_t N>
[[gnu::always_inline]] inline Optimistic MatchSlots(uint32_t forms, const KvWords* slots,
                                                   uint64_t hash, OptimisticRead* read) {
  static_assert(N >= 1 && N <= 4, "one byte per slot in a 32-bit word");
  uint32_t eq = 0;  // bit i: slot i's key word is the key
#pragma GCC unroll 4
  for (size_t i = 0; i < N; ++i) {
    eq |= uint32_t{__atomic_load_n(&slots[i].word0, __ATOMIC_ACQUIRE) == read->key_word} << i;
  }
  if (eq != 0 && read->inline_key) {
    for (; eq != 0; eq &= eq - 1) {
      const size_t i = static_cast<size_t>(__builtin_ctz(eq));
      if (((forms >> (8 * i)) & 0xff) == static_cast<uint8_t>(SlotForm::kInline)) {
        read->value_word = __atomic_load_n(&slots[i].word1, __ATOMIC_ACQUIRE);
        return Optimistic::kFound;
      }
    }
  }
  constexpr uint32_t kRecordBits =
      static_cast<uint8_t>(SlotForm::kRecord) * (0x01010101u & (N == 4 ? ~0u : (1u << (8 * N)) - 1));
  if ((forms & kRecordBits) != 0) [[unlikely]] {  // a record slot (or a damaged form byte)
    for (size_t i = 0; i < N; ++i) {
      if (((forms >> (8 * i)) & 0xff) == static_cast<uint8_t>(SlotForm::kRecord) &&
          __atomic_load_n(&slots[i].word1, __ATOMIC_ACQUIRE) == hash) {
        return Optimistic::kLocked;
      }
    }
  }
  return Optimistic::kAbsent;
}

// 0x80 in byte i (i < N) of the result for each zero byte of `forms`: the empty slots.
template <size_t N>
constexpr uint32_t EmptySlots(uint32_t forms) {
  constexpr uint32_t kHigh = 0x80808080u & (N == 4 ? ~0u : (1u << (8 * N)) - 1);
  return ~(((forms & 0x7f7f7f7fu) + 0x7f7f7f7fu) | forms | 0x7f7f7f7fu) & kHigh;
}

// What a search with no lock answered, and the inline value of a kFound answer.
struct OptimisticAnswer {
  Optimistic answer;
  uint64_t value_word;
};

// The tries after a first one that met a writer (SearchOptimistically), backing off
// between them: out of line, so that the first try's path has no call in it (a call
// would make the compiler keep the search's state in a frame).
template <typename Find>
[[gnu::noinline]] OptimisticAnswer RetryOptimistically(pm::Persister& persister,
                                                       std::string_view key, Find find) {
  OptimisticRead read(persister, key);
  for (int attempt = 0; attempt + 1 < kOptimisticTries; ++attempt) {
    SpinBackoff(attempt);
    const Optimistic a = find(&read);
    if (a != Optimistic::kRetry) return {a, read.value_word};
  }
  return {Optimistic::kLocked, 0};
}

// Runs `find(OptimisticRead*)` until it stands or needs the lock, up to kOptimisticTries
// times, backing off between tries (then the answer is kLocked); on kFound, stores the
// inline value into *value. Inline, with `find` (mark it always_inline: it has two
// callers, so the compiler would keep it out of line; and taken by value: capture what it
// needs by value, so nothing of the caller's must live in memory for it): the read
// state then lives in registers (issue 29).
template <typename Find>
[[gnu::always_inline]] inline Optimistic SearchOptimistically(pm::Persister& persister,
                                                              std::string_view key,
                                                              std::string* value, Find find) {
  OptimisticRead read(persister, key);
  OptimisticAnswer a{find(&read), read.value_word};
  if (a.answer == Optimistic::kRetry) [[unlikely]] a = RetryOptimistically(persister, key, find);
  if (a.answer == Optimistic::kFound) AssignWord(value, a.value_word);
  return a.answer;
}

// An engine's DoGet starts with this when its reads go unnoted (Engine::reads_unnoted): one
// try of `find` with nothing noted, so (with `find` always inline, as for
// SearchOptimistically) nothing on it calls out. kFound (the value stored: *value held 8
// bytes already) or kAbsent stand; any other answer (a writer came in, a record, a string
// of another size: kRetry or kLocked) sends DoGet to its full path
// (SearchOptimistically, then the lock), out of line, so a lookup is the few
// instructions of its probe (issue 29).
template <typename Find>
[[gnu::always_inline]] inline Optimistic FirstTry(pm::Persister& persister, std::string_view key,
                                                  std::string* value, Find find) {
  OptimisticRead read(persister, key, /*notes=*/false);
  const Optimistic a = find(&read);
  if (a == Optimistic::kFound) {
    if (value->size() != sizeof(read.value_word)) [[unlikely]] return Optimistic::kRetry;
    std::memcpy(value->data(), &read.value_word, sizeof(read.value_word));
  }
  return a;
}

// An engine's QuickGet on its `find` (OptimisticGet's): one try with nothing noted, its
// answer and value word as they are.
template <typename Find>
[[gnu::always_inline]] inline QuickAnswer QuickTry(pm::Persister& persister, uint64_t key_word,
                                                   Find find) {
  OptimisticRead read(persister, key_word);
  const Optimistic a = find(&read);
  return {read.value_word, a};
}

// An engine's DoGet on FirstTry: the one try when its reads go unnoted, else (or when that
// try cannot answer) `full`, the engine's out-of-line path (OptimisticGetFull). wophi,
// linear and group read this way (issue 29); `find` and `full` are lambdas, `find`
// always inline.
template <typename Find, typename Full>
[[gnu::always_inline]] inline Status OptimisticGet(pm::Persister& persister, bool reads_unnoted,
                                                  std::string_view key, std::string* value,
                                                  Find find, Full full) {
  if (reads_unnoted) [[likely]] {
    const Optimistic a = FirstTry(persister, key, value, find);
    if (a == Optimistic::kFound) return Status::OK();
    if (a == Optimistic::kAbsent) return Status::NotFound();
  }
  return full();
}

// The full path of OptimisticGet: the tries (SearchOptimistically), then `locked`, the
// search under the engine's lock (a writer kept coming in, or a record).
template <typename Find, typename Locked>
[[gnu::always_inline]] inline Status OptimisticGetFull(pm::Persister& persister,
                                                      std::string_view key, std::string* value,
                                                      Find find, Locked locked) {
  const Optimistic a = SearchOptimistically(persister, key, value, find);
  if (a == Optimistic::kFound) return Status::OK();
  if (a == Optimistic::kAbsent) return Status::NotFound();
  return locked();
}

// Closes cleanly on destruction: the most-derived destructor runs while the engine is
// still whole, so Close() may call its virtual Shutdown().
template <typename E>
class ClosingEngine final : public E {
 public:
  template <typename... Args>
  explicit ClosingEngine(const EngineInfo& info, Args&&... args) : E(std::forward<Args>(args)...) {
    this->SetInfo(info);
  }
  ~ClosingEngine() override {
    if (this->is_open()) (void)this->Close();
  }
};

// How every engine object is made (registry, tests): `info` must outlive it.
template <typename E, typename... Args>
std::unique_ptr<Engine> MakeEngine(const EngineInfo& info, Args&&... args) {
  return std::make_unique<ClosingEngine<E>>(info, std::forward<Args>(args)...);
}

// ---- Registry -----------------------------------------------------------------------

struct EngineRegistration {
  EngineInfo info;
  std::function<std::unique_ptr<Engine>()> make;
};

// What each engine folder's RegisterEngines_<folder> function adds its engines to.
class EngineRegistry {
 public:
  // Registers `info` as an engine made by MakeEngine<E>(info, args...).
  template <typename E, typename... Args>
  void Add(EngineInfo info, Args... args) {
    EngineRegistration& r = Insert(std::move(info));
    const EngineInfo* stored = &r.info;
    r.make = [stored, args...] { return MakeEngine<E>(*stored, args...); };
  }

 private:
  friend const std::map<std::string, EngineRegistration>& Registrations();
  EngineRegistration& Insert(EngineInfo info);
  std::map<std::string, EngineRegistration> engines_;
};

// Every registered engine by name (the registry is filled on first use).
const std::map<std::string, EngineRegistration>& Registrations();
// nullptr if unknown.
const EngineRegistration* FindEngine(const std::string& name);
// "unknown engine 'x'; known engines: a, b, c"
Status UnknownEngine(const std::string& name);

}  // namespace pmhash::engines
