// What every engine builds on: the Engine base class (owning the pool, persister,
// allocator, undo log and slot codec), engine-option parsing, and the registry.
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
//   Close():         Shutdown -> Allocator::PersistState -> Pool::MarkClean
// An engine adds a folder src/engines/<name>/ and registers itself with
// PMHASH_REGISTER_ENGINE; the conformance and crash suites then pick it up.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/locks.h"
#include "common/slot.h"
#include "pm/alloc.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/undo_log.h"
#include "pmhash/index.h"

namespace pmhash::engines {

// Typed access to Options::engine_options. Each getter records the name as known;
// Finish() reports malformed or out-of-range values and unknown names (listing the known
// ones) as InvalidArgument.
class EngineOptions {
 public:
  explicit EngineOptions(const std::map<std::string, std::string>& values) : values_(values) {}

  uint64_t Uint(const std::string& name, uint64_t fallback, uint64_t min, uint64_t max);
  double Double(const std::string& name, double fallback, double min, double max);
  bool Bool(const std::string& name, bool fallback);  // on/off, true/false, 1/0, yes/no
  Status Finish() const;

 private:
  const std::map<std::string, std::string>& values_;
  std::set<std::string> known_;
  std::vector<std::string> errors_;
};

class Engine : public Index {
 public:
  // Without Close() the pool is dropped unclean (as Abandon): a base-class destructor
  // cannot call the engine's Shutdown. Engines made through the registry or MakeEngine
  // are wrapped so that destruction closes cleanly (ClosingEngine below).
  ~Engine() override;

  Status Close() final;
  Status Sync() final;
  bool is_open() const { return pool_ != nullptr; }

  // Drops the index without a clean shutdown, as a crash would (tests, bench recovery
  // time). The pool is unmapped; the next open recovers.
  void Abandon();

  IndexStats Stats() const override;

  // Waits until the background work started so far (PAB refills, filter rebuilds) has
  // finished: a quiet point for tests and for the benchmark's counters. Default: an
  // engine without background work returns at once.
  virtual void WaitForBackgroundWork() {}

  pm::Pool& pool() const { return *pool_; }
  pm::Persister& persister() const { return *persister_; }

  // For `pmhash pool check`: the allocator against the blocks EnumerateBlocks reaches
  // (Allocator::Verify): the number of blocks, or Corruption naming leaked, twice-reached
  // and unallocated blocks. Waits for background work first; no other thread may use the
  // index meanwhile.
  Result<uint64_t> VerifyBlocks();

 protected:
  Engine() = default;

  // Reads engine options (sizes, switches). Called before Create and Recover.
  virtual void Configure(EngineOptions& options, const Options& index_options) = 0;
  // Builds an empty index in a new pool (the root area is zero).
  virtual Status Create() = 0;
  // Attaches to the structure in an existing pool. `clean` is false after a crash:
  // repair what the persist order allows to be torn. The allocator is ready.
  virtual Status Recover(bool clean) = 0;
  // Visits every block reachable from the root (for Allocator::Rebuild), each once. Runs
  // before Recover, reading raw PM: offsets must be checked (pool().Contains) before use;
  // VerifyBlocks also runs it on an open, quiet index.
  virtual Status EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const = 0;
  // Persists what a clean reopen needs (e.g. a DRAM filter). Default: nothing.
  virtual Status Shutdown() { return Status::OK(); }
  // Engine-specific figures for Stats(): key slots, DRAM bytes, counters.
  virtual void FillStats(IndexStats* stats) const = 0;
  // Stops (joins) the engine's background threads before the pool goes away; called
  // first by Close() and Abandon(), so it must be idempotent. Default: nothing.
  virtual void StopBackgroundWork() {}

  // Replaces the value of the slot `words` whose form byte is `*form`, as the shared slot
  // encoding prescribes (common/slot.h), and persists it before returning: an inline
  // value with one 8-byte store; a record by a new record, a fence, one 8-byte store of
  // the pointer, then the old record freed; inline -> record (words and form change
  // together) under an UndoLog transaction. The caller holds what excludes other writers
  // of the slot. `undo_txs()` counts the transactions.
  Status UpdateSlot(uint8_t* form, KvWords* words, std::string_view key, std::string_view value,
                    uint64_t key_hash);
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
  friend Status OpenEngine(std::unique_ptr<Engine> engine, std::unique_ptr<pm::Pool> pool,
                           bool fresh, const Options& options, pm::PersistObserver* observer,
                           std::unique_ptr<Index>* index);
  Status Start(std::unique_ptr<pm::Pool> pool, bool fresh, const Options& options,
               pm::PersistObserver* observer);

  std::unique_ptr<pm::Pool> pool_;
  std::unique_ptr<pm::Persister> persister_;
  std::unique_ptr<pm::UndoLog> undo_log_;
  std::unique_ptr<pm::Allocator> allocator_;
  std::unique_ptr<SlotCodec> codec_;
  std::string engine_name_;
  bool recovered_ = false;
  double recovery_ms_ = 0;
  std::atomic<uint64_t> undo_txs_{0};
};

// Opens `engine` on a pool that is already mapped: the path every Open takes, and the
// one the crash simulator and tests use with their own pools, observers and test-only
// engines. `fresh` means the pool was just created.
Status OpenEngine(std::unique_ptr<Engine> engine, std::unique_ptr<pm::Pool> pool, bool fresh,
                  const Options& options, pm::PersistObserver* observer,
                  std::unique_ptr<Index>* index);

// The answer of a search that takes no lock (validated by a VersionedRwLock): kFound or
// kAbsent stand; kRetry means a writer was in, try again; kLocked means only the locked
// search can answer (e.g. the key's bytes are in a record).
enum class Optimistic : uint8_t { kFound, kAbsent, kRetry, kLocked };
inline constexpr int kOptimisticTries = 4;

// Runs `find` (returning Optimistic) until it stands or needs the lock, backing off
// between tries; after kOptimisticTries retries the answer is kLocked.
template <typename Find>
Optimistic SearchOptimistically(Find&& find) {
  for (int attempt = 0; attempt < kOptimisticTries; ++attempt) {
    const Optimistic answer = find();
    if (answer != Optimistic::kRetry) return answer;
    SpinBackoff(attempt);
  }
  return Optimistic::kLocked;
}

// Takes, in `mode`, the lock of the stripe that guards a key's home in a table whose size
// only changes while every stripe is held (a resize): reads the size, locks the stripe
// `locate(size, &home)` names, and retries if the size moved in between. Returns the
// stripe (its `mu` is held) and sets *home and *size for the size it holds.
template <typename Stripe, typename Locate>
Stripe& LockHomeStripe(const std::atomic<uint64_t>& table_size, LockMode mode, Locate&& locate,
                       uint64_t* home, uint64_t* size) {
  for (;;) {
    const uint64_t n = table_size.load(std::memory_order_acquire);
    Stripe& s = locate(n, home);
    if (mode == LockMode::kExclusive) {
      s.mu.lock();
    } else {
      s.mu.lock_shared();
    }
    if (table_size.load(std::memory_order_acquire) == n) {
      *size = n;
      return s;
    }
    if (mode == LockMode::kExclusive) {  // a resize came between the read and the lock
      s.mu.unlock();
    } else {
      s.mu.unlock_shared();
    }
  }
}

// Closes cleanly on destruction: the most-derived destructor runs while the engine is
// still whole, so Close() may call its virtual Shutdown().
template <typename E>
class ClosingEngine : public E {
 public:
  ~ClosingEngine() override {
    if (this->is_open()) (void)this->Close();
  }
};

// How every engine object is made (registry, tests).
template <typename E>
std::unique_ptr<Engine> MakeEngine() {
  return std::make_unique<ClosingEngine<E>>();
}

// Registry.
struct EngineRegistration {
  EngineDescription description;
  std::function<std::unique_ptr<Engine>()> make;
};
void RegisterEngine(EngineRegistration registration);
// nullptr if unknown.
const EngineRegistration* FindEngine(const std::string& name);
// "unknown engine 'x'; known engines: a, b, c"
Status UnknownEngine(const std::string& name);

struct EngineRegistrar {
  explicit EngineRegistrar(EngineRegistration registration) {
    RegisterEngine(std::move(registration));
  }
};

}  // namespace pmhash::engines

// In the engine's .cc (id is a C identifier, name what users type):
//   PMHASH_REGISTER_ENGINE(linear_log, "linear-log", "summary", "paper", true, LinearLog);
#define PMHASH_REGISTER_ENGINE(id, name, summary, paper, crash_consistent, Class)           \
  static ::pmhash::engines::EngineRegistrar pmhash_engine_registrar_##id(                  \
      ::pmhash::engines::EngineRegistration{{name, summary, paper, crash_consistent},       \
                                            [] { return ::pmhash::engines::MakeEngine<Class>(); }})
