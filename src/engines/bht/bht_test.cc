#include "engines/bht/bht.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engines/cceh/cceh.h"
#include "support/engine_tests.h"
#include "support/harness.h"
#include "support/test_engines.h"
#include "util/hash.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

Options BhtOptions(std::map<std::string, std::string> engine_options = {}) {
  return testing::OptionsFor("bht", std::move(engine_options), 64ull << 20);
}

// One 1 KiB segment whose buffer is one bucket of 13 slots.
std::map<std::string, std::string> OneBucket() {
  return {{"segment_bytes", "1024"}, {"segments", "1"}, {"buffer_size", "256"}};
}

TEST(BhtTest, BadOptionsAreInvalidArgument) {
  std::unique_ptr<Index> index;
  Status s = Open(BhtOptions({{"buffer_size", "3000"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("buffer_size"), std::string::npos) << s.message();
  s = Open(BhtOptions({{"buffer_ratio", "1.5"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = Open(BhtOptions({{"log_size", "1000"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
}

TEST(BhtTest, ARecordLargerThanHalfTheLogIsRefusedNotLoopedOn) {
  auto index = OpenOrDie(BhtOptions({{"log_size", "65536"}}));
  const Status s = index->Put(Key8(1), std::string(40000, 'v'));
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("log"), std::string::npos) << s.message();
  EXPECT_EQ(index->Count(), 0u);
  ASSERT_TRUE(index->Put(Key8(1), std::string(30000, 'v')).ok()) << "under half: it fits";
  std::string v;
  ASSERT_TRUE(index->Get(Key8(1), &v).ok());
  EXPECT_EQ(v.size(), 30000u);
}

TEST(BhtTest, TheBufferAnswersForTheKeysItHolds) {
  auto index = OpenOrDie(BhtOptions(OneBucket()));
  ASSERT_TRUE(index->Put(Key8(2), Key8(20)).ok());
  ASSERT_TRUE(index->Put(Key8(2), Key8(21)).ok());  // overwritten in its buffer slot
  EXPECT_EQ(index->Count(), 1u) << "a blind put's effect on Count is learnt exactly";
  ASSERT_TRUE(index->Insert(Key8(1), Key8(10)).ok());
  ASSERT_TRUE(index->Delete(Key8(1)).ok());  // a tombstone over a buffered entry
  std::string got = "unchanged";
  EXPECT_TRUE(index->Get(Key8(1), &got).IsNotFound()) << "the tombstone answers";
  EXPECT_EQ(got, "unchanged");
  EXPECT_TRUE(index->Delete(Key8(1)).IsNotFound());
  EXPECT_TRUE(index->Update(Key8(1), "x").IsNotFound());
  ASSERT_TRUE(index->Insert(Key8(1), Key8(11)).ok()) << "an insert over a tombstone";
  EXPECT_TRUE(index->Insert(Key8(1), Key8(12)).IsAlreadyExists());
  EXPECT_EQ(Counter(index.get(), "extra_lookups"), 1u) << "only the first insert read it";
  ExpectMatches(index.get(), {{Key8(2), Key8(21)}, {Key8(1), Key8(11)}});
}

TEST(BhtTest, PutIsBlindAndTheOtherWritesReadTheSegmentOnlyWhenTheBufferCannotAnswer) {
  auto index = OpenOrDie(BhtOptions(OneBucket()));
  Model model;
  for (uint64_t i = 0; i < 12; ++i) {
    ASSERT_TRUE(index->Put(Key8(i), Key8(i)).ok());
    model[Key8(i)] = Key8(i);
  }
  EXPECT_EQ(Counter(index.get(), "extra_lookups"), 0u);
  // A put reads the directory entry and nothing of the segment.
  const PersistCounters before = index->Stats().persist;
  ASSERT_TRUE(index->Put(Key8(99), "v").ok());
  model[Key8(99)] = "v";
  EXPECT_EQ(index->Stats().persist.lines_read - before.lines_read, 1u) << "the directory entry";
  // Buffered keys: the buffer answers.
  EXPECT_TRUE(index->Insert(Key8(3), "x").IsAlreadyExists());
  ASSERT_TRUE(index->Update(Key8(4), "y").ok());
  model[Key8(4)] = "y";
  ASSERT_TRUE(index->Delete(Key8(5)).ok());
  model.erase(Key8(5));
  EXPECT_EQ(Counter(index.get(), "extra_lookups"), 0u);
  // Keys the buffer does not hold: the segment is read.
  EXPECT_TRUE(index->Update(Key8(500), "z").IsNotFound());
  EXPECT_TRUE(index->Delete(Key8(501)).IsNotFound());
  EXPECT_EQ(Counter(index.get(), "extra_lookups"), 2u);
  ExpectMatches(index.get(), model);
}

TEST(BhtTest, AFullBucketFlipsTheBufferIntoANewSegment) {
  auto index = OpenOrDie(BhtOptions(OneBucket()));
  Model model;
  for (uint64_t i = 0; i < 13; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    model[Key8(i)] = Key8(i);
  }
  EXPECT_EQ(Counter(index.get(), "flips"), 0u);
  const uint64_t pm = index->Stats().pm_bytes;
  // The 14th finds its (only) bucket full: the buffer and the segment are merged into a
  // new segment, written out of place; the old one is freed.
  ASSERT_TRUE(index->Insert(Key8(13), Key8(13)).ok());
  model[Key8(13)] = Key8(13);
  EXPECT_EQ(Counter(index.get(), "flips"), 1u);
  EXPECT_EQ(Counter(index.get(), "flips_full"), 1u);
  EXPECT_EQ(Counter(index.get(), "flip_entries"), 13u) << "the occupancy at the flip";
  EXPECT_EQ(Counter(index.get(), "replacements"), 1u);
  EXPECT_EQ(index->Stats().pm_bytes, pm) << "one segment freed, one made";
  ExpectMatches(index.get(), model);
  // Updates and deletes of flipped keys go to the buffer as entries and tombstones.
  ASSERT_TRUE(index->Update(Key8(2), "new2new2").ok());
  model[Key8(2)] = "new2new2";
  ASSERT_TRUE(index->Delete(Key8(3)).ok());
  model.erase(Key8(3));
  ExpectMatches(index.get(), model);
  for (uint64_t i = 14; i < 400; ++i) {  // many flips, some of them splitting
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    model[Key8(i)] = Key8(i);
  }
  EXPECT_GT(Counter(index.get(), "splits"), 0u);
  EXPECT_EQ(Counter(index.get(), "buffers"), Counter(index.get(), "segments"))
      << "both halves of a buffered segment are buffered";
  ExpectMatches(index.get(), model);
}

TEST(BhtTest, ReadMissesFlipTheBuffer) {
  auto index = OpenOrDie(BhtOptions(OneBucket()));
  for (uint64_t i = 0; i < 14; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
  ASSERT_EQ(Counter(index.get(), "flips"), 1u);  // Key8(13) is buffered, the rest flipped
  std::string v;
  // Each search of a flipped key searches the non-empty buffer and misses.
  for (int i = 0; i < 255; ++i) ASSERT_TRUE(index->Get(Key8(i % 13), &v).ok());
  EXPECT_EQ(Counter(index.get(), "flips_read_misses"), 0u);
  ASSERT_TRUE(index->Get(Key8(0), &v).ok());  // the 256th wraps the 1-byte counter
  EXPECT_EQ(Counter(index.get(), "flips_read_misses"), 1u);
  EXPECT_EQ(Counter(index.get(), "read_misses"), 256u);
  // An empty buffer is not searched: no more misses counted.
  ASSERT_TRUE(index->Get(Key8(1), &v).ok());
  EXPECT_EQ(Counter(index.get(), "read_misses"), 256u);
  ExpectMatches(index.get(), [] {
    Model m;
    for (uint64_t i = 0; i < 14; ++i) m[Key8(i)] = Key8(i);
    return m;
  }());
}

TEST(BhtTest, TheOldestBufferIsFlippedByForceSoTheLogIsReclaimed) {
  // 64 buffers of 8 KiB (416 slots each), a 64 KiB log (2,048 slots of 32 bytes): the log
  // fills long before a buffer does.
  auto index = OpenOrDie(BhtOptions({{"segments", "64"}, {"log_size", "65536"}}));
  Model model;
  for (uint64_t i = 0; i < 20000; ++i) {
    ASSERT_TRUE(index->Put(Key8(i), Key8(i)).ok());
    model[Key8(i)] = Key8(i);
  }
  EXPECT_GT(Counter(index.get(), "flips_log"), 0u);
  EXPECT_GT(Counter(index.get(), "log_head_persists"), 0u);
  EXPECT_GT(Counter(index.get(), "log_slots_written"), 2048u) << "the ring wrapped";
  ExpectMatches(index.get(), model);
}

TEST(BhtTest, BufferRatioGivesAShareOfTheSegmentsABufferAndKeepsIt) {
  for (const char* ratio : {"0", "0.5", "1"}) {
    SCOPED_TRACE(ratio);
    auto index = OpenOrDie(BhtOptions(
        {{"segment_bytes", "1024"}, {"segments", "8"}, {"buffer_ratio", ratio}}));
    EXPECT_EQ(Counter(index.get(), "buffers"), static_cast<uint64_t>(8 * std::stod(ratio)));
    Model model;
    for (uint64_t i = 0; i < 3000; ++i) {
      ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
      model[Key8(i)] = Key8(i);
    }
    const double share = static_cast<double>(Counter(index.get(), "buffers")) /
                         static_cast<double>(Counter(index.get(), "segments"));
    EXPECT_NEAR(share, std::stod(ratio), 0.15);
    if (std::string(ratio) == "0") {
      EXPECT_EQ(Counter(index.get(), "log_records"), 0u) << "without buffers, it is CCEH";
      EXPECT_EQ(Counter(index.get(), "flips"), 0u);
    }
    ExpectMatches(index.get(), model);
  }
}

TEST(BhtTest, RecoveryReplaysTheLogAndCleanCloseNeedsNone) {
  TempDir dir("bht");
  Options o = BhtOptions({{"segment_bytes", "1024"}, {"segments", "4"}});
  o.path = dir.File("bht.pool");
  Model model;
  {
    auto index = OpenOrDie(o);
    for (uint64_t i = 0; i < 2000; ++i) {
      const std::string k = i % 7 == 0 ? Bytes(i, 24, 'k') : Key8(i);
      const std::string v = i % 5 == 0 ? std::string(40, 'v') : Key8(i * 3);
      ASSERT_TRUE(index->Put(k, v).ok());
      model[k] = v;
    }
    for (uint64_t i = 0; i < 2000; i += 9) {
      const std::string k = i % 7 == 0 ? Bytes(i, 24, 'k') : Key8(i);
      ASSERT_TRUE(index->Delete(k).ok());
      model.erase(k);
    }
    dynamic_cast<Engine*>(index.get())->Abandon();
  }
  {
    // Recovery replays the log into the buffers of the crashed session; a crash right
    // after it replays the same log again.
    auto index = OpenOrDie(o);
    EXPECT_TRUE(index->Stats().recovered);
    EXPECT_GT(Counter(index.get(), "recovery_replayed"), 0u);
    ExpectMatches(index.get(), model);
    dynamic_cast<Engine*>(index.get())->Abandon();
  }
  {
    auto index = OpenOrDie(o);
    EXPECT_TRUE(index->Stats().recovered);
    EXPECT_GT(Counter(index.get(), "recovery_replayed"), 0u);
    ExpectMatches(index.get(), model);
    for (uint64_t i = 5000; i < 5100; ++i) {
      ASSERT_TRUE(index->Put(Key8(i), "after!!!").ok());
      model[Key8(i)] = "after!!!";
    }
    ASSERT_TRUE(index->Close().ok());
  }
  auto index = OpenOrDie(o);
  EXPECT_FALSE(index->Stats().recovered);
  EXPECT_EQ(Counter(index.get(), "recovery_replayed"), 0u) << "Close flipped every buffer";
  ExpectMatches(index.get(), model);
}

// Keys of one 64-bit hash, which no split separates: the segment's probe window holds 16,
// the buffer's bucket 13 more, which flips keep buffered (logged anew); a write that
// finds that bucket full goes into the segment by a flip of its own, and a new key that
// cannot is refused. Nothing acknowledged is lost, through a clean Close and a crash.
TEST(BhtTest, KeysOfOneHashAFlipCannotPlaceStayBufferedAndNothingIsLost) {
  TempDir dir("bht");
  Options o = BhtOptions(OneBucket());
  o.path = dir.File("one-hash.pool");
  std::string name = "bht";
  name += kDegenerateSuffix;
  const EngineSpec spec = FindSpec(name);
  const std::vector<std::string> keys = KeysOfDegenerateHash(40, 1);
  Model model;
  std::unique_ptr<Index> index;
  ASSERT_TRUE(OpenFile(spec, o.path, o, &index).ok());
  size_t refused = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string v = i % 2 ? Key8(i) : "a record value " + std::to_string(i);
    const Status s = index->Insert(keys[i], v);
    if (s.IsTableFull()) {
      ++refused;
      continue;
    }
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    model[keys[i]] = v;
  }
  // 16 in the window and 13 kept in the bucket; the other 11 refused.
  EXPECT_EQ(model.size(), 29u);
  EXPECT_EQ(refused, 11u);
  EXPECT_GT(Counter(index.get(), "flip_kept"), 0u);
  ExpectMatches(index.get(), model);
  // Updates and deletes of keys in the segment (each a flip of its own: the bucket is
  // full) and of kept ones (in their slots) are never refused.
  for (size_t i = 0; i < 29; i += 3) {
    ASSERT_TRUE(index->Update(keys[i], "updated!").ok()) << i;
    model[keys[i]] = "updated!";
    ASSERT_TRUE(index->Delete(keys[i + 1]).ok()) << i + 1;
    model.erase(keys[i + 1]);
  }
  ExpectMatches(index.get(), model);
  // Room again: new keys of the hash go in while it lasts.
  for (size_t i = 29; i < keys.size(); ++i) {
    const Status s = index->Insert(keys[i], Key8(i));
    if (s.IsTableFull()) continue;
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    model[keys[i]] = Key8(i);
  }
  EXPECT_GT(model.size(), 19u);
  ExpectMatches(index.get(), model);
  // A clean Close leaves the kept keys in the log; the reopen replays them.
  ASSERT_TRUE(index->Close().ok());
  index.reset();
  ASSERT_TRUE(OpenFile(spec, o.path, o, &index).ok());
  EXPECT_FALSE(index->Stats().recovered);
  EXPECT_GT(Counter(index.get(), "recovery_replayed"), 0u);
  ExpectMatches(index.get(), model);
  Abandon(&index);
  ASSERT_TRUE(OpenFile(spec, o.path, o, &index).ok());
  EXPECT_TRUE(index->Stats().recovered);
  ExpectMatches(index.get(), model);
}

TEST(BhtTest, ADamagedLogRecordBeforeValidOnesIsCorruption) {
  TempDir dir("bht");
  Options o = BhtOptions(OneBucket());
  o.path = dir.File("damaged.pool");
  {
    auto index = OpenOrDie(o);
    for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(index->Put(Key8(i), Key8(i)).ok());
    dynamic_cast<Engine*>(index.get())->Abandon();
  }
  BhtRoot r;
  ReadFromFile(o.path, pm::kRootOffset, &r, sizeof(r));
  // The third record's key byte: its check fails, and the five after it are valid.
  FlipByteInFile(o.path, r.log_offset + 2 * kBhtLogSlot + sizeof(BhtLogHeader), 1);
  std::unique_ptr<Index> index;
  const Status s = Open(o, &index);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("log record"), std::string::npos) << s.message();
}

TEST(BhtTest, FullBuffersWriteAtMostHalfTheMediaBytesOfCcehPerInsert) {
  // The paper's claim on this machine's media model, adr: 16 KiB segments, 8 KiB buffers,
  // every segment buffered; 200,000 random 8-byte inserts from 64 segments.
  auto media_per_insert = [](const std::string& engine) {
    Options o = testing::OptionsFor(engine, {{"segments", "64"}}, 256ull << 20);
    auto index = OpenOrDie(o);
    std::mt19937_64 rng(7);
    for (uint64_t i = 0; i < 200000; ++i) {
      EXPECT_TRUE(index->Put(Key8(rng()), Key8(i)).ok());
    }
    dynamic_cast<Engine*>(index.get())->persister().DrainMedia();
    return static_cast<double>(index->Stats().persist.media_writes) * 256 / 200000;
  };
  const double cceh = media_per_insert("cceh"), bht = media_per_insert("bht");
  EXPECT_LE(bht, cceh / 2) << "bht " << bht << " B, cceh " << cceh << " B per insert";
}

TEST(BhtTest, FourThreadsWithFlipsSplitsAndDoublings) {
  auto index = OpenOrDie(BhtOptions({{"segment_bytes", "1024"},
                                     {"segments", "1"},
                                     {"buffer_size", "512"},
                                     {"log_size", "131072"}}));
  ExpectThreadsAgreeWithTheirModels(index.get(), 4, 3000, /*put_every=*/2);
  EXPECT_GT(Counter(index.get(), "flips"), 100u);
  EXPECT_GT(Counter(index.get(), "doublings"), 3u);
}

TEST(BhtTest, ForEachSeesTheBufferOverTheSegment) {
  auto index = OpenOrDie(BhtOptions(OneBucket()));
  Model model;
  for (uint64_t i = 0; i < 40; ++i) {  // flipped several times
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    model[Key8(i)] = Key8(i);
  }
  // Buffered over flipped keys: an update and a tombstone.
  ASSERT_TRUE(index->Update(Key8(1), "updated!").ok());
  model[Key8(1)] = "updated!";
  ASSERT_TRUE(index->Delete(Key8(2)).ok());
  model.erase(Key8(2));
  ExpectMatches(index.get(), model);  // ForEach against the model, no key twice
}

// Scan reads a segment together with its buffer, the buffer winning: a buffered update
// is passed with its new value, a buffered tombstone hides the segment's copy, a key
// only in the buffer is passed; each key once, over pages that end inside segments.
TEST(BhtTest, ScanSeesTheBufferOverTheSegment) {
  auto index = OpenOrDie(BhtOptions(OneBucket()));
  Model model;
  for (uint64_t i = 0; i < 40; ++i) {  // flipped several times: most keys in segments
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    model[Key8(i)] = Key8(i);
  }
  ASSERT_GT(Counter(index.get(), "flips"), 0u);
  const uint64_t flips = Counter(index.get(), "flips");
  ASSERT_TRUE(index->Update(Key8(1), "updated!").ok());  // buffered over a flipped key
  model[Key8(1)] = "updated!";
  ASSERT_TRUE(index->Delete(Key8(2)).ok());  // a buffered tombstone over a flipped key
  model.erase(Key8(2));
  ASSERT_TRUE(index->Put(Key8(3), "put over").ok());
  model[Key8(3)] = "put over";
  ASSERT_EQ(Counter(index.get(), "flips"), flips) << "the three writes are still buffered";
  for (size_t max_keys : {size_t{1}, size_t{3}, size_t{1000}}) {
    SCOPED_TRACE("max_keys " + std::to_string(max_keys));
    std::map<std::string, int> passed;
    Model seen;
    uint64_t cursor = 0;
    int pages = 0;
    do {
      ASSERT_TRUE(index->Scan(cursor, max_keys, [&](std::string_view k, std::string_view v) {
        ++passed[std::string(k)];
        seen[std::string(k)] = std::string(v);
        return true;
      }, &cursor).ok());
      ASSERT_LT(++pages, 10'000) << "no progress";
    } while (cursor != 0);
    EXPECT_EQ(seen, model);
    for (const auto& [k, n] : passed) EXPECT_EQ(n, 1) << Printable(k) << " passed twice";
    if (max_keys == 1) {
      EXPECT_GT(pages, 10) << "pages end inside a segment";
    }
  }
}

}  // namespace
}  // namespace pmhash::engines
