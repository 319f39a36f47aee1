// Crashes inside single operations of `bht` under the power-failure simulator
// (src/pm/crashsim.h): at every fence and after every store, crash images are recovered
// (log replayed, buffers flipped) and must hold exactly the state before or after the
// operation, with the engine's invariants intact. Covers the slot encoding's operations
// through the log, a flip (and one that splits its segment), a flip forced by log
// pressure (log reclamation: the head advanced past the flipped buffer's records), a
// flip a search triggers with the read-miss counter, and under keys of one 64-bit hash a
// flip that keeps the keys it cannot place (logged anew) and a write through a flip.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engines/bht/bht.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"
#include "support/test_engines.h"
#include "util/hash.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

// One 1 KiB segment (16 buckets) whose buffer is one bucket of 13 slots.
Options OneBucketOptions(PersistMode mode, std::map<std::string, std::string> more = {}) {
  Options o;
  o.engine = "bht";
  o.pool_size = 4ull << 20;
  o.persist = mode;
  o.engine_options = {{"segment_bytes", "1024"}, {"segments", "1"}, {"buffer_size", "256"}};
  for (auto& [k, v] : more) o.engine_options[k] = v;
  return o;
}

void InsertRange(Index* x, Model* m, uint64_t from, uint64_t n, uint64_t records) {
  for (uint64_t i = from; i < from + n; ++i) {
    const std::string v = i - from < records ? "record value " + std::to_string(i) : Key8(i * 7);
    ASSERT_TRUE(x->Insert(Key8(i), v).ok());
    (*m)[Key8(i)] = v;
  }
}


// An insert of Key8(500) that finds its bucket full: the index's second flip.
OpCrashOp InsertThatFlipsAgain(const std::string& value) {
  return [value](Index* x) {
    const Status s = x->Insert(Key8(500), value);
    EXPECT_EQ(Counter(x, "flips"), 2u);
    return s;
  };
}

class BhtCrashTest : public ::testing::TestWithParam<PersistMode> {};

TEST_P(BhtCrashTest, WritesThroughTheLogAreAllOrNothing) {
  // Six keys flipped into the segment (the first two with records), then three buffered
  // (one of them a record): the ops below meet both.
  ExpectEachAllOrNothing(OneBucketOptions(GetParam()),
                         [](Index* x, Model* m) {
                           InsertRange(x, m, 0, 14, 2);  // the 14th flips the first 13
                           InsertRange(x, m, 100, 2, 1);
                           ASSERT_TRUE(x->Insert("a record key", "v").ok());
                           (*m)["a record key"] = "v";
                         },
                         SlotEncodingOps({.absent_inline = Key8(900),
                                          .absent_record = "another record key",
                                          .inline_key = Key8(3),
                                          .inline_key2 = Key8(101),
                                          .record_key = "a record key"}),
                         1, InsertsAfterRecovery);
}

TEST_P(BhtCrashTest, FlipIsAllOrNothing) {
  // 12 buffered keys and a tombstone fill the bucket; the op's insert flips them (with 13
  // flipped before) into a new segment: merge, out-of-place write, directory switch,
  // records freed, buffer cleared, log head advanced.
  for (const bool record : {false, true}) {
    SCOPED_TRACE(record ? "record" : "inline");
    const OpCrashOutcome r = CrashDuringOp(
        OneBucketOptions(GetParam()),
        [](Index* x, Model* m) {
          InsertRange(x, m, 0, 14, 3);
          InsertRange(x, m, 14, 11, 2);
          ASSERT_TRUE(x->Delete(Key8(1)).ok());  // a tombstone of a flipped record
          m->erase(Key8(1));
          ASSERT_EQ(Counter(x, "flips"), 1u);
        },
        InsertThatFlipsAgain(record ? "a record value" : "8 bytes!"), InsertsAfterRecovery);
    ExpectAllOrNothing(r, 4);
  }
}

TEST_P(BhtCrashTest, FlipThatOverridesARecordIsAllOrNothing) {
  // Key 0's value is a record in the segment; the buffer holds its update (another
  // record of the same size) and then a new key with a record of that size too. The
  // flip writes the new records before it frees key 0's old one: freed any earlier, the
  // second new record would take its block while the old segment, still the live one
  // until the switch, points to it.
  const OpCrashOutcome r = CrashDuringOp(
      OneBucketOptions(GetParam()),
      [](Index* x, Model* m) {
        InsertRange(x, m, 0, 14, 3);  // keys 0-2 with records "record value N", flipped
        ASSERT_TRUE(x->Update(Key8(0), "record value X").ok());
        (*m)[Key8(0)] = "record value X";
        ASSERT_TRUE(x->Insert(Key8(100), "record value Y").ok());
        (*m)[Key8(100)] = "record value Y";
        InsertRange(x, m, 200, 10, 0);  // the bucket is full after these
        ASSERT_EQ(Counter(x, "flips"), 1u);
      },
      InsertThatFlipsAgain("8 bytes!"), InsertsAfterRecovery);
  ExpectAllOrNothing(r, 4);
}

TEST_P(BhtCrashTest, FlipThatSplitsIsAllOrNothing) {
  // 16-slot segments (256 bytes): the second flip's 26 entries cannot fit one segment, so
  // the flip writes two (or more) and the directory doubles.
  const OpCrashOutcome r = CrashDuringOp(
      OneBucketOptions(GetParam(), {{"segment_bytes", "256"}}),
      [](Index* x, Model* m) {
        InsertRange(x, m, 0, 14, 2);
        InsertRange(x, m, 14, 12, 1);
        ASSERT_EQ(Counter(x, "splits"), 0u);
      },
      [](Index* x) {
        const Status s = x->Insert(Key8(26), "8 bytes!");
        EXPECT_GT(Counter(x, "splits"), 0u);
        return s;
      },
      InsertsAfterRecovery);
  ExpectAllOrNothing(r, 4);
}

TEST_P(BhtCrashTest, ForcedFlipThatReclaimsTheLogIsAllOrNothing) {
  // 8 buffers of 8 KiB in front of 1 KiB segments and the smallest log (2,048 slots):
  // writes to 7 of them fill it to three quarters (1,536 records) while the oldest buffer
  // holds the head; the op's write passes the mark, so that buffer is flipped by force
  // and the head advances.
  Options o;
  o.engine = "bht";
  o.pool_size = 4ull << 20;
  o.persist = GetParam();
  o.engine_options = {{"segment_bytes", "1024"}, {"segments", "8"}, {"log_size", "65536"}};
  const OpCrashOutcome r = CrashDuringOp(
      o,
      [](Index* x, Model* m) {
        ASSERT_TRUE(x->Put(Key8(1), Key8(1)).ok());  // the oldest record, in some buffer
        (*m)[Key8(1)] = Key8(1);
        const uint64_t seg1 = HashKey(Key8(1), kTestHashSeed) >> 61;
        // Overwrites of keys of the other segments: records pile up in the log only.
        for (uint64_t i = 2, n = 0; n < 1535; ++i) {
          if (HashKey(Key8(i % 64 + 2), kTestHashSeed) >> 61 == seg1) continue;
          ASSERT_TRUE(x->Put(Key8(i % 64 + 2), Key8(i)).ok());
          (*m)[Key8(i % 64 + 2)] = Key8(i);
          ++n;
        }
        ASSERT_EQ(Counter(x, "flips_log"), 0u);
      },
      [](Index* x) {
        const Status s = x->Put(Key8(7000), "8 bytes!");
        EXPECT_GE(Counter(x, "flips_log"), 1u);
        EXPECT_GE(Counter(x, "log_head_persists"), 1u);
        return s;
      },
      InsertsAfterRecovery, /*store_rate=*/0.25);
  ExpectAllOrNothing(r, 4);
}

TEST_P(BhtCrashTest, FlipBySearchMissesIsAllOrNothing) {
  // A buffered key and 13 flipped ones: 255 searches of flipped keys miss the buffer; the
  // op's search is the 256th, which wraps the counter and flips the buffer.
  const OpCrashOutcome r = CrashDuringOp(
      OneBucketOptions(GetParam()),
      [](Index* x, Model* m) {
        InsertRange(x, m, 0, 14, 2);
        std::string v;
        for (int i = 0; i < 255; ++i) ASSERT_TRUE(x->Get(Key8(i % 13), &v).ok());
      },
      [](Index* x) {
        std::string v;
        const Status s = x->Get(Key8(5), &v);
        EXPECT_EQ(Counter(x, "flips_read_misses"), 1u);
        return s;
      },
      InsertsAfterRecovery);
  ExpectAllOrNothing(r, 4);
}

// Keys of one 64-bit hash (the degenerate test hash) in the one-bucket buffer: keys
// 0-12 flipped into the window, 13-25 buffered.
Options OneHashOptions(PersistMode mode) {
  Options o = OneBucketOptions(mode);
  o.engine = "bht";
  o.engine += kDegenerateSuffix;
  return o;
}
// Of a hash value other than that of InsertsAfterRecovery's key, which must go in.
std::vector<std::string> KeysOfOneHash(size_t n) {
  return KeysOfDegenerateHash(n, DegenerateHash("after recovery") == kDegenerateHashes[1] ? 2 : 1);
}
void InsertKeysOfOneHash(Index* x, Model* m, size_t n) {
  const std::vector<std::string> keys = KeysOfOneHash(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string v = i % 3 ? Key8(i) : "record value " + std::to_string(i);
    ASSERT_TRUE(x->Insert(keys[i], v).ok()) << i;
    (*m)[keys[i]] = v;
  }
}

TEST_P(BhtCrashTest, FlipThatKeepsKeysItCannotPlaceIsAllOrNothing) {
  // The 27th key finds the bucket full: the flip places 3 of the 13 buffered keys in the
  // window's last slots and keeps 10, whose records it appends anew before the head
  // passes the old ones; then the key is buffered.
  const OpCrashOutcome r = CrashDuringOp(
      OneHashOptions(GetParam()), [](Index* x, Model* m) { InsertKeysOfOneHash(x, m, 26); },
      [](Index* x) {
        const Status s = x->Insert(KeysOfOneHash(27)[26], "8 bytes!");
        EXPECT_EQ(Counter(x, "flip_kept"), 10u);
        return s;
      },
      InsertsAfterRecovery);
  ExpectAllOrNothing(r, 4);
}

TEST_P(BhtCrashTest, WriteThroughAFlipIsAllOrNothing) {
  // 16 keys in the window and 13 kept in the full bucket: a delete of a key in the
  // segment finds no slot even after a flip, and goes in by a flip of its own (one kept
  // key moves into the freed slot).
  const std::vector<std::string> keys = KeysOfOneHash(29);
  for (const bool record : {false, true}) {
    SCOPED_TRACE(record ? "record" : "inline");
    const OpCrashOutcome r = CrashDuringOp(
        OneHashOptions(GetParam()), [](Index* x, Model* m) { InsertKeysOfOneHash(x, m, 29); },
        [&](Index* x) { return x->Delete(keys[record ? 0 : 1]); }, InsertsAfterRecovery);
    ExpectAllOrNothing(r, 4);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, BhtCrashTest, testing::PersistModes(),
                         testing::PersistModeTestName);

}  // namespace
}  // namespace pmhash::engines
