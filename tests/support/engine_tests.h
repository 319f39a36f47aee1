// Helpers shared by the engines' own tests (src/engines/*/*_test.cc, unit and crash):
// keys and values of a given shape, opening with an expectation instead of a Status, a
// temporary directory, engine counters, and the model check plus the engine's
// invariants. Engine-specific helpers (options, key placement) stay in each test.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
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

// n keys that, inserted in order into an empty linear-probing table of `table_size`
// homes, form a run in which every key is displaced by one: cells 0 and 1 hold keys of
// home 0, cell j > 1 a key of home j - 1 (KeysWithHome's hash). Deleting the key in cell 0
// then moves every other key, whichever key fills each hole.
std::vector<std::string> KeysDisplacedByOne(uint64_t table_size, size_t n);

// Options for a pool of `pool_size` bytes holding `engine` with `engine_options`: a DRAM
// pool, or with a path set, a file pool created if missing; its hash seed kTestHashSeed.
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

}  // namespace pmhash::testing
