// Crashes inside single operations of `spash` under the power-failure simulator
// (src/pm/crashsim.h): at every fence and after every store, crash images are recovered
// and must hold exactly the state before or after the operation, with the engine's
// invariants intact (segments partition the hash space, exact hints, counts). Covers the
// slot encoding's seven operations, an insert into an overflow bucket (hint and entry in
// two lines), a delete that clears a hint, a split (with the doubling before it), a merge,
// the atomic regions of htm_emulated with injected aborts and a batch of group_commit.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engines/spash/spash.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"
#include "util/hash.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

// 8 segments at depth 3.
Options Small(PersistMode mode, std::map<std::string, std::string> engine_options = {}) {
  Options o;
  o.engine = "spash";
  o.pool_size = 4ull << 20;
  o.persist = mode;
  o.initial_capacity = 16;
  o.engine_options = std::move(engine_options);
  return o;
}

// Keys of directory prefix p at depth 3 (any main bucket, or main bucket b):
// KeysWithHashBits(0, 0, 3, p, n), KeysWithHashBits(3, b, 3, p, n).

// Inserts `keys`, every third with a record value (chunked, 40 bytes).
void InsertAllSpash(Index* x, Model* m, const std::vector<std::string>& keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string v = i % 3 == 0 ? std::string(24, 'r') + Key8(i) : Key8(i * 7);
    ASSERT_TRUE(x->Insert(keys[i], v).ok());
    (*m)[keys[i]] = v;
  }
}

class SpashCrashTest : public ::testing::TestWithParam<PersistMode> {};

TEST_P(SpashCrashTest, SlotOperationsAreAllOrNothing) {
  const std::vector<std::string> keys = KeysWithHashBits(0, 0, 3, 3, 6);
  // keys[0] and keys[3] hold records; the others inline values (InsertAll).
  ExpectEachAllOrNothing(Small(GetParam()),
                         [&](Index* x, Model* m) { InsertAllSpash(x, m, {keys[0], keys[1], keys[2],
                                                                    keys[3], keys[4]}); },
                         SlotEncodingOps({.absent_inline = keys[5],
                                          .absent_record = keys[5],
                                          .inline_key = keys[1],
                                          .inline_key2 = keys[2],
                                          .record_key = keys[3]}),
                         2);
}

TEST_P(SpashCrashTest, OverflowInsertAndHintClearingDeleteAreAllOrNothing) {
  // Four keys of main bucket 1 fill it; the fifth goes to bucket 2 with a hint in bucket 1
  // (two lines: recovery rebuilds a hint a crash lost). Deleting it clears the hint.
  const std::vector<std::string> keys = KeysWithHashBits(3, 1, 3, 5, 5);
  OpCrashOutcome r = CrashDuringOp(
      Small(GetParam()),
      [&](Index* x, Model* m) { InsertAllSpash(x, m, {keys[0], keys[1], keys[2], keys[3]}); },
      [&](Index* x) { return x->Insert(keys[4], Key8(44)); });
  ExpectAllOrNothing(r, 2);
  r = CrashDuringOp(
      Small(GetParam()), [&](Index* x, Model* m) { InsertAllSpash(x, m, keys); },
      [&](Index* x) { return x->Delete(keys[3]); });
  ExpectAllOrNothing(r, 2);
}

TEST_P(SpashCrashTest, SplitIsAllOrNothing) {
  // Sixteen keys fill the segment of prefix 2; the seventeenth splits it (after a
  // doubling of the directory, which is volatile). A freed segment is reused as the new
  // one, so its old bytes are there to show through a split published too early.
  const std::vector<std::string> keys = KeysWithHashBits(0, 0, 3, 2, 17);
  const std::vector<std::string> stale = KeysWithHashBits(0, 0, 3, 1, 17);
  ExpectGrowthAllOrNothing(
      Small(GetParam()),
      [&](Index* x, Model* m) {
        // A split and a merge first: the segment freed by the merge, its entries still in
        // it, is the one the split below takes.
        InsertAllSpash(x, m, stale);
        for (const std::string& k : stale) {
          ASSERT_TRUE(x->Delete(k).ok());
          m->erase(k);
        }
        ASSERT_EQ(Counter(x, "merges"), 1u);
        InsertAllSpash(x, m, std::vector<std::string>(keys.begin(), keys.begin() + 16));
      },
      keys[16], "splits", 4);
}

TEST_P(SpashCrashTest, MergeIsAllOrNothing) {
  // Seventeen keys of prefix 2 split its segment into prefixes 4 and 5 at depth 4. Delete
  // keys of the upper half until both hold 9 together; the next delete leaves at most 4
  // in the upper half and 8 together: the buddies merge.
  const std::vector<std::string> keys = KeysWithHashBits(0, 0, 3, 2, 17);
  std::vector<std::string> upper;
  for (const std::string& k : keys) {
    if ((HashKey(k, kTestHashSeed) >> 60 & 1) == 1) upper.push_back(k);
  }
  ASSERT_GE(upper.size(), 6u);
  const size_t to_delete = keys.size() - 9;  // from the upper half, before the op
  ASSERT_LT(to_delete, upper.size());
  const std::string last = upper[to_delete];
  std::string error;
  OpCrashOutcome r = CrashDuringOp(
      Small(GetParam()),
      [&](Index* x, Model* m) {
        InsertAllSpash(x, m, keys);
        for (size_t i = 0; i < to_delete; ++i) {
          ASSERT_TRUE(x->Delete(upper[i]).ok());
          m->erase(upper[i]);
        }
        if (Counter(x, "merges") != 0) error = "merged before the op";
      },
      [&](Index* x) {
        const uint64_t before = Counter(x, "merges");
        Status s = x->Delete(last);
        if (Counter(x, "merges") != before + 1) error = "the delete did not merge";
        return s;
      });
  EXPECT_EQ(error, "");
  ExpectAllOrNothing(r, 3);
}

TEST_P(SpashCrashTest, AtomicRegionsWithInjectedAbortsAreAllOrNothing) {
  // htm_emulated: commit phases in the simulator's atomic regions, aborted at random and
  // retried; in eadr an update of a record by one of the same size is written in place
  // inside its region, which crash images show whole or not at all.
  const std::vector<std::string> keys = KeysWithHashBits(0, 0, 3, 6, 6);
  const Options o = Small(GetParam(), {{"htm_emulated", "on"}, {"htm_abort_rate", "0.5"}});
  ExpectEachAllOrNothing(
      o, [&](Index* x, Model* m) { InsertAllSpash(x, m, {keys[0], keys[1], keys[2], keys[3]}); },
      {{"in-place record update",
        [&](Index* x) { return x->Update(keys[0], std::string(24, 'n') + Key8(5)); }},
       {"inline update", [&](Index* x) { return x->Update(keys[1], Key8(99)); }},
       {"insert", [&](Index* x) { return x->Insert(keys[5], Key8(55)); }},
       {"delete", [&](Index* x) { return x->Delete(keys[2]); }}},
      1);
}

TEST_P(SpashCrashTest, GroupedBatchLeavesEachKeyAtAPrefixOfItsOps) {
  // group_commit: the batch's commits are fenced once, at its end (or when an op meets a
  // segment the batch holds). Each key must be at a prefix of its own ops, and every op
  // durable when Write returns. A's old record, freed by its out-of-place update, must
  // not be handed to E's insert (same size class) before the update is durable.
  std::vector<std::string> k;
  for (uint64_t p = 1; p <= 6; ++p) k.push_back(KeysWithHashBits(0, 0, 3, p, 1)[0]);
  const std::string b2 = KeysWithHashBits(0, 0, 3, 2, 2)[1];  // B's segment
  const std::string a = k[0], b = k[1], c = k[2], d = k[3], e = k[4], f = k[5];
  const std::string record1 = std::string(24, 'r') + Key8(1);
  const std::string record2 = std::string(24, 's') + Key8(2);
  const std::string v11 = Key8(11), v21 = Key8(21), v22 = Key8(22), v31 = Key8(31),
                    v61 = Key8(61);  // the ops' views outlive them
  const std::vector<WriteOp> ops = {
      {WriteOp::Kind::kUpdate, a, record2},   // out of place: A's old record freed
      {WriteOp::Kind::kInsert, e, record1},   // a record of the same size class
      {WriteOp::Kind::kDelete, b, {}},
      {WriteOp::Kind::kPut, b, v21},          // B again: its segment is held
      {WriteOp::Kind::kDelete, d, {}},
      {WriteOp::Kind::kInsert, f, v61},
      {WriteOp::Kind::kPut, a, v11},          // record -> inline, A's second op
      {WriteOp::Kind::kUpdate, c, v31},       // inline, in place
      {WriteOp::Kind::kInsert, b2, v22},      // B's segment once more
      {WriteOp::Kind::kDelete, c, {}},
  };
  const OpCrashOutcome r = CrashDuringBatch(
      Small(GetParam(), {{"group_commit", "on"}}),
      [&](Index* x, Model* m) { InsertAllSpash(x, m, {a, b, c, d}); }, ops, BatchOrder::kPerKey);
  ExpectAllOrNothing(r, 3);
}

INSTANTIATE_TEST_SUITE_P(Modes, SpashCrashTest, testing::PersistModes(),
                         testing::PersistModeTestName);

}  // namespace
}  // namespace pmhash::engines
