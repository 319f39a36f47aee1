// Helpers shared by the conformance and crash suites: opening any EngineSpec on a DRAM
// or file pool, a reference model, and the checks an index must pass against it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "pm/alloc.h"
#include "pm/pool.h"
#include "pmhash/index.h"
#include "support/test_engines.h"

namespace pmhash::testing {

using Model = std::map<std::string, std::string>;

// The key-hash seed of the pools the suites create unless a test asks for another
// (Options::hash_seed): fixed, so that a seed replays a test exactly (docs/testing.md,
// "Seeds"), and not 0, so that every rehash of a stored key (resize, recovery) is
// checked to use the pool's seed.
inline constexpr uint64_t kTestHashSeed = 0x7e575eed5eed7e57ull;

// A fresh DRAM pool named for `spec` (attach a CrashSim to its base before opening).
Status NewDramPool(const EngineSpec& spec, uint64_t size, std::unique_ptr<pm::Pool>* pool,
                   uint64_t hash_seed = kTestHashSeed);
// OpenEngine with spec.make().
Status OpenOnPool(const EngineSpec& spec, std::unique_ptr<pm::Pool> pool, bool fresh,
                  const Options& options, pm::PersistObserver* observer,
                  std::unique_ptr<Index>* index);
// A fresh DRAM index (no observer); its pool's seed options.hash_seed, else kTestHashSeed.
Status OpenDram(const EngineSpec& spec, const Options& options, std::unique_ptr<Index>* index);
// Creates or recovers a file pool at `path` (a new one with options.hash_seed, else
// kTestHashSeed). Registered engines go through pmhash::Open (the public path); test-only
// engines, and specs with a test hash (EngineSpec::test_hash), through Pool::Create /
// Pool::Open.
Status OpenFile(const EngineSpec& spec, const std::string& path, const Options& options,
                std::unique_ptr<Index>* index);
// Drops an index without clean shutdown.
void Abandon(std::unique_ptr<Index>* index);
// Engine::WaitForBackgroundWork: the engine's background threads (which store to PM,
// and so reach a crash hook from their own thread) are idle when it returns.
void WaitForBackgroundWork(Index* index);
// Engine::SetAllocationFaults: every PM allocation of `index` asks `faults` first (null:
// none).
void SetAllocationFaults(Index* index, pm::AllocationFaults* faults);
// Engine::CheckInvariants, the engine's own full check: "" or what is wrong.
std::string CheckInvariantsOf(Index* index);

// One mutating operation of a script.
struct Op {
  enum Kind : uint8_t { kInsert, kUpdate, kPut, kDelete } kind;
  std::string key, value;
};
std::string Describe(const Op& op);
// What `op` returns on an index in state `model`; applies it to *model when OK.
Status ApplyToModel(const Op& op, Model* model);
Status ApplyToIndex(const Op& op, Index* index);

// The index's contents through ForEach; "" or what is wrong (a key seen twice).
std::string Snapshot(const Index& index, Model* out);

// Checks a (recovered) index against `model`, allowing `inflight` (if set) to have
// happened or not, for its key only. Checks: no key twice in ForEach, Count() equals the
// ForEach count, every allocated block is reachable exactly once (Engine::VerifyBlocks),
// ForEach and Get agree with the model. Returns "" or a description. No other thread may
// use the index meanwhile.
std::string CheckIndex(Index* index, const Model& model, const Op* inflight);
// The same with several interrupted operations (one per thread, on distinct keys).
std::string CheckIndex(Index* index, const Model& model, const std::vector<Op>& inflight);
// The contents of an index that passed CheckIndex(model, inflight): `model` with the
// interrupted op's outcome as the index shows it.
Model Settle(Index* index, const Model& model, const Op* inflight);
// Then keeps using it, the index holding exactly *model: inserts fresh keys of several
// sizes (short and long keys, inline and out-of-line values, so that every record size
// class hands out blocks again: a block recovery wrongly took for free is reused here),
// updates and deletes some of the model's keys, then checks the whole index against
// the model (CheckIndex) and its invariants (CheckInvariantsOf). With `grow`, before that check it also inserts max(64,
// 2 x Count()) keys, so the index resizes. *model follows. "" or a description.
std::string CheckKeepsWorking(Index* index, Model* model, uint64_t seed, bool grow);

// Printable form of a possibly binary key (quoted, escaped, truncated).
std::string Printable(std::string_view s);

// Soak multiplier from PMHASH_CRASH_SOAK (default 1, at least 1).
double SoakFactor();

// The seeds a model-based test runs (docs/testing.md, "Seeds"): by default `defaults`
// (fixed, so `make test` repeats itself); PMHASH_SEEDS=<k> runs k seeds, the defaults
// first, then fresh ones (std::random_device: another k each run); PMHASH_SEED=<n> runs
// exactly the seed n (a failure's replay). A malformed variable fails the current test.
// A test derives all its randomness from the seed, so one seed replays it exactly
// (multi-threaded tests: the same ops and crash decisions, not the same interleaving).
std::vector<uint64_t> TestSeeds(std::vector<uint64_t> defaults);
// "seed <n>; replay: PMHASH_SEED=<n> <binary> --gtest_filter=<current test>", for a
// SCOPED_TRACE around each seed's run, so every failure says how to rerun it.
std::string SeedNote(uint64_t seed);

// Runs fn in a forked child with a time limit; fn's string comes back through a pipe.
// A signal, a hang or an exit without a result is reported in *how ("" if fn returned).
std::string InChildProcess(const std::function<std::string()>& fn, int seconds, std::string* how);

}  // namespace pmhash::testing
