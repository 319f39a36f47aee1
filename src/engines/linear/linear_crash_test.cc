// Crashes inside single operations of `linear-log` and `linear` under the power-failure
// simulator (src/pm/crashsim.h): at every fence of the operation and at sampled stores,
// several crash images are recovered and compared with the state before and after the
// operation. linear-log must always recover one of the two (all-or-nothing) with its
// invariants intact; linear must be caught inconsistent by some image of a multi-cell
// backward shift (the consistency cost the paper's logging pays for).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engines/linear/linear.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

// Crash points at every fence and at 5% of stores (the shifts store many cells).
constexpr double kStoreRate = 0.05;

Options SmallTable(const std::string& engine) {
  Options o;
  o.engine = engine;
  o.pool_size = 4ull << 20;
  o.engine_options = {{"resize", "off"}};
  o.engine_options["cells"] = "30";
  return o;
}

// A run from the last cell across the table's end: cells 29, 0, 1 (home 29), 2, 3
// (home 0), 4 (home 2). Deleting cell 29's key moves all five back.
std::vector<std::string> WrappedRun(Index* index, Model* model) {
  std::vector<std::string> keys = KeysWithHome(29, 30, 3, 1);
  for (const std::string& k : KeysWithHome(0, 30, 2, 1000)) keys.push_back(k);
  keys.push_back(KeysWithHome(2, 30, 1, 5000)[0]);
  for (size_t i = 0; i < keys.size(); ++i) {
    // Mix forms: every other item out of line.
    const std::string v = i % 2 == 0 ? Key8(i) : "record value " + std::to_string(i);
    EXPECT_TRUE(index->Insert(keys[i], v).ok());
    (*model)[keys[i]] = v;
  }
  return keys;
}

class LinearCrashTest : public ::testing::TestWithParam<PersistMode> {};

TEST_P(LinearCrashTest, LoggedDeleteWithWrappedShiftIsAllOrNothing) {
  Options o = SmallTable("linear-log");
  o.persist = GetParam();
  std::string victim;
  OpCrashOutcome r = CrashDuringOp(
      o, [&](Index* index, Model* m) { victim = WrappedRun(index, m)[0]; },
      [&](Index* index) { return index->Delete(victim); }, nullptr,
      kStoreRate);
  ExpectAllOrNothing(r, 4);
}

// A delete in a run of 800 keys of one home, whose backward shift (799 moves, 267 lines)
// is too long for a lane of the 4 MiB pool: linear-log moves the fewest keys instead (one)
// under its undo log, still all-or-nothing.
TEST_P(LinearCrashTest, LoggedFewestMovesDeleteIsAllOrNothing) {
  Options o = SmallTable("linear-log");
  o.persist = GetParam();
  o.engine_options["cells"] = "1500";
  std::vector<std::string> keys;
  OpCrashOutcome r = CrashDuringOp(
      o,
      [&](Index* index, Model* m) {
        keys = KeysWithHome(0, 1500, 800, 1);
        for (size_t i = 0; i < keys.size(); ++i) {
          const std::string v = i % 2 == 0 ? Key8(i) : "record value " + std::to_string(i);
          EXPECT_TRUE(index->Insert(keys[i], v).ok());
          (*m)[keys[i]] = v;
        }
      },
      [&](Index* index) { return index->Delete(keys[0]); }, nullptr, kStoreRate);
  ExpectAllOrNothing(r, 4);
}

// Inserts (inline and record), the updates `engine` makes failure-atomic and a growth,
// each crashed into at every fence and store: all-or-nothing.
void InsertUpdateAndGrowAreAllOrNothing(const std::string& engine, PersistMode mode,
                                        bool inline_to_record) {
  Options o = SmallTable(engine);
  o.persist = mode;
  // Keys of other than 8 bytes are out of line (record form).
  auto fill = [](int n, int long_every) {
    return [=](Index* x, Model* m) {
      for (int k = 0; k < n; ++k) {
        const std::string key = k % long_every == 1 ? "k-long-key-" + std::to_string(k) : Key8(k);
        EXPECT_TRUE(x->Insert(key, Key8(k)).ok());
        (*m)[key] = Key8(k);
      }
    };
  };
  NamedOps ops = {
      {"record insert", [](Index* x) { return x->Insert("sixteen-byte-key", "a record"); }},
      // Records of 2 and 10 lines: more lines whose crash images can lack part of one.
      {"record insert, 100 bytes",
       [](Index* x) { return x->Insert("key-100", std::string(100, 'r')); }},
      {"record insert, 600 bytes",
       [](Index* x) { return x->Insert("key-600", std::string(600, 'r')); }},
      {"inline insert", [](Index* x) { return x->Insert(Key8(99), Key8(98)); }},
      {"record->record", [](Index* x) { return x->Update("k-long-key-1", "another record"); }},
      {"inline value", [](Index* x) { return x->Update(Key8(2), Key8(5)); }},
  };
  if (inline_to_record) {
    ops.push_back(
        {"inline->record", [](Index* x) { return x->Update(Key8(0), "now out of line"); }});
  }
  ExpectEachAllOrNothing(o, fill(12, 3), ops, 1);
  // Growth: with max_load 0.5 the 16th insert into 30 cells doubles the table.
  Options grow = o;
  grow.engine_options = {{"max_load", "0.5"}, {"cells", "30"}};
  ExpectGrowthAllOrNothing(grow, fill(15, 2), Key8(100), "resizes", 3);
}

TEST_P(LinearCrashTest, LoggedInsertUpdateAndGrowAreAllOrNothing) {
  InsertUpdateAndGrowAreAllOrNothing("linear-log", GetParam(), /*inline_to_record=*/true);
}

// `linear` without a log still makes these all-or-nothing (linear.h, persist order): an
// insert writes one line (words before the form) after its record is durable, the updates
// below change one 8-byte word, and a resize switches the root's table pointer. Only
// multi-cell shifts and the inline -> record update (three stores into an occupied
// cell) can tear.
TEST_P(LinearCrashTest, UnloggedInsertUpdateAndGrowAreAllOrNothing) {
  InsertUpdateAndGrowAreAllOrNothing("linear", GetParam(), /*inline_to_record=*/false);
}

// A delete that frees the last record of an allocator chunk: the allocator gives the
// chunk back (a durable table entry) when its class has room elsewhere, so the free must
// follow the delete's commit, or a rolled-back delete points into a free chunk. Records
// of 4016 bytes (16 to a 64 KiB chunk): the 17th is alone in the second chunk, and a
// delete in the first leaves the class room there.
TEST_P(LinearCrashTest, LoggedDeleteThatEmptiesARecordChunkIsAllOrNothing) {
  Options o = SmallTable("linear-log");
  o.persist = GetParam();
  OpCrashOutcome r = CrashDuringOp(
      o,
      [](Index* x, Model* m) {
        for (uint64_t k = 0; k < 17; ++k) {
          EXPECT_TRUE(x->Insert(Key8(k), std::string(4000, static_cast<char>('a' + k))).ok());
          (*m)[Key8(k)] = std::string(4000, static_cast<char>('a' + k));
        }
        EXPECT_TRUE(x->Delete(Key8(0)).ok());
        m->erase(Key8(0));
      },
      [](Index* x) { return x->Delete(Key8(16)); }, nullptr, kStoreRate);
  ExpectAllOrNothing(r, 3);
}

// A delete whose shift is longer than an undo-log lane doubles the table first (twice
// here) and deletes there: the growths and the delete together are one op, so every
// image recovers the key present or deleted, never a half-grown table.
TEST_P(LinearCrashTest, LoggedDeleteThatDoublesTheTableFirstIsAllOrNothing) {
  Options o = SmallTable("linear-log");
  o.persist = GetParam();
  o.engine_options = {{"cells", "1500"}};  // resizing on
  std::string victim;
  OpCrashOutcome r = CrashDuringOp(
      o,
      [&](Index* x, Model* m) {
        // The first key's delete moves all the others, too many lines for a lane.
        for (const std::string& k : KeysDisplacedByOne(1500, 900)) {
          EXPECT_TRUE(x->Insert(k, k).ok());
          (*m)[k] = k;
          if (victim.empty()) victim = k;
        }
      },
      [&](Index* x) { return x->Delete(victim); }, nullptr, /*store_rate=*/0.001);
  ExpectAllOrNothing(r, 8);
}

// The baseline without logging: some crash image of the same multi-cell shift is
// inconsistent (a key twice, or a key cut off from its home). This is what `linear`
// being registered as not crash consistent means.
TEST_P(LinearCrashTest, UnloggedDeleteWithShiftCanBeTorn) {
  Options o = SmallTable("linear");
  o.persist = GetParam();
  std::string victim;
  OpCrashOutcome r = CrashDuringOp(
      o, [&](Index* index, Model* m) { victim = WrappedRun(index, m)[0]; },
      [&](Index* index) { return index->Delete(victim); }, nullptr,
      kStoreRate);
  EXPECT_GT(r.crash_points, 3);
  EXPECT_GT(r.bad, 0) << "no crash image of an unlogged 5-cell shift was inconsistent";
}

INSTANTIATE_TEST_SUITE_P(Modes, LinearCrashTest, testing::PersistModes(),
                         testing::PersistModeTestName);

}  // namespace
}  // namespace pmhash::engines
