// Crashes inside single operations of `dash` under the power-failure simulator
// (src/pm/crashsim.h): at every fence and after every store, crash images are recovered
// and must hold exactly the state before or after the operation, with the engine's
// invariants intact. Covers the slot encoding's seven operations, a displacement, a stash
// insert and a stash delete, a split that doubles the directory and one that does not
// (a range of two entries, whose half-switched state recovery sets back).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engines/dash/dash.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"

namespace pmhash::engines {
namespace {

using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

// One segment of 4 + 1 buckets: a home holds 28 keys in its two buckets, 14 in the stash.
Options Small(PersistMode mode) {
  Options o;
  o.engine = "dash";
  o.pool_size = 4ull << 20;
  o.persist = mode;
  o.engine_options = {{"buckets", "4"}, {"stash_buckets", "1"}, {"segments", "1"}};
  return o;
}

// Keys of home bucket `home` whose top two hash bits are `top`.
std::vector<std::string> Top(uint64_t home, uint64_t top, size_t n) {
  return KeysWithHashBits(3, home, 2, top, n, 1000000 * (top + 1) + 100000 * home);
}

void InsertDash(Index* x, Model* m, const std::vector<std::string>& keys, size_t records = 0) {
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string v = i < records ? "record value " + std::to_string(i) : Key8(i * 13);
    ASSERT_TRUE(x->Insert(keys[i], v).ok()) << i;
    (*m)[keys[i]] = v;
  }
}

// n keys of home 0 cycling through the top bits in `tops`.
std::vector<std::string> Cycle(const std::vector<uint64_t>& tops, size_t n, size_t skip = 0) {
  std::vector<std::vector<std::string>> by;
  for (uint64_t t : tops) by.push_back(Top(0, t, (n + skip) / tops.size() + 2));
  std::vector<std::string> keys;
  for (size_t i = skip; keys.size() < n; ++i) keys.push_back(by[i % tops.size()][i / tops.size()]);
  return keys;
}

class DashCrashTest : public ::testing::TestWithParam<PersistMode> {};

TEST_P(DashCrashTest, SlotOperationsAreAllOrNothing) {
  const std::vector<std::string> keys = Top(0, 0, 8);
  ExpectEachAllOrNothing(Small(GetParam()),
                         [&](Index* x, Model* m) {
                           InsertDash(x, m, {keys.begin(), keys.begin() + 7}, 2);
                           ASSERT_TRUE(x->Insert("a record key", "v").ok());
                           (*m)["a record key"] = "v";
                         },
                         SlotEncodingOps({.absent_inline = keys[7],
                                          .absent_record = "another record key",
                                          .inline_key = keys[3],
                                          .inline_key2 = keys[4],
                                          .record_key = "a record key"}),
                         1, InsertsAfterRecovery);
}

TEST_P(DashCrashTest, DisplacementIsAllOrNothing) {
  // A key of home 1 in bucket 1, 27 keys of home 0 in buckets 0 and 1: the 28th moves
  // the home-1 key (a record) on to bucket 2 and takes its slot.
  const std::vector<std::string> keys = Cycle({0, 1, 2, 3}, 28);
  const OpCrashOutcome r = CrashDuringOp(
      Small(GetParam()),
      [&](Index* x, Model* m) {
        InsertDash(x, m, Top(1, 0, 1), 1);
        InsertDash(x, m, {keys.begin(), keys.begin() + 27}, 3);
        ASSERT_EQ(Counter(x, "displacements"), 0u);
      },
      [&](Index* x) {
        const Status s = x->Insert(keys[27], "8 bytes!");
        EXPECT_EQ(Counter(x, "displacements"), 1u);
        return s;
      },
      InsertsAfterRecovery);
  ExpectAllOrNothing(r, 4);
}

TEST_P(DashCrashTest, StashInsertAndDeleteAreAllOrNothing) {
  const std::vector<std::string> keys = Cycle({0, 1, 2, 3}, 34);
  for (const bool record : {false, true}) {
    SCOPED_TRACE(record ? "record" : "inline");
    // 28 keys fill buckets 0 and 1, then 5 in the stash (4 overflow fingerprints in
    // bucket 0, the fifth in bucket 1): the op puts the 6th into the stash.
    const OpCrashOutcome ins = CrashDuringOp(
        Small(GetParam()),
        [&](Index* x, Model* m) { InsertDash(x, m, {keys.begin(), keys.begin() + 33}, 4); },
        [&](Index* x) {
          const Status s = x->Insert(keys[33], record ? "a record value" : "8 bytes!");
          EXPECT_EQ(Counter(x, "stash_inserts"), 6u);
          return s;
        },
        InsertsAfterRecovery);
    ExpectAllOrNothing(ins, 3);
  }
  for (const size_t victim : {28u, 32u}) {  // recorded in bucket 0 / in bucket 1
    const OpCrashOutcome del = CrashDuringOp(
        Small(GetParam()),
        [&](Index* x, Model* m) { InsertDash(x, m, {keys.begin(), keys.begin() + 34}, 30); },
        [&](Index* x) { return x->Delete(keys[victim]); }, InsertsAfterRecovery);
    ExpectAllOrNothing(del, 2);
  }
}

TEST_P(DashCrashTest, SplitThatDoublesIsAllOrNothing) {
  // 42 keys of home 0 fill its buckets and the stash, half of them with the top bit set;
  // the 43rd splits the only segment and doubles the directory.
  const std::vector<std::string> keys = Cycle({0, 2, 1, 3}, 43);
  ExpectGrowthAllOrNothing(
      Small(GetParam()),
      [&](Index* x, Model* m) { InsertDash(x, m, {keys.begin(), keys.begin() + 42}, 5); },
      keys[42], "doublings", 6, InsertsAfterRecovery);
}

TEST_P(DashCrashTest, SplitOfARangeOfTwoEntriesIsAllOrNothing) {
  // Setup: the first split (G = 1), then the left segment's (G = 2), which leaves the
  // right segment at depth 1, a range of two entries; its home-0 window is then filled,
  // and the op splits it without a doubling. A crash between the two entries' stores
  // leaves a range recovery sets back.
  const std::vector<std::string> left = Cycle({0, 1}, 60), right = Cycle({2, 3}, 60);
  uint64_t repaired_images = 0;
  size_t r_used = 0;
  const OpCrashOutcome r = CrashDuringOp(
      Small(GetParam()),
      [&](Index* x, Model* m) {
        // 21 left and 21 right keys fill home 0's 42 places; a 22nd left key splits.
        std::vector<std::string> first;
        for (size_t i = 0; i < 21; ++i) {
          first.push_back(left[i]);
          first.push_back(right[i]);
        }
        InsertDash(x, m, first, 4);
        InsertDash(x, m, {left[21]});
        ASSERT_EQ(Counter(x, "splits"), 1u);
        // The left segment holds 22: 20 more fill it, the 21st splits it (doubling).
        InsertDash(x, m, {left.begin() + 22, left.begin() + 43});
        ASSERT_EQ(Counter(x, "splits"), 2u);
        ASSERT_EQ(Counter(x, "global_depth"), 2u);
        // The right segment holds 21: 21 more fill it.
        InsertDash(x, m, {right.begin() + 21, right.begin() + 42}, 3);
        ASSERT_EQ(Counter(x, "splits"), 2u) << "the setup split more than planned";
        r_used = 42;
      },
      [&](Index* x) {
        const uint64_t doublings = Counter(x, "doublings");
        const Status s = x->Insert(right[r_used], "8 bytes!");
        EXPECT_EQ(Counter(x, "splits"), 3u);
        EXPECT_EQ(Counter(x, "doublings"), doublings) << "no doubling was needed";
        return s;
      },
      [&](Index* x) {
        if (Counter(x, "recovery_repaired_entries") != 0) ++repaired_images;
        return InsertsAfterRecovery(x);
      });
  ExpectAllOrNothing(r, 4);
  EXPECT_GT(repaired_images, 0u) << "no image held a half-switched range";
}

INSTANTIATE_TEST_SUITE_P(Modes, DashCrashTest, testing::PersistModes(),
                         testing::PersistModeTestName);

}  // namespace
}  // namespace pmhash::engines
