// Test-only engines (never registered in the library) and the engine lists the suites
// run over.
//
// `test-tiny` is a deliberately simple, correct engine the suites are developed against
// and always run on: a linear-probing table of 8-byte record pointers (0 empty, 1
// tombstone), one record block per key, a reader-writer lock over everything.
// Commit point: the 8-byte slot store, after the record is durable. Growth copies the
// pointers into a new table, persists it, then switches the root's table pointer with
// one 8-byte store.
//
// Two broken variants prove the crash suite can fail:
//   `test-commit-early`  stores the slot before the record is durable (one fence for
//                        both: a crash can persist the pointer and not the record);
//   `test-no-fence`      omits the fence after the commit store, so an acknowledged
//                        insert or update is not yet durable when the call returns.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engines/engine.h"

namespace pmhash::testing {

struct EngineSpec {
  std::string name;
  std::function<std::unique_ptr<engines::Engine>()> make;
  bool crash_consistent = true;
  bool test_only = false;
};

// Registered engines (from RegisteredEngines()) followed by `test-tiny`.
std::vector<EngineSpec> ConformanceEngines();
// The crash-consistent ones among them.
std::vector<EngineSpec> CrashConsistentEngines();
// `test-tiny`, `test-commit-early`, `test-no-fence`.
EngineSpec TinyEngine();
EngineSpec CommitEarlyEngine();
EngineSpec NoFenceEngine();
// By name among all of the above; nullopt-like empty spec (no make) if unknown.
EngineSpec FindSpec(const std::string& name);

// Engine names for INSTANTIATE_TEST_SUITE_P (gtest names: '-' becomes '_').
std::vector<std::string> Names(const std::vector<EngineSpec>& specs);
std::string GtestName(const std::string& engine);

}  // namespace pmhash::testing
