#include "engines/spash/spash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/engine_tests.h"
#include "util/hash.h"
#include "util/htm.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

Options SpashOptions(std::map<std::string, std::string> engine_options = {},
                     uint64_t pool_size = 32ull << 20) {
  return testing::OptionsFor("spash", std::move(engine_options), pool_size);
}

Spash* AsSpash(Index* index) { return dynamic_cast<Spash*>(index); }

// Keys of main bucket b (hash bits 0-1) and directory prefix p at depth 3 (the first
// directory of a small index): KeysWithHashBits(3, b, 3, p, n).

TEST(SpashTest, InlineAndRecordEntriesRoundTrip) {
  auto index = OpenOrDie(SpashOptions());
  ASSERT_NE(index, nullptr);
  Model model;
  for (uint64_t i = 0; i < 500; ++i) {
    // 8/8 inline; long values and keys as records (chunked up to 128 bytes, and larger).
    std::string key = i % 3 == 0 ? Bytes(i, 20, 'k') : Key8(i);
    std::string value = i % 5 == 0 ? std::string(i % 2 ? 40 : 300, 'v') + Key8(i) : Key8(i * 3);
    ASSERT_TRUE(index->Insert(key, value).ok()) << i;
    model[key] = value;
  }
  ExpectMatches(index.get(), model);
  // Every kind of update, then deletes.
  int n = 0;
  for (auto& [key, value] : model) {
    const std::string v = n % 4 == 0 ? Key8(n) : n % 4 == 1 ? std::string(n % 200, 'u')
                        : n % 4 == 2 ? std::string(20, 'w') : std::string();
    ASSERT_TRUE(index->Update(key, v).ok());
    value = v;
    ++n;
  }
  ExpectMatches(index.get(), model);
  n = 0;
  for (auto it = model.begin(); it != model.end();) {
    if (n++ % 2 == 0) {
      ASSERT_TRUE(index->Delete(it->first).ok());
      it = model.erase(it);
    } else {
      ++it;
    }
  }
  ExpectMatches(index.get(), model);
}

void SplitsDoublesMergesAndHalvesWith(const char* filter) {
  Options o = SpashOptions({{"filter", filter}, {"hint", filter}});
  o.initial_capacity = 16;  // 8 segments at depth 3
  auto index = OpenOrDie(o);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(AsSpash(index.get())->global_depth(), 3u);
  Model model;
  for (uint64_t i = 0; i < 5000; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i + 1)).ok());
    model[Key8(i)] = Key8(i + 1);
  }
  ExpectMatches(index.get(), model);
  EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());  // filter bytes, hints
  EXPECT_GT(Counter(index.get(), "splits"), 300u);
  EXPECT_GT(Counter(index.get(), "doublings"), 3u);
  const IndexStats st = index->Stats();
  // Extendible hashing with 16-slot segments sits near ln 2 (~0.69) on average.
  EXPECT_GT(st.load_factor, 0.55);
  EXPECT_LT(st.load_factor, 0.85);
  for (uint64_t i = 0; i < 5000; ++i) {
    ASSERT_TRUE(index->Delete(Key8(i)).ok());
    model.erase(Key8(i));
    if (i % 997 == 0) ExpectMatches(index.get(), model);
  }
  ExpectMatches(index.get(), model);
  EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());
  EXPECT_GT(Counter(index.get(), "merges"), 300u);
  EXPECT_GT(Counter(index.get(), "halvings"), 3u);
  EXPECT_EQ(AsSpash(index.get())->global_depth(), 3u);
  EXPECT_EQ(AsSpash(index.get())->segments(), 8u);
}

TEST(SpashTest, SplitsDoublesMergesAndHalves) {
  for (const char* filter : {"off", "on"}) {
    SCOPED_TRACE(std::string("filter and hint=") + filter);
    SplitsDoublesMergesAndHalvesWith(filter);
  }
}

TEST(SpashTest, OverflowEntriesCarryHintsAndNegativeSearchesStopAtTheMainBucket) {
  Options o = SpashOptions({{"resize", "off"}});
  o.initial_capacity = 16;
  auto index = OpenOrDie(o);
  // Seven keys of main bucket 1 in the segment of prefix 5: four fill the bucket, three
  // overflow into buckets 2, 3 (and 0), each with a hint in bucket 1.
  const std::vector<std::string> keys = KeysWithHashBits(3, 1, 3, 5, 7);
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_TRUE(index->Insert(keys[i], Key8(i)).ok());
  EXPECT_EQ(Counter(index.get(), "overflow_inserts"), 3u);
  const auto lines = [&](const std::string& key, Status* s) {
    const uint64_t before = index->Stats().persist.lines_read;
    std::string v;
    *s = index->Get(key, &v);
    return index->Stats().persist.lines_read - before;
  };
  Status s;
  EXPECT_EQ(lines(keys[0], &s), 1u);  // in its main bucket
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(lines(keys[6], &s), 2u);  // the main bucket, then the hinted one (same XPLine)
  EXPECT_TRUE(s.ok());
  // An absent key of main bucket 2 (no hint there): the main bucket alone.
  EXPECT_EQ(lines(KeysWithHashBits(3, 2, 3, 5, 1, 1'000'000)[0], &s), 1u);
  EXPECT_TRUE(s.IsNotFound());
  // Deleting the overflow entries clears their hints (CheckInvariants: hints are exact).
  for (size_t i = 4; i < keys.size(); ++i) ASSERT_TRUE(index->Delete(keys[i]).ok());
  EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());
  EXPECT_EQ(lines(KeysWithHashBits(3, 1, 3, 5, 1, 1'000'000)[0], &s), 1u);
  EXPECT_TRUE(s.IsNotFound());
}

TEST(SpashTest, FullSegmentIsRefusedWithResizeOff) {
  Options o = SpashOptions({{"resize", "off"}});
  o.initial_capacity = 16;
  auto index = OpenOrDie(o);
  const std::vector<std::string> keys = KeysWithHashBits(3, 0, 3, 2, 17);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(index->Insert(keys[i], "v").ok()) << i;
  const Status s = index->Insert(keys[16], "v");
  EXPECT_TRUE(s.IsTableFull()) << s.ToString();
  EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());
}

void ReopensCleanlyAndAfterACrashWith(const char* filter) {
  TempDir dir("spash");
  Options o = SpashOptions({{"filter", filter}, {"hint", filter}});
  o.path = dir.File("pool");
  o.create_if_missing = true;
  o.initial_capacity = 16;
  Model model;
  {
    auto index = OpenOrDie(o);
    for (uint64_t i = 0; i < 3000; ++i) {
      const std::string v = i % 4 == 0 ? std::string(30 + i % 150, 'r') : Key8(i);
      ASSERT_TRUE(index->Insert(Key8(i), v).ok());
      model[Key8(i)] = v;
    }
    ASSERT_TRUE(index->Close().ok());
  }
  {
    auto index = OpenOrDie(o);
    EXPECT_FALSE(index->Stats().recovered);
    ExpectMatches(index.get(), model);
    for (uint64_t i = 0; i < 3000; i += 3) {
      ASSERT_TRUE(index->Delete(Key8(i)).ok());
      model.erase(Key8(i));
    }
    for (uint64_t i = 5000; i < 5500; ++i) {
      ASSERT_TRUE(index->Insert(Key8(i), std::string(40, 'n')).ok());
      model[Key8(i)] = std::string(40, 'n');
    }
    dynamic_cast<Engine*>(index.get())->Abandon();  // a crash: no clean shutdown
  }
  {
    auto index = OpenOrDie(o);
    EXPECT_TRUE(index->Stats().recovered);
    ExpectMatches(index.get(), model);
    // The free room recovery found in partly used chunks is used again.
    for (uint64_t i = 9000; i < 9300; ++i) {
      ASSERT_TRUE(index->Insert(Key8(i), std::string(40, 'm')).ok());
      model[Key8(i)] = std::string(40, 'm');
    }
    ExpectMatches(index.get(), model);
    EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());
    ASSERT_TRUE(index->Close().ok());
  }
}

TEST(SpashTest, ReopensCleanlyAndAfterACrash) {
  // With the filter, an open leaves every byte unknown and writes rebuild them; the
  // segment hints are rebuilt with the directory.
  for (const char* filter : {"off", "on"}) {
    SCOPED_TRACE(std::string("filter and hint=") + filter);
    ReopensCleanlyAndAfterACrashWith(filter);
  }
}

// A clean pool's depth records tile the hash space. Two forged ones (validly sealed, so
// only the tiling can tell): a segment given another's depth and prefix (an overlap and a
// gap of one size), and a segment given half its range (a gap). Each reopen is
// Corruption, never a directory with prefixes that name no segment.
TEST(SpashTest, ReopenRefusesDepthRecordsThatDoNotTileTheHashSpace) {
  for (const bool overlap : {true, false}) {
    TempDir dir("spash");
    Options o = SpashOptions();
    o.path = dir.File("pool");
    o.create_if_missing = true;
    o.initial_capacity = 16;
    {
      auto index = OpenOrDie(o);
      for (uint64_t i = 0; i < 3000; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
      auto* spash = AsSpash(index.get());
      const char* base = static_cast<const char*>(spash->pool().base());
      const auto payload_of = [&](const uint64_t* record) {
        uint64_t payload = 0;
        EXPECT_TRUE(UnsealWord(*record, reinterpret_cast<const char*>(record) - base, &payload));
        return payload;
      };
      constexpr int kDepthShift = 41;  // spash.cc's record: live bit 47, depth, prefix
      uint64_t* a = spash->TEST_DepthRecordOf(HashKey(Key8(0), kTestHashSeed));
      const uint64_t pa = payload_of(a);
      uint64_t forged = 0;
      if (overlap) {
        for (uint64_t i = 1; i < 3000 && forged == 0; ++i) {
          const uint64_t pb = payload_of(spash->TEST_DepthRecordOf(HashKey(Key8(i), kTestHashSeed)));
          if (pb != pa && pb >> kDepthShift == pa >> kDepthShift) forged = pb;
        }
      } else {
        const uint64_t prefix = pa & ((uint64_t{1} << kDepthShift) - 1);
        forged = ((pa >> kDepthShift) + 1) << kDepthShift | prefix * 2;
      }
      ASSERT_NE(forged, 0u);
      *a = SealWord(forged, reinterpret_cast<const char*>(a) - base);
      ASSERT_TRUE(index->Close().ok());
    }
    std::unique_ptr<Index> index;
    const Status s = Open(o, &index);
    EXPECT_TRUE(s.IsCorruption()) << overlap << ": " << s.ToString();
  }
}

TEST(SpashTest, EightByteKeysComeBackFromTheirHashes) {
  auto index = OpenOrDie(SpashOptions());
  std::mt19937_64 rng(3);
  Model model;
  for (int i = 0; i < 2000; ++i) {
    const std::string key = Key8(rng());
    model[key] = Key8(i);
    ASSERT_TRUE(index->Put(key, Key8(i)).ok());
  }
  ExpectMatches(index.get(), model);  // ForEach returns each key, rebuilt from its hash
}

// A small index (8 segments at depth 3) whose directory has doubled once (prefix 0's
// segment split), so that splits of the other segments change no directory table.
std::unique_ptr<Index> DoubledOnce() {
  Options o = SpashOptions({}, 64ull << 20);
  o.initial_capacity = 16;
  o.count_stats = false;  // uncounted: searches take the first try
  auto index = OpenOrDie(o);
  for (const std::string& k : KeysWithHashBits(0, 0, 3, 0, 20, 2'000'000)) {
    EXPECT_TRUE(index->Insert(k, k).ok());
  }
  EXPECT_EQ(AsSpash(index.get())->global_depth(), 4u);
  return index;
}

// Runs, on a thread of its own, inserts that split the segment of prefix 5 (depth 3) and
// then that of prefix 2, whose new first half is the segment the first split freed.
void SplitPrefix5ThenReuseIt(Index* index) {
  std::thread writer([index] {
    for (const uint64_t prefix : {5u, 2u}) {
      const uint64_t before = Counter(index, "splits");
      for (const std::string& k : KeysWithHashBits(0, 0, 3, prefix, 40, 3'000'000)) {
        if (Counter(index, "splits") > before) break;
        ASSERT_TRUE(index->Insert(k, k).ok());
      }
    }
  });
  writer.join();
}

TEST(SpashTest, FirstTryReadsTheEntryAgainBeforeItAnswersNotFound) {
  // A search reads the directory entry of its key's segment S; before it reads S, S
  // splits (both halves are new segments, S goes back to the free list) and another
  // split takes S for one of its halves, filled with other keys. The first try must not
  // answer NotFound from the reused S: the entry it read is no longer current.
  auto index = DoubledOnce();
  const std::string key = KeysWithHashBits(0, 0, 3, 5, 1)[0];
  ASSERT_TRUE(index->Insert(key, Key8(1)).ok());  // 8-byte key and value: inline
  bool fired = false;
  AsSpash(index.get())->TEST_SetReadHook([&](uint64_t) {
    if (fired) return;
    fired = true;
    SplitPrefix5ThenReuseIt(index.get());
  });
  std::string v;
  EXPECT_TRUE(index->Get(key, &v).ok());
  EXPECT_EQ(v, Key8(1));
  EXPECT_TRUE(fired);
  EXPECT_EQ(AsSpash(index.get())->global_depth(), 4u);
}

TEST(SpashTest, FirstTryDeleteLocksTheSegmentAsItReadIt) {
  // A delete's first try finds key K in slot 0 of its main bucket; before it locks the
  // segment, another thread deletes K and inserts K2 (same segment, same main bucket),
  // which takes slot 0. The first try must not clear slot 0: the segment changed since
  // it was read (the range's version moved), so the delete answers NotFound and K2 stays.
  auto index = DoubledOnce();  // uncounted or counted alike: the first try notes its read
  const std::vector<std::string> keys = KeysWithHashBits(3, 0, 3, 5, 2);  // prefix 5, bucket 0
  ASSERT_TRUE(index->Insert(keys[0], Key8(1)).ok());  // the segment's first entry: slot 0
  const uint64_t count = index->Count();
  bool fired = false;
  AsSpash(index.get())->TEST_SetReadHook([&](uint64_t) {
    if (fired) return;
    fired = true;
    std::thread writer([&] {
      ASSERT_TRUE(index->Delete(keys[0]).ok());
      ASSERT_TRUE(index->Insert(keys[1], Key8(2)).ok());
    });
    writer.join();
  });
  EXPECT_TRUE(index->Delete(keys[0]).IsNotFound());
  AsSpash(index.get())->TEST_SetReadHook(nullptr);
  EXPECT_TRUE(fired);
  std::string v;
  ASSERT_TRUE(index->Get(keys[1], &v).ok());
  EXPECT_EQ(v, Key8(2));
  EXPECT_EQ(index->Count(), count);
  EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());
}

TEST(SpashTest, FilterAnswersMostMissesWithoutReadingPm) {
  // Counted (the general search): a miss the filter answers reads no PM line; without
  // the filter every miss reads its main bucket at least. The same for updates of absent
  // keys. A delete's first try reads its main bucket before it would ask the byte (a
  // present key's delete does not wait for it): with the filter, an absent key's delete
  // reads that line and, unless the byte lets it through, no other.
  uint64_t lines_without[3] = {};
  for (const char* filter : {"off", "on"}) {
    Options o = SpashOptions({{"filter", filter}});
    o.initial_capacity = 16;
    o.count_stats = true;
    auto index = OpenOrDie(o);
    for (uint64_t i = 0; i < 4000; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    std::string v;
    const std::function<Status(const std::string&)> misses[3] = {
        [&](const std::string& k) { return index->Get(k, &v); },
        [&](const std::string& k) { return index->Delete(k); },
        [&](const std::string& k) { return index->Update(k, "u"); }};
    for (int op = 0; op < 3; ++op) {
      SCOPED_TRACE(op);
      const uint64_t before = index->Stats().persist.lines_read;
      for (uint64_t i = 1'000'000; i < 1'002'000; ++i) {
        ASSERT_TRUE(misses[op](Key8(i)).IsNotFound());
      }
      const uint64_t lines = index->Stats().persist.lines_read - before;
      if (std::string(filter) == "off") {
        EXPECT_GE(lines, 2000u);
        lines_without[op] = lines;
      } else if (op == 1) {
        EXPECT_GE(lines, 2000u);
        EXPECT_LT(lines, lines_without[op]);
      } else {
        EXPECT_LT(lines * 2, lines_without[op]);
      }
    }
    if (std::string(filter) == "on") {
      // 4,000 keys in 1,024 entries (depth 10): about 4 keys a byte let 40% of misses
      // through (the stat's model, (bits set / 8)^2 a byte).
      EXPECT_EQ(AsSpash(index.get())->global_depth(), 10u);
      EXPECT_LT(Counter(index.get(), "filter_pass_permille"), 500u);
    }
    EXPECT_EQ(index->Count(), 4000u);
    for (uint64_t i = 0; i < 4000; ++i) {
      ASSERT_TRUE(index->Get(Key8(i), &v).ok()) << i;
      ASSERT_TRUE(index->Update(Key8(i), Key8(i + 1)).ok()) << i;
    }
    for (uint64_t i = 0; i < 4000; ++i) ASSERT_TRUE(index->Delete(Key8(i)).ok()) << i;
  }
}

TEST(SpashTest, FilterOfTheOldTableNeverMissesAKeyWrittenToTheNext) {
  // A search resolves its key to the current table; before it reads the filter byte
  // there (the read hook's first call), a writer doubles the directory (each stage copied to the next table) and
  // inserts the key, into the next table. The old table's byte must not answer
  // NotFound: the stage that copied it made it unknown.
  Options o = SpashOptions({{"filter", "on"}}, 64ull << 20);
  o.initial_capacity = 16;
  o.count_stats = false;  // the first try, where the hook is
  auto index = OpenOrDie(o);
  for (const std::string& k : KeysWithHashBits(0, 0, 3, 0, 20, 2'000'000)) {
    ASSERT_TRUE(index->Insert(k, k).ok());
  }
  const unsigned depth = AsSpash(index.get())->global_depth();
  const std::string key = KeysWithHashBits(0, 0, 3, 5, 1)[0];  // prefix 5: its bytes are 0
  bool fired = false;
  AsSpash(index.get())->TEST_SetReadHook([&](uint64_t) {
    if (fired) return;
    fired = true;
    std::thread writer([&] {
      for (const std::string& k : KeysWithHashBits(0, 0, 3, 0, 400, 3'000'000)) {
        if (AsSpash(index.get())->global_depth() > depth) break;
        ASSERT_TRUE(index->Insert(k, k).ok());
      }
      ASSERT_TRUE(index->Insert(key, Key8(1)).ok());
    });
    writer.join();
  });
  std::string v;
  EXPECT_TRUE(index->Get(key, &v).ok());
  EXPECT_EQ(v, Key8(1));
  EXPECT_TRUE(fired);
  EXPECT_GT(AsSpash(index.get())->global_depth(), depth);
}

TEST(SpashTest, ScanSnapshotReadsTheEntryAgain) {
  // ForEach reads the directory entry of prefix 5's segment S; before it copies S, S
  // splits and is reused for prefix 2's keys. The snapshot must be taken again: each key
  // present throughout passed once, and no key that was never stored (a reused slot's
  // key word read under S's old prefix names another key).
  auto index = DoubledOnce();
  const std::vector<std::string> stable = KeysWithHashBits(0, 0, 3, 5, 6);
  for (const std::string& k : stable) ASSERT_TRUE(index->Insert(k, k).ok());
  bool fired = false;
  AsSpash(index.get())->TEST_SetReadHook([&](uint64_t pos) {
    if (fired || pos >> 61 != 5) return;
    fired = true;
    SplitPrefix5ThenReuseIt(index.get());
  });
  std::map<std::string, int> passed;
  ASSERT_TRUE(index->ForEach([&](std::string_view k, std::string_view) {
    ++passed[std::string(k)];
    return true;
  }).ok());
  AsSpash(index.get())->TEST_SetReadHook(nullptr);
  EXPECT_TRUE(fired);
  for (const std::string& k : stable) EXPECT_EQ(passed[k], 1) << "a stable key";
  std::set<std::string> now;
  ASSERT_TRUE(index->ForEach([&](std::string_view k, std::string_view) {
    now.insert(std::string(k));
    return true;
  }).ok());
  for (const auto& [k, n] : passed) {
    EXPECT_TRUE(now.count(k) == 1) << "a key never stored was passed";
    EXPECT_EQ(n, 1);
  }
}

TEST(SpashTest, ThreadsSplitAndReadWhileTheDirectoryDoubles) {
  // Writers split segments and double the directory while readers look up keys that
  // are present throughout (every read must find its key with its value) and keys that
  // are never written (every read must miss). Uncounted, searches take DoGet's first try;
  // counted, the general path.
  // With the filter (uncounted: the first try, which answers most misses from it),
  // misses answered from the bytes that stage copies carry over; with the segment hints,
  // prefetches through the hints that stage copies and releases keep.
  for (const char* filter : {"off", "on"}) {
    for (const bool counted : {false, true}) {
      if (counted && std::string(filter) == "on") continue;
      Options o = SpashOptions({{"filter", filter}, {"hint", filter}}, 64ull << 20);
      o.initial_capacity = 16;
      o.count_stats = counted;
      auto index = OpenOrDie(o);
      EXPECT_EQ(ReadWhileWritersSplit(index.get(), 2000, 20000), 0u) << counted << filter;
      EXPECT_GT(Counter(index.get(), "doublings"), 5u);
      EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());
    }
  }
}

// group_commit: a batch of deletes and puts of keys of different segments is fenced once;
// two ops of one segment are fenced apart (the second meets the range the batch holds),
// and a key written twice in the batch ends with the later write.
TEST(SpashTest, PipelinePrefetchesTheRecordsOfItsKeys) {
  // Step 4 of the paper's pipeline (Fig. 5a): MultiGet's keys of 16 bytes live in records,
  // whose lines are asked for before their search runs. A read of a line prefetched
  // earlier is "hidden" once the emulated latency (1 ns) has passed since the request,
  // which the calls between make certain; a line never prefetched waits. Without step 4
  // (prefetch_records=off, or a depth of 3, which leaves no call for it after step 2's)
  // only the buckets are hidden.
  const auto hidden_reads = [](const char* prefetch_records, const char* depth) {
    Options o = SpashOptions({{"prefetch_records", prefetch_records}, {"multiget_depth", depth}},
                             64ull << 20);
    o.read_latency_ns = 1;
    auto index = OpenOrDie(o);
    std::vector<std::string> keys(2048), values(64);
    for (int i = 0; i < 2048; ++i) {
      // Searched in another order than inserted: records inserted one after another share
      // a chunk (one media line), whose prefetch note the first read of it takes.
      std::string& key = keys[i * 37 % 2048];
      key = "record key " + std::to_string(100000 + i);
      EXPECT_TRUE(index->Insert(key, "value " + key).ok());
    }
    const uint64_t before = index->Stats().persist.emulated_reads_hidden;
    std::vector<Status> statuses(64);
    for (size_t i = 0; i < keys.size(); i += 64) {
      const std::vector<std::string_view> batch(keys.begin() + i, keys.begin() + i + 64);
      index->MultiGet(batch, values, statuses);
      for (size_t j = 0; j < 64; ++j) {
        EXPECT_TRUE(statuses[j].ok()) << keys[i + j];
        EXPECT_EQ(values[j], "value " + keys[i + j]);
      }
    }
    return index->Stats().persist.emulated_reads_hidden - before;
  };
  const uint64_t with_records = hidden_reads("on", "8");
  const uint64_t buckets_only = hidden_reads("off", "8");
  // Equal but for timing: each read's hiding is decided by the TSC, and a clean-clone CI
  // run once counted 2,047 against 2,048 (2026-12-01); step 4 would add about 2,000.
  const uint64_t depth3_on = hidden_reads("on", "3"), depth3_off = hidden_reads("off", "3");
  EXPECT_LE(std::max(depth3_on, depth3_off) - std::min(depth3_on, depth3_off), 8u)
      << "on " << depth3_on << ", off " << depth3_off;
  // Depth 8 asks for every key's bucket and record, the batch's last keys' through the
  // kit's advance calls (PrefetchAdvance): 2,048 of each but where two records share a
  // media line. When written: 3,840 and 1,995; without the advance 3,662 and 1,932.
  EXPECT_GE(with_records, buckets_only + 1200) << "buckets only: " << buckets_only;
  EXPECT_GE(with_records, 3750u) << "the batch's last keys lost their stages";
  EXPECT_GE(buckets_only, 1980u) << "the batch's last keys lost their buckets";
}

TEST(SpashTest, GroupCommitFencesABatchOnce) {
  for (const char* group : {"off", "on"}) {
    // 256 segments, no merge (a delete that may merge flushes the group first).
    Options o = SpashOptions({{"group_commit", group}, {"merge_fill", "0"}});
    o.initial_capacity = 4096;
    auto index = OpenOrDie(o);
    std::vector<std::string> keys;
    for (uint64_t p = 0; p < 16; ++p) keys.push_back(KeysWithHashBits(0, 0, 8, p * 16, 1)[0]);
    for (const std::string& k : keys) ASSERT_TRUE(index->Insert(k, Key8(1)).ok());
    const std::string v2 = Key8(2), v3 = Key8(3), v4 = Key8(4);  // the ops' views outlive them
    std::vector<WriteOp> ops;
    for (size_t i = 0; i < keys.size(); ++i) {
      ops.push_back({i % 2 ? WriteOp::Kind::kDelete : WriteOp::Kind::kPut, keys[i], v2});
    }
    std::vector<Status> statuses(ops.size());
    const uint64_t before = index->Stats().persist.fences;
    index->Write(ops, statuses);
    const uint64_t fences = index->Stats().persist.fences - before;
    for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(fences, std::string(group) == "on" ? 1u : 16u) << group;
    // Put, delete, put of one key: the second and third each wait for a fence first.
    const std::vector<WriteOp> same = {{WriteOp::Kind::kPut, keys[1], v3},
                                       {WriteOp::Kind::kDelete, keys[1], {}},
                                       {WriteOp::Kind::kPut, keys[1], v4},
                                       {WriteOp::Kind::kDelete, keys[2], {}}};
    statuses.assign(same.size(), Status::OK());
    const uint64_t again = index->Stats().persist.fences;
    index->Write(same, statuses);
    for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(index->Stats().persist.fences - again, std::string(group) == "on" ? 3u : 4u);
    std::string v;
    ASSERT_TRUE(index->Get(keys[1], &v).ok());
    EXPECT_EQ(v, v4);
    EXPECT_TRUE(index->Get(keys[2], &v).IsNotFound());
    EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());
  }
}

TEST(SpashTest, GroupCommitIsRefusedWithTransactions) {
  std::unique_ptr<Index> index;
  const Status s =
      Open(SpashOptions({{"group_commit", "on"}, {"htm_emulated", "on"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.ToString().find("group_commit"), std::string::npos) << s.ToString();
}

// Two threads write batches with group_commit (inserts that split segments and double the
// directory, puts, deletes that merge and halve) while a reader looks up keys present
// throughout: no thread waits for ever on a range another's batch holds (a batch flushes
// before it would wait), and every key ends as its thread's model says.
TEST(SpashTest, GroupedBatchesOfTwoThreadsRaceSplitsMergesAndReaders) {
  Options o = SpashOptions({{"group_commit", "on"}}, 64ull << 20);
  o.initial_capacity = 16;
  auto index = OpenOrDie(o);
  std::vector<std::string> stable;
  for (uint64_t i = 0; i < 200; ++i) {
    stable.push_back(Key8(900000000 + i));
    ASSERT_TRUE(index->Insert(stable.back(), Key8(i)).ok());
  }
  std::atomic<bool> writing{true};
  std::atomic<uint64_t> bad{0};
  std::thread reader([&] {
    std::string v;
    for (uint64_t n = 0; writing.load(std::memory_order_relaxed); ++n) {
      const uint64_t i = n % stable.size();
      if (!index->Get(stable[i], &v).ok() || v != Key8(i)) bad.fetch_add(1);
    }
  });
  std::vector<Model> models(2);
  std::vector<std::thread> writers;
  for (uint64_t t = 0; t < 2; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      Model& m = models[t];
      const auto run = [&](std::vector<WriteOp>& ops) {
        std::vector<Status> statuses(ops.size());
        index->Write(ops, statuses);
        for (size_t j = 0; j < ops.size(); ++j) {
          const std::string key(ops[j].key);
          if (ops[j].kind == WriteOp::Kind::kPut) {
            if (!statuses[j].ok()) bad.fetch_add(1);
            m[key] = key;
          } else {
            if (m.count(key) != 0 ? !statuses[j].ok() : !statuses[j].IsNotFound()) bad.fetch_add(1);
            m.erase(key);
          }
        }
      };
      std::vector<std::string> keys(16);
      for (int round = 0; round < 2; ++round) {
        // Grow (puts and some deletes of 6,000 keys): splits and doublings.
        for (int batch = 0; batch < 450; ++batch) {
          std::vector<WriteOp> ops(16);
          for (size_t j = 0; j < ops.size(); ++j) {
            keys[j] = Key8(t * 100000 + rng() % 6000);
            ops[j] = {rng() % 8 < 6 ? WriteOp::Kind::kPut : WriteOp::Kind::kDelete, keys[j],
                      keys[j]};
          }
          run(ops);
        }
        // Shrink (every key deleted, a put now and then): merges and halvings.
        std::vector<std::string> present;
        for (const auto& [k, v] : m) present.push_back(k);
        for (size_t i = 0; i < present.size(); i += 15) {
          std::vector<WriteOp> ops;
          for (size_t j = i; j < std::min(present.size(), i + 15); ++j) {
            ops.push_back({WriteOp::Kind::kDelete, present[j], {}});
          }
          keys[0] = Key8(t * 100000 + rng() % 6000);
          ops.push_back({WriteOp::Kind::kPut, keys[0], keys[0]});
          run(ops);
        }
      }
    });
  }
  for (std::thread& w : writers) w.join();
  writing = false;
  reader.join();
  EXPECT_EQ(bad.load(), 0u);
  Model all;
  for (const Model& m : models) all.insert(m.begin(), m.end());
  for (uint64_t i = 0; i < stable.size(); ++i) all[stable[i]] = Key8(i);
  ExpectMatches(index.get(), all);
  EXPECT_GT(Counter(index.get(), "doublings"), 3u);
  EXPECT_GT(Counter(index.get(), "merges"), 10u);
  EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());
}

// A whole Scan with `max_keys` per page, calling between(page) after each page: how often
// each key was passed (at most 2 each, else the cursor goes round: the scan stops).
std::map<std::string, int> ScanCounts(const Index& index, size_t max_keys,
                                      const std::function<void(size_t)>& between,
                                      std::string* error) {
  std::map<std::string, int> passed;
  uint64_t cursor = 0;
  for (size_t page = 0;; ++page) {
    uint64_t next = 0;
    bool too_often = false;
    const Status s = index.Scan(cursor, max_keys, [&](std::string_view k, std::string_view) {
      too_often |= ++passed[std::string(k)] > 2;
      return true;
    }, &next);
    if (!s.ok() || too_often) {
      *error = s.ok() ? "a key passed three times" : s.ToString();
      return passed;
    }
    if (next == 0) return passed;
    cursor = next;
    if (between) between(page);
  }
}

TEST(SpashTest, ScanPassesEachKeyOnceAcrossSplitsDoublingsMergesAndHalvings) {
  // Between pages, writers first split segments and double the directory (inline keys and
  // records), then delete until segments merge and the directory halves: every key present
  // throughout is passed exactly once (hash order: keys never move in it), nothing else
  // but the churn keys.
  Options o = SpashOptions({}, 64ull << 20);
  o.initial_capacity = 16;
  auto index = OpenOrDie(o);
  ASSERT_NE(index, nullptr);
  Spash* spash = AsSpash(index.get());
  std::vector<std::string> stable;
  std::set<std::string> written;
  for (uint64_t i = 0; i < 300; ++i) {
    stable.push_back(i % 4 == 0 ? Bytes(i, 24, 's') : Key8(i));
    written.insert(stable.back());
    ASSERT_TRUE(index->Insert(stable.back(), "stable").ok());
  }
  std::vector<std::string> churn;
  const unsigned depth_before = spash->global_depth();
  unsigned depth_max = depth_before;
  const uint64_t doublings_before = Counter(index.get(), "doublings");
  std::string error;
  const std::map<std::string, int> passed = ScanCounts(*index, 5, [&](size_t page) {
    if (page < 20) {  // growth: 20 x 300 keys
      for (int j = 0; j < 300; ++j) {
        churn.push_back(j % 4 == 0 ? Bytes(churn.size(), 24, 'c') : Key8(1'000'000 + churn.size()));
        written.insert(churn.back());
        ASSERT_TRUE(index->Insert(churn.back(), "churn").ok());
      }
    } else if (page < 40) {  // shrinking: the churn keys go again
      for (int j = 0; j < 300 && !churn.empty(); ++j) {
        ASSERT_TRUE(index->Delete(churn.back()).ok());
        churn.pop_back();
      }
    }
    depth_max = std::max(depth_max, spash->global_depth());
  }, &error);
  ASSERT_EQ(error, "");
  EXPECT_GE(depth_max, depth_before + 3) << "the directory did not double during the scan";
  EXPECT_GT(Counter(index.get(), "doublings"), doublings_before);
  EXPECT_GT(Counter(index.get(), "halvings"), 0u) << "the directory did not halve during the scan";
  EXPECT_GT(Counter(index.get(), "merges"), 0u);
  for (const std::string& k : stable) EXPECT_EQ(passed.count(k) ? passed.at(k) : 0, 1) << Printable(k);
  for (const auto& [k, n] : passed) {
    EXPECT_TRUE(written.count(k)) << "the scan passed " << Printable(k) << ", never written";
    EXPECT_EQ(n, 1) << Printable(k) << " passed twice";
  }
  EXPECT_TRUE(spash->CheckInvariants().ok());
}

TEST(SpashTest, ScanPassesEachKeyOnceWhileThreadsDoubleTheDirectory) {
  // Staged doubling between and during pages: two writers split and double while whole
  // scans run; each scan passes every key present throughout exactly once.
  Options o = SpashOptions({}, 64ull << 20);
  o.initial_capacity = 16;
  auto index = OpenOrDie(o);
  ASSERT_NE(index, nullptr);
  constexpr uint64_t kStable = 1000;
  for (uint64_t i = 0; i < kStable; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(~i)).ok());
  std::atomic<int> writing{2};
  std::atomic<uint64_t> bad{0};
  std::vector<std::thread> writers = SplittingWriters(index.get(), 15000, &bad, &writing);
  std::string error;
  int scans = 0;
  for (; error.empty() && (scans < 2 || writing.load() > 0); ++scans) {
    const std::map<std::string, int> passed = ScanCounts(*index, 64, nullptr, &error);
    for (uint64_t i = 0; i < kStable && error.empty(); ++i) {
      const auto it = passed.find(Key8(i));
      const int n = it == passed.end() ? 0 : it->second;
      if (n != 1) error = "scan " + std::to_string(scans) + " passed a stable key " + std::to_string(n) + " times";
    }
  }
  for (auto& th : writers) th.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(Counter(index.get(), "doublings"), 3u);
  EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());
}

TEST(SpashTest, SearchesNeverReturnATornRecord) {
  // A search of a record reads the key word and the record's header, then copies the
  // value with no lock. The emulated read latency (charged per media line of the value,
  // between the header and the copy) holds it there for about 250 us, while the writer
  // replaces the record twice: the allocator hands the block the search is about to copy
  // to the second replacement, of another length. Only the directory entry's version,
  // checked after the copy, tells the search to read again. Version i's value is i % 24 as
  // a letter, repeated to a length that i % 24 fixes (two lengths, so the block reused two
  // versions later holds one of the other length): any other value is torn.
  Options o = SpashOptions({}, 64ull << 20);
  o.read_latency_ns = 4000;
  auto index = OpenOrDie(o);
  const auto value_of = [](int version) {
    const int c = version % 24;
    return std::string(16000 - c / 2 % 2 * 400, static_cast<char>('a' + c));
  };
  const std::string key = "the key of a large record";
  ASSERT_TRUE(index->Insert(key, value_of(0)).ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> torn{0}, reads{0};
  std::thread writer([&] {
    int version = 0;
    for (int cycle = 0; cycle < 150 && torn.load() == 0; ++cycle) {
      const uint64_t seen = reads.load();
      for (int k = 0; k < 2; ++k) ASSERT_TRUE(index->Update(key, value_of(++version)).ok());
      // The next pair once a search has completed (or after 20 ms): each pair meets a
      // search that started before it.
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      while (reads.load() == seen && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
    }
    stop.store(true);
  });
  std::thread reader([&] {
    std::string v;
    while (!stop.load()) {
      ASSERT_TRUE(index->Get(key, &v).ok());
      const int c = v.empty() ? -1 : v[0] - 'a';
      if (c < 0 || c >= 24 || v != value_of(c)) torn.fetch_add(1);
      reads.fetch_add(1);
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(torn.load(), 0u) << "of " << reads.load() << " reads";
  EXPECT_GT(reads.load(), 0u);
}

TEST(SpashTest, EmulatedHtmRetriesAbortsAndFallsBack) {
  for (const PersistMode mode : {PersistMode::kAdr, PersistMode::kEadr}) {
    Options o = SpashOptions({{"htm_emulated", "on"}, {"htm_abort_rate", "0.3"},
                              {"htm_retries", "3"}});
    o.persist = mode;
    o.initial_capacity = 16;
    auto index = OpenOrDie(o);
    Model model;
    for (uint64_t i = 0; i < 2000; ++i) {
      // A third of the keys hold records, always of one size: in place in eadr.
      const std::string v = i % 700 % 3 == 0 ? std::string(24, 'a' + i % 26) : Key8(i);
      ASSERT_TRUE(index->Put(Key8(i % 700), v).ok());
      model[Key8(i % 700)] = v;
      if (i % 5 == 0) {
        ASSERT_TRUE(index->Delete(Key8(i % 700)).ok());
        model.erase(Key8(i % 700));
      }
    }
    ExpectMatches(index.get(), model);
    EXPECT_GT(Counter(index.get(), "htm_commits"), 500u);
    EXPECT_GT(Counter(index.get(), "htm_aborts"), 200u);
    EXPECT_GT(Counter(index.get(), "htm_fallbacks"), 10u);  // aborted 3 times, or a split
    if (mode == PersistMode::kEadr) {
      EXPECT_GT(Counter(index.get(), "in_place_updates"), 50u);
    }
  }
}

TEST(SpashTest, RtmIsRefusedWhereItCannotRun) {
  std::unique_ptr<Index> index;
  // adr: a flush inside the transaction would abort every one (whatever the CPU).
  Status s = Open(SpashOptions({{"htm_rtm", "on"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("eadr"), std::string::npos) << s.message();
  Options o = SpashOptions({{"htm_rtm", "on"}, {"htm_emulated", "on"}});
  o.persist = PersistMode::kEadr;
  s = Open(o, &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  o = SpashOptions({{"htm_rtm", "on"}});
  o.persist = PersistMode::kEadr;
  s = Open(o, &index);
  EXPECT_EQ(s.ok(), htm::Usable()) << s.ToString();
  if (!s.ok()) {
    EXPECT_NE(s.message().find("no RTM"), std::string::npos) << s.message();
  }
}

// Two writers in RTM transactions over keys of their own and keys both write, records of
// one size updated in place inside the transaction, splits and doublings by the fallback
// lock; a third thread searches the shared keys and must see only whole values.
TEST(SpashTest, RtmTransactionsCommitWritesOfTwoThreads) {
  if (!htm::Usable()) GTEST_SKIP() << "this CPU runs no RTM transaction";
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not know that a transaction isolates its stores";
#endif
  for (const char* rate : {"0", "0.3"}) {
    Options o = SpashOptions({{"htm_rtm", "on"}, {"htm_abort_rate", rate}});
    o.persist = PersistMode::kEadr;
    o.initial_capacity = 16;
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    constexpr uint64_t kShared = 64;
    const auto shared_value = [](uint64_t writer, uint64_t i) {
      return std::string(24, static_cast<char>('a' + (writer * 7 + i) % 26));
    };
    for (uint64_t k = 0; k < kShared; ++k) ASSERT_TRUE(index->Put(Key8(k), shared_value(0, 0)).ok());
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> torn{0}, reads{0};
    Model own[2];
    std::thread reader([&] {
      std::string v;
      for (uint64_t i = 0; !stop.load(); ++i) {
        ASSERT_TRUE(index->Get(Key8(i % kShared), &v).ok());
        if (v.size() != 24 || v.find_first_not_of(v[0]) != std::string::npos) torn.fetch_add(1);
        reads.fetch_add(1);
      }
    });
    std::vector<std::thread> writers;
    for (uint64_t w = 0; w < 2; ++w) {
      writers.emplace_back([&, w] {
        for (uint64_t i = 0; i < 6000; ++i) {
          ASSERT_TRUE(index->Put(Key8(i % kShared), shared_value(w, i)).ok());
          const std::string key = Key8(1000000 * (w + 1) + i % 2500);
          if (i % 7 == 3) {
            ASSERT_TRUE(index->Delete(key).ok() || own[w].count(key) == 0);
            own[w].erase(key);
          } else {
            ASSERT_TRUE(index->Put(key, Key8(i)).ok());
            own[w][key] = Key8(i);
          }
        }
      });
    }
    for (auto& t : writers) t.join();
    stop.store(true);
    reader.join();
    std::string got;
    for (const Model& m : own) {
      for (const auto& [key, value] : m) {
        ASSERT_TRUE(index->Get(key, &got).ok());
        EXPECT_EQ(got, value);
      }
    }
    EXPECT_EQ(torn.load(), 0u) << "of " << reads.load() << " reads";
    EXPECT_TRUE(AsSpash(index.get())->CheckInvariants().ok());
#if defined(__SANITIZE_ADDRESS__)
    // Under ASan every transaction may abort (its instrumentation inside them: seen on
    // the Xeon of 2026-11-30, htm_commits 0 in 2 of 4 runs), so every write falls back:
    // the values and invariants above hold then too; the counts are checked elsewhere.
    continue;
#endif
    // Most commits ran in hardware; splits and injected aborts took the fallback lock.
    EXPECT_GT(Counter(index.get(), "htm_commits"), 10000u) << rate;
    EXPECT_GT(Counter(index.get(), "in_place_updates"), 1000u) << rate;
    EXPECT_GT(Counter(index.get(), "htm_fallbacks"), 10u) << rate;
    if (std::string(rate) != "0") {
      EXPECT_GT(Counter(index.get(), "htm_aborts"), 2000u);
    }
  }
}

TEST(SpashTest, ReadLockVariantAgrees) {
  auto index = OpenOrDie(SpashOptions({{"read_lock", "on"}}));
  Model model;
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), std::string(i % 50, 'x')).ok());
    model[Key8(i)] = std::string(i % 50, 'x');
  }
  ExpectMatches(index.get(), model);
}

TEST(SpashTest, HotKeysAreUpdatedWithoutWriteBackInEadr) {
  Options o = SpashOptions();
  o.persist = PersistMode::kEadr;
  auto index = OpenOrDie(o);
  const std::string big(200, 'b');
  for (uint64_t i = 0; i < 100; ++i) ASSERT_TRUE(index->Insert(Key8(i), big).ok());
  // The same key over and over: hot after its first update.
  const uint64_t wb0 = index->Stats().persist.write_backs;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(index->Update(Key8(7), big).ok());
  EXPECT_GE(Counter(index.get(), "hot_updates"), 49u);
  const uint64_t wb_hot = index->Stats().persist.write_backs - wb0;
  // Fifty different keys: cold, each > 64 bytes, so each new copy is written back.
  for (uint64_t i = 50; i < 100; ++i) ASSERT_TRUE(index->Update(Key8(i), big).ok());
  const uint64_t wb_cold = index->Stats().persist.write_backs - wb0 - wb_hot;
  EXPECT_LE(wb_hot, 4u);        // at most the first, cold, update
  EXPECT_GE(wb_cold, 50u * 3);  // 216 bytes: four lines each
}

// The paper's oracle detector (Fig. 12a): hot are the keys the workload named, at most
// hot_keys of them, hottest first; the list's recency plays no part.
TEST(SpashTest, HotKeyOracleMakesTheNamedKeysHot) {
  Options o = SpashOptions({{"hot_oracle", "on"}, {"hot_keys", "4"}});
  o.persist = PersistMode::kEadr;
  auto opened = OpenOrDie(o);
  Spash* index = AsSpash(opened.get());
  EXPECT_EQ(index->HotKeyOracleSize(), 4u);
  EXPECT_EQ(AsSpash(OpenOrDie(SpashOptions()).get())->HotKeyOracleSize(), 0u);
  const std::string big(200, 'b');
  for (uint64_t i = 0; i < 100; ++i) ASSERT_TRUE(index->Insert(Key8(i), big).ok());
  // No oracle yet: every key cold, even one updated over and over (the list would call
  // it hot).
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(index->Update(Key8(7), big).ok());
  EXPECT_EQ(Counter(index, "hot_updates"), 0u);
  EXPECT_EQ(Counter(index, "cold_updates"), 20u);
  // Six keys named, four kept: 10..13.
  index->SetHotKeyOracle({Key8(10), Key8(11), Key8(12), Key8(13), Key8(14), Key8(15)});
  const uint64_t wb0 = index->Stats().persist.write_backs;
  for (uint64_t i = 10; i < 14; ++i) ASSERT_TRUE(index->Update(Key8(i), big).ok());
  EXPECT_EQ(Counter(index, "hot_updates"), 4u);
  EXPECT_EQ(index->Stats().persist.write_backs, wb0);  // hot: left in the cache
  for (uint64_t i : {14, 15, 7, 8}) ASSERT_TRUE(index->Update(Key8(i), big).ok());
  EXPECT_EQ(Counter(index, "hot_updates"), 4u);
  EXPECT_EQ(Counter(index, "cold_updates"), 24u);
  EXPECT_GE(index->Stats().persist.write_backs - wb0, 4u * 3);  // cold: written back
  // A new oracle replaces the old; an empty one makes every key cold.
  index->SetHotKeyOracle({Key8(7)});
  ASSERT_TRUE(index->Update(Key8(7), big).ok());
  ASSERT_TRUE(index->Update(Key8(10), big).ok());
  EXPECT_EQ(Counter(index, "hot_updates"), 5u);
  index->SetHotKeyOracle({});
  ASSERT_TRUE(index->Update(Key8(7), big).ok());
  EXPECT_EQ(Counter(index, "hot_updates"), 5u);
  Model model;
  for (uint64_t i = 0; i < 100; ++i) model[Key8(i)] = big;
  ExpectMatches(index, model);
}

TEST(SpashTest, PoolCheckFindsADamagedKeyWord) {
  // The stored form of an 8-byte key is its hash: a damaged prefix bit names a key of
  // another segment, a damaged form bit an empty slot (Count disagrees) or no form at
  // all; the invariants find each, as `pmhash pool check` runs them. (A damaged bit
  // further down may name another key of the same bucket: undetectable, as a damaged
  // inline key is in every engine, common/slot.h.)
  for (const uint64_t bit : {uint64_t{1} << 60, uint64_t{1} << 62, uint64_t{1} << 63}) {
    std::unique_ptr<Engine> engine;
    Options o = SpashOptions();
    ASSERT_TRUE(Open(o, &engine).ok());
    for (uint64_t i = 0; i < 200; ++i) ASSERT_TRUE(engine->Insert(Key8(i), Key8(i ^ 0xabc)).ok());
    ASSERT_TRUE(engine->CheckInvariants().ok());
    // The key word of Key8(7): the inline word whose value word holds Key8(7 ^ 0xabc).
    const uint64_t want = HashKey(Key8(7), kTestHashSeed) & spash::KeyWord::kHashMask;
    auto* words = reinterpret_cast<uint64_t*>(engine->pool().base());
    uint64_t* found = nullptr;
    for (uint64_t w = 0; w + 1 < engine->pool().size() / 8; w += 2) {
      if ((words[w] & ~spash::KeyWord::kHint) == (spash::KeyWord::kInline | want)) found = &words[w];
    }
    ASSERT_NE(found, nullptr);
    *found ^= bit;
    const Status s = engine->CheckInvariants();
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    *found ^= bit;
    EXPECT_TRUE(engine->CheckInvariants().ok());
  }
}

TEST(SpashTest, KeyWordLayout) {
  using spash::KeyWord;
  const uint64_t h = 0xfedcba9876543210ull;
  const uint64_t w = KeyWord::Inline(h);
  EXPECT_EQ(KeyWord::Form(w), KeyWord::kInline);
  EXPECT_EQ(KeyWord::LowHash(w), h & 0x1ffff);
  const uint64_t r = KeyWord::Record(h, 0x123456780ull, true);
  EXPECT_EQ(KeyWord::Form(r), KeyWord::kRecord);
  EXPECT_TRUE(KeyWord::Chunked(r));
  EXPECT_EQ(KeyWord::RecordOffset(r), 0x123456780ull);
  EXPECT_EQ(KeyWord::Fingerprint(r), h & 0x1ffff);
  EXPECT_EQ(r & KeyWord::kHint, 0u);
  // The largest pool's last 16 bytes.
  EXPECT_EQ(KeyWord::RecordOffset(KeyWord::Record(h, pm::kMaxPoolSize - 16, false)),
            pm::kMaxPoolSize - 16);
}

}  // namespace
}  // namespace pmhash::engines
