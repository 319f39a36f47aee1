// Crashes inside single operations of `cceh` under the power-failure simulator
// (src/pm/crashsim.h): at every fence and after every store, crash images are recovered
// and must hold exactly the state before or after the operation, with the engine's
// invariants intact. Covers the slot encoding's seven operations, an insert into a slot
// a split left behind, a split that doubles the directory, and splits that do not: a
// range of two entries and one of sixteen (over two lines of the directory), whose
// half-switched states recovery sets back.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engines/cceh/cceh.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"
#include "util/hash.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

// 1 KiB segments (16 buckets; one window is 4 of them), one segment to start with.
Options SmallSegments(PersistMode mode) {
  Options o;
  o.engine = "cceh";
  o.pool_size = 4ull << 20;
  o.persist = mode;
  o.engine_options = {{"segment_bytes", "1024"}, {"segments", "1"}};
  return o;
}

void InsertAllCceh(Index* x, Model* m, const std::vector<std::string>& keys, size_t records) {
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string v = i < records ? "record value " + std::to_string(i) : Key8(i * 13);
    ASSERT_TRUE(x->Insert(keys[i], v).ok());
    (*m)[keys[i]] = v;
  }
}


class CcehCrashTest : public ::testing::TestWithParam<PersistMode> {};

TEST_P(CcehCrashTest, SlotOperationsAreAllOrNothing) {
  const std::vector<std::string> keys = KeysWithHashBits(15, 5, 0, 0, 8);
  // Seven keys in one window, the first two with record values.
  ExpectEachAllOrNothing(SmallSegments(GetParam()),
                         [&](Index* x, Model* m) {
                           InsertAllCceh(x, m, {keys.begin(), keys.begin() + 7}, 2);
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

TEST_P(CcehCrashTest, SplitThatDoublesIsAllOrNothing) {
  // 16 keys fill the only window, half of them with the top hash bit set (they move);
  // the 17th makes the segment split and, at global depth 0, the directory double.
  const std::vector<std::string> left = KeysWithHashBits(15, 3, 1, 0, 9), right = KeysWithHashBits(15, 3, 1, 1, 8);
  ExpectGrowthAllOrNothing(
      SmallSegments(GetParam()),
      [&](Index* x, Model* m) {
        std::vector<std::string> keys;
        for (size_t i = 0; i < 8; ++i) {
          keys.push_back(left[i]);
          keys.push_back(right[i]);
        }
        InsertAllCceh(x, m, keys, 3);
      },
      left[8], "doublings", 6, InsertsAfterRecovery);
}

TEST_P(CcehCrashTest, InsertIntoASlotASplitLeftBehindIsAllOrNothing) {
  // After the split above, the left segment's window holds 8 stale copies of the moved
  // keys (3 of them records): the next left key takes one (word0 freed first).
  const std::vector<std::string> left = KeysWithHashBits(15, 3, 1, 0, 10), right = KeysWithHashBits(15, 3, 1, 1, 8);
  for (const bool record : {false, true}) {
    SCOPED_TRACE(record ? "record" : "inline");
    const OpCrashOutcome r = CrashDuringOp(
        SmallSegments(GetParam()),
        [&](Index* x, Model* m) {
          std::vector<std::string> keys;
          for (size_t i = 0; i < 8; ++i) {
            keys.push_back(right[i]);
            keys.push_back(left[i]);
          }
          keys.push_back(left[8]);
          InsertAllCceh(x, m, keys, 6);
          ASSERT_EQ(Counter(x, "splits"), 1u);
        },
        [&](Index* x) { return x->Insert(left[9], record ? "a record value" : "8 bytes!"); },
        InsertsAfterRecovery);
    ExpectAllOrNothing(r, 1);
  }
}

// Crashes into the insert of `key` that splits a segment whose range is wider than one
// entry, without a doubling (setup leaves it so): every image all-or-nothing, and some
// image must hold a half-switched range, which recovery sets back.
void ExpectSplitWithoutDoublingAllOrNothing(PersistMode mode, const OpCrashSetup& setup,
                                            const std::string& key) {
  uint64_t repaired_images = 0;
  const OpCrashOutcome r = CrashDuringOp(
      SmallSegments(mode), setup,
      [&](Index* x) {
        const uint64_t splits = Counter(x, "splits"), doublings = Counter(x, "doublings");
        const Status s = x->Insert(key, "8 bytes!");
        EXPECT_EQ(Counter(x, "splits"), splits + 1);
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

TEST_P(CcehCrashTest, SplitOfARangeOfTwoEntriesIsAllOrNothing) {
  // Setup: a split of the only segment (G = 1), then a split of the left one (G = 2),
  // which leaves the right segment at depth 1: a range of two directory entries. Its
  // window (start bucket 9) is then filled; the op splits it, and a crash between the two
  // entries' stores leaves a range recovery must set back.
  const std::vector<std::string> l0 = KeysWithHashBits(15, 3, 1, 0, 17);
  const std::string l00 = KeysWithHashBits(15, 3, 2, 0, 1, 1000000)[0];
  const std::vector<std::string> r1 = KeysWithHashBits(15, 9, 1, 1, 17, 2000000);
  ExpectSplitWithoutDoublingAllOrNothing(
      GetParam(),
      [&](Index* x, Model* m) {
        InsertAllCceh(x, m, {l0.begin(), l0.begin() + 16}, 4);
        InsertAllCceh(x, m, KeysWithHashBits(15, 3, 1, 1, 1), 0);  // the first split
        InsertAllCceh(x, m, {l00}, 1);  // the left window is full again: the second split
        ASSERT_EQ(Counter(x, "global_depth"), 2u);
        InsertAllCceh(x, m, {r1.begin(), r1.begin() + 16}, 4);
        ASSERT_EQ(Counter(x, "segments"), 3u) << "the setup split more than planned";
      },
      r1[16]);
}

TEST_P(CcehCrashTest, SplitOfARangeOfSixteenEntriesIsAllOrNothing) {
  // Setup: 16 keys with top bits 00000 fill the window of start bucket 3; a 17th with top
  // bits 00001 splits the left segment five times (the directory doubles to 32 entries)
  // and leaves the segment of top bit 1 at depth 1: a range of 16 entries, two cache
  // lines of the directory. Its window (start bucket 9) is then filled; the op splits it,
  // storing 15 entries over both lines before the commit.
  const std::vector<std::string> deep = KeysWithHashBits(15, 3, 5, 0, 16), one = KeysWithHashBits(15, 3, 5, 1, 1);
  const std::vector<std::string> right = KeysWithHashBits(15, 9, 1, 1, 17, 3000000);
  ExpectSplitWithoutDoublingAllOrNothing(
      GetParam(),
      [&](Index* x, Model* m) {
        InsertAllCceh(x, m, deep, 4);
        InsertAllCceh(x, m, one, 0);
        ASSERT_EQ(Counter(x, "global_depth"), 5u);
        InsertAllCceh(x, m, {right.begin(), right.begin() + 16}, 3);
        ASSERT_EQ(Counter(x, "segments"), 6u) << "the setup split more than planned";
      },
      right[16]);
}

INSTANTIATE_TEST_SUITE_P(Modes, CcehCrashTest, testing::PersistModes(),
                         testing::PersistModeTestName);

}  // namespace
}  // namespace pmhash::engines
