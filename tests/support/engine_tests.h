// Helpers shared by the engines' own tests (src/engines/*/*_test.cc, unit and crash):
// keys and values of a given shape, opening with an expectation instead of a Status, a
// temporary directory, engine counters, and the model check plus the engine's
// invariants. Engine-specific helpers (options, key placement) stay in each test.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pmhash/index.h"
#include "pmhash/options.h"
#include "support/harness.h"

namespace pmhash::testing {

// The 8 little-endian bytes of i: an 8-byte key (the engines' inline form).
std::string Key8(uint64_t i);

// `len` bytes: the little-endian bytes of i (at most 8 of them), then `tag` repeated.
std::string Bytes(uint64_t i, size_t len, char tag);

// The first n keys among Key8(from), Key8(from + 1), ... whose home in a table of
// `table_size` homes, Reduce(HashKey(key, kTestHashSeed), table_size) (util/hash.h, every
// engine's home cell or bucket in a pool of the suites' seed), is `home`.
std::vector<std::string> KeysWithHome(uint64_t home, uint64_t table_size, size_t n,
                                      uint64_t from);

// The first n keys among Key8(from), Key8(from + 1), ... whose HashKey (kTestHashSeed) has `low` as its
// bits under `low_mask` and `top` as its top `top_bits` bits (0: any): keys of one start
// bucket and one directory range of an extendible table.
std::vector<std::string> KeysWithHashBits(uint64_t low_mask, uint64_t low, unsigned top_bits,
                                          uint64_t top, size_t n, uint64_t from = 0);

// n keys that, inserted in order into an empty linear-probing table of `table_size`
// homes, form a run in which every key is displaced by one: cells 0 and 1 hold keys of
// home 0, cell j > 1 a key of home j - 1 (KeysWithHome's hash). Deleting the key in cell 0
// then moves every other key, whichever key fills each hole.
std::vector<std::string> KeysDisplacedByOne(uint64_t table_size, size_t n);

// Options for a pool of `pool_size` bytes holding `engine` with `engine_options`: a DRAM
// pool, or with a path set, a file pool created if missing; its hash seed kTestHashSeed;
// counting (count_stats on, which Options leaves off: the unit tests read the counters).
Options OptionsFor(const std::string& engine,
                   std::map<std::string, std::string> engine_options, uint64_t pool_size);

// The registration of `name` among RegisteredEngines(); a failed expectation (and a
// description with an empty name) if there is none.
EngineDescription Registration(const std::string& name);

// Open(o). A failure is a failed expectation (with the Status) and returns null.
std::unique_ptr<Index> OpenOrDie(const Options& o);

// The engine counter `name` (IndexStats::engine_counters). A counter the engine does
// not report is a failed expectation and reads 0.
uint64_t Counter(Index* index, const std::string& name);

// `len` bytes at `offset` of the file at `path` (a closed pool): into *out, or a failed
// expectation. The engines' tests reach a structure's bytes with it.
void ReadFromFile(const std::string& path, uint64_t offset, void* out, size_t len);
// Flips the bits `mask` of the byte at `offset` of the file at `path` (damage).
void FlipByteInFile(const std::string& path, uint64_t offset, uint8_t mask);

// A fresh directory under the system's temporary directory, named
// pmhash-<name>-XXXXXX; removed with everything in it when the object goes away (its
// owner permissions given back first, for tests that take them away).
class TempDir {
 public:
  explicit TempDir(const std::string& name = "test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name.
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Every key of the model is in the index with its value and nothing else is
// (CheckIndex: also Count, no key twice in ForEach, Get agrees with ForEach), and the
// engine's own invariants hold (CheckInvariantsOf).
void ExpectMatches(Index* index, const Model& model);

// `threads` threads write keys of their own (8 and 16 bytes; inserts, every `put_every`-th
// new key by Put instead (0: never), deletes, and Puts of new values) while reading each
// other's, each against its own model; every call must return what the model says, and
// the index must then hold the union of the models (ExpectMatches).
void ExpectThreadsAgreeWithTheirModels(Index* index, int threads, uint64_t per_thread,
                                       uint64_t put_every = 0);

// Two writer threads, each inserting n 8-byte keys of its own from 10^6 (t + 1) on and
// deleting every third again, so that segments split (and directories double) while they
// run; a failed operation counts in *bad, and *writing drops by one as each ends.
std::vector<std::thread> SplittingWriters(Index* index, uint64_t n, std::atomic<uint64_t>* bad,
                                          std::atomic<int>* writing);

// SplittingWriters(index, n) while two readers Get keys present throughout (Key8(i) ->
// Key8(~i) for i < stable, inserted here first: each read must find its value) and keys
// never written (each read must miss), until the writers end: the failed writes and reads.
uint64_t ReadWhileWritersSplit(Index* index, uint64_t stable, uint64_t n);

}  // namespace pmhash::testing
