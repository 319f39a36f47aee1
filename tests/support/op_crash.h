// Crashes inside one operation of an engine under the power-failure simulator
// (src/pm/crashsim.h), for the engines' own crash tests (src/engines/*/*_crash_test.cc).
//
// CrashDuringOp opens options.engine on a fresh DRAM pool watched by a pm::CrashSim, runs
// `setup` with no crash point, then `op` with a crash point at every fence and at
// `store_rate` of its stores (1: after every store; the operations are small). At each
// crash point it builds four images (kNone, kAll, and kRandom twice), recovers each with
// OpenEngine and checks it: ForEach returns no key twice and Count and Get agree with it
// (CheckIndex), the engine's invariants hold (Engine::CheckInvariants), then `check`. A good image must hold the state before `op`
// or the state after it (known only once `op` returns). Stores that bypassed the
// Persister are a failed expectation.
//
// Background work: WaitForBackgroundWork runs after `setup` and after `op`, before the
// hook is installed and before it is removed, because an engine's background thread
// (wophi's PAB refill) stores to PM and so must be idle whenever the hook changes. Crash
// points that thread reaches while `op` runs count like the op's own.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "pmhash/index.h"
#include "pmhash/options.h"
#include "support/harness.h"

namespace pmhash::testing {

struct OpCrashOutcome {
  int crash_points = 0;
  int images = 0;    // recovered and checked
  int bad = 0;       // images that failed a check or hold neither state
  std::string first_bad;  // what was wrong with the first bad image
};

// Fills a fresh index and returns its contents in *model.
using OpCrashSetup = std::function<void(Index* index, Model* model)>;
// The operation crashed into; it must return OK.
using OpCrashOp = std::function<Status(Index* index)>;
// A test's further check of a recovered image: "" or what is wrong. It runs after the
// image's contents were taken and its invariants checked, so it may go on using the
// index (insert, and so on).
using OpCrashCheck = std::function<std::string(Index* recovered)>;

// The usual further check: a recovered image keeps working (a new key goes in and comes
// back) and its invariants still hold after that insert.
std::string InsertsAfterRecovery(Index* recovered);

// options.engine names any spec FindSpec knows (`<engine>@degenerate-hash` too).
OpCrashOutcome CrashDuringOp(const Options& options, const OpCrashSetup& setup,
                             const OpCrashOp& op, const OpCrashCheck& check = nullptr,
                             double store_rate = 1.0);

// What a crash inside a batch may leave: the state after some prefix of the batch (the
// Index::Write contract), or, with an engine that groups a batch's commits (spash's
// group_commit), every key at the state after some prefix of its own ops.
enum class BatchOrder : uint8_t { kPrefix, kPerKey };

// Crashes inside one Index::Write of `ops` (a batch), as CrashDuringOp does inside one
// operation, except that a good image holds a state `order` allows (each op applied as
// its single call would), and the batch must end in the last one; an image made right
// after Write returns, with nothing written back that was not flushed and fenced, must
// hold that last state too. Statuses NotFound and AlreadyExists count as the op's
// answer, any other failure fails.
OpCrashOutcome CrashDuringBatch(const Options& options, const OpCrashSetup& setup,
                                const std::vector<WriteOp>& ops,
                                BatchOrder order = BatchOrder::kPrefix);

// The usual verdict on an outcome: at least `min_crash_points` crash points (the op
// reached the stores and fences it should) and no image holding neither state.
void ExpectAllOrNothing(const OpCrashOutcome& r, int min_crash_points);

// CrashDuringOp for each named op in turn, each on a fresh index `setup` fills, each
// judged by ExpectAllOrNothing (the op's name in the failure).
using NamedOps = std::vector<std::pair<std::string, OpCrashOp>>;
void ExpectEachAllOrNothing(const Options& options, const OpCrashSetup& setup,
                            const NamedOps& ops, int min_crash_points,
                            const OpCrashCheck& check = nullptr);

// Crashes into an insert of `key` that makes the table grow first (setup leaves it
// full): the engine counter `growth_counter` (IndexStats::engine_counters) must move by
// exactly one during the insert, and ExpectAllOrNothing judges the images.
void ExpectGrowthAllOrNothing(const Options& options, const OpCrashSetup& setup,
                              const std::string& key, const std::string& growth_counter,
                              int min_crash_points, const OpCrashCheck& check = nullptr);

// The key sequence of the cuckoo-style engines' crash tests (level, pfht): key i is
// Key8(i), except key 3, a 16-byte key (record form); every third value is a record.
std::string CrashKeyAt(uint64_t i);
std::string CrashValueAt(uint64_t i);
// Inserts CrashKeyAt(0..n-1) into *model as well; a refused one (TableFull, a full table
// with resize off) changes nothing and stays out of the model.
void FillCrashKeys(Index* index, Model* model, uint64_t n);
// The number of keys FillCrashKeys inserts before the insert that moves the engine
// counter `counter` (deterministic under the tests' fixed hash seed), found on a pool of
// its own; 0 with a failed expectation if none of the first `limit` does.
uint64_t KeysBeforeCounterMoves(const Options& options, const std::string& counter,
                                uint64_t limit);
// Crashes (CrashDuringOp) into the insert of key n after keys 0..n-1 (n by
// KeysBeforeCounterMoves, limit 3000), which must move `counter` by one; judged by
// ExpectAllOrNothing(min_crash_points), each image checked by InsertsAfterRecovery.
void ExpectInsertMovingAllOrNothing(const Options& options, const std::string& counter,
                                    int min_crash_points);
// The seven operations of the shared slot encoding (common/slot.h) that every engine's
// crash test crashes into: an inline and a record insert of absent keys, an inline and a
// record delete, an inline value update, a record update, and an inline -> record
// update. The present keys must hold what their name says once setup has run.
struct SlotOpKeys {
  std::string absent_inline;  // 8 bytes, absent: inserted with an 8-byte value
  std::string absent_record;  // absent: inserted with a long value (record form)
  std::string inline_key;     // present, inline: deleted; its value updated
  std::string inline_key2;    // present, inline: updated to a long value (-> record)
  std::string record_key;     // present, record form: deleted; updated
};
NamedOps SlotEncodingOps(const SlotOpKeys& keys);

// The persistence modes a crash test runs in, and their test names ("adr", "eadr"):
//   INSTANTIATE_TEST_SUITE_P(Modes, SomeCrashTest, PersistModes(), PersistModeTestName);
inline auto PersistModes() { return ::testing::Values(PersistMode::kAdr, PersistMode::kEadr); }
std::string PersistModeTestName(const ::testing::TestParamInfo<PersistMode>& info);

}  // namespace pmhash::testing
