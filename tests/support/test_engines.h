// Test-only engines (never registered in the library) and the engine lists the suites
// run over.
//
// `test-tiny` is a deliberately simple, correct engine the suites are developed against
// and always run on: a linear-probing table of 8-byte record pointers (0 empty, 1
// tombstone), one record block per key, a reader-writer lock over everything. A key's
// probe starts at Reduce(KeyHash(key), capacity), as every engine's home does. Scan reads
// its homes as linear probing does (a run to its first empty slot, tombstones included),
// under the lock for the whole page: every key present throughout is passed at least once.
// Commit point: the 8-byte slot store, after the record is durable. Growth copies the
// pointers into a new table, persists it, then switches the root's table pointer with
// one 8-byte store.
//
// Broken variants prove the suites can fail:
//   `test-commit-early`  stores the slot before the record is durable (one fence for
//                        both: a crash can persist the pointer and not the record);
//   `test-no-fence`      omits the fence after the commit store, so an acknowledged
//                        insert or update is not yet durable when the call returns;
//   `test-no-enumerate`  forgets its records in EnumerateBlocks (and its recovery trusts
//                        them): after a crash the allocator hands live records out again;
//   `test-log-after-commit`  writes an update's undo record only after the commit store
//                        is durable, and recovery rolls back to it: an update already
//                        visible in durable state disappears again later in the same op.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engines/engine.h"

namespace pmhash::testing {

// An engine the suites run, from the registry's data (engines/engine_info.h) or, for the
// test-only engines, from here.
struct EngineSpec {
  std::string name;
  std::function<std::unique_ptr<engines::Engine>()> make;
  bool crash_consistent = true;
  bool test_only = false;
  // The engine's test profile: crash-run options (small groups, buckets and PAB blocks,
  // so that resizes, PAB refills and filter growth happen inside the crash suite's short
  // scripts), the growth counters the suite asserts moved (empty: any of "resizes",
  // "grows", "splits", "doublings" the engine reports must), and pool sizes.
  engines::TestProfile test;
  const engines::EngineInfo* info = nullptr;  // all the registry data (lives forever)
  // A key hash replacing the pool's on every engine make() returns
  // (Engine::SetKeyHashForTesting; null: the pool's own): the degenerate-hash runs.
  engines::KeyHashFn test_hash = nullptr;
};

// The degenerate test hash (docs/testing.md, "The degenerate-hash run"): every key hashes
// to one of kDegenerateHashes, chosen by xxh3 of the key, so keys collide in all 64 bits,
// not only in their home. Two of the four share their top 32 bits and their low 6 bits
// (one home in any table of up to 2^32 homes, one group tag) and differ in between; one
// is 0 (the first home, the first cursor position) and one is 2^64 - 1 (the last home:
// linear probing wraps around from it).
inline constexpr uint64_t kDegenerateHashes[4] = {0, 0x5555555500000001ull,
                                                  0x5555555580000041ull, ~uint64_t{0}};
uint64_t DegenerateHash(std::string_view key);
// The first n keys "one hash <i>" whose DegenerateHash is kDegenerateHashes[which].
std::vector<std::string> KeysOfDegenerateHash(size_t n, int which);
// `spec` with the degenerate hash installed on every engine it makes, named
// `<name>@degenerate-hash` (FindSpec knows the name). Its pools are made through the
// test-only path (the hash is not recorded in a pool: every open must install it).
EngineSpec WithDegenerateHash(EngineSpec spec);
inline constexpr char kDegenerateSuffix[] = "@degenerate-hash";

// Registered engines (engines::Registrations()) followed by `test-tiny`.
std::vector<EngineSpec> ConformanceEngines();
// The crash-consistent ones among them.
std::vector<EngineSpec> CrashConsistentEngines();
// `test-tiny` and its broken variants.
EngineSpec TinyEngine();
EngineSpec CommitEarlyEngine();
EngineSpec NoFenceEngine();
EngineSpec NoEnumerateEngine();
EngineSpec LogAfterCommitEngine();
// By name among all of the above (and `<name>@degenerate-hash` for any of them); an
// empty spec (no make) if unknown.
EngineSpec FindSpec(const std::string& name);

// Engine names for INSTANTIATE_TEST_SUITE_P (gtest names: '-' becomes '_').
std::vector<std::string> Names(const std::vector<EngineSpec>& specs);
std::string GtestName(const std::string& engine);

}  // namespace pmhash::testing
