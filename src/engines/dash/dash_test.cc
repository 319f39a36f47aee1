#include "engines/dash/dash.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/engine_tests.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

Options DashOptions(std::map<std::string, std::string> engine_options = {}) {
  return testing::OptionsFor("dash", std::move(engine_options), 64ull << 20);
}

// One segment of 4 normal buckets and 1 stash bucket: a home's window (its bucket and the
// next) is 28 slots, the stash 14 more.
std::map<std::string, std::string> SmallDash(uint64_t segments = 1) {
  return {{"buckets", "4"}, {"stash_buckets", "1"}, {"segments", std::to_string(segments)}};
}

// Keys of home bucket `home` (of 4) whose top two hash bits cycle 00, 01, 10, 11, so that
// every split of a segment they fill separates them.
std::vector<std::string> HomeKeys(uint64_t home, size_t n, uint64_t from = 0) {
  std::vector<std::vector<std::string>> by_top;
  for (uint64_t t = 0; t < 4; ++t) {
    by_top.push_back(KeysWithHashBits(3, home, 2, t, (n + 3) / 4, from + t * 1000000));
  }
  std::vector<std::string> keys;
  for (size_t i = 0; keys.size() < n; ++i) keys.push_back(by_top[i % 4][i / 4]);
  return keys;
}

void InsertAllDash(Index* x, Model* m, const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    ASSERT_TRUE(x->Insert(k, k).ok()) << k;
    (*m)[k] = k;
  }
}

TEST(DashTest, BadOptionsAreInvalidArgument) {
  std::unique_ptr<Index> index;
  Status s = Open(DashOptions({{"buckets", "6"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("buckets"), std::string::npos) << s.message();
  s = Open(DashOptions({{"segments", "3"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = Open(DashOptions({{"stash_buckets", "5"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = Open(DashOptions({{"first_try", "maybe"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("first_try"), std::string::npos) << s.message();
  s = Open(DashOptions({{"first_try_prefetch", "2"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("first_try_prefetch"), std::string::npos) << s.message();
}

TEST(DashTest, TheOriginalsGeometryByDefault) {
  auto index = OpenOrDie(DashOptions());
  const IndexStats st = index->Stats();
  EXPECT_EQ(st.engine_counters.at("segments"), 64u);
  EXPECT_EQ(st.engine_counters.at("global_depth"), 6u);
  EXPECT_EQ(st.key_slots, 64u * 66 * 14) << "64 + 2 buckets of 14 slots per segment";
}

// A home's keys fill its bucket and the next (balanced); then an entry of the next bucket
// whose home it is moves on (displacement); then the stash; then the segment splits.
TEST(DashTest, BalancedInsertDisplacementStashAndSplit) {
  auto index = OpenOrDie(DashOptions(SmallDash()));
  Model model;
  InsertAllDash(index.get(), &model, HomeKeys(1, 1, 7000000));  // into bucket 1, its home
  const std::vector<std::string> keys = HomeKeys(0, 60);
  // Buckets 0 and 1 take 27 keys of home 0 beside the home-1 key.
  InsertAllDash(index.get(), &model, {keys.begin(), keys.begin() + 27});
  EXPECT_EQ(Counter(index.get(), "displacements"), 0u);
  EXPECT_EQ(Counter(index.get(), "stash_inserts"), 0u);
  // The 28th: both full, the home-1 key moves on to bucket 2.
  InsertAllDash(index.get(), &model, {keys[27]});
  EXPECT_EQ(Counter(index.get(), "displacements"), 1u);
  ExpectMatches(index.get(), model);
  // Then 14 into the stash (4 + 4 overflow fingerprints, the rest counted).
  InsertAllDash(index.get(), &model, {keys.begin() + 28, keys.begin() + 42});
  EXPECT_EQ(Counter(index.get(), "stash_inserts"), 14u);
  EXPECT_EQ(Counter(index.get(), "splits"), 0u);
  ExpectMatches(index.get(), model);
  // Stash keys are found, deleted and inserted again.
  for (size_t i : {29u, 35u, 41u}) {
    ASSERT_TRUE(index->Delete(keys[i]).ok());
    model.erase(keys[i]);
  }
  ExpectMatches(index.get(), model);
  InsertAllDash(index.get(), &model, {keys[29], keys[35], keys[41]});
  ExpectMatches(index.get(), model);
  // The next one splits (the directory doubles from depth 0).
  InsertAllDash(index.get(), &model, {keys[42]});
  EXPECT_EQ(Counter(index.get(), "splits"), 1u);
  EXPECT_EQ(Counter(index.get(), "doublings"), 1u);
  EXPECT_EQ(Counter(index.get(), "segments"), 2u);
  ExpectMatches(index.get(), model);
  InsertAllDash(index.get(), &model, {keys.begin() + 43, keys.end()});
  EXPECT_TRUE(index->Insert(keys[3], "dup").IsAlreadyExists());
  ExpectMatches(index.get(), model);
}

TEST(DashTest, ResizeOffRefusesAFullWindowAndStash) {
  std::map<std::string, std::string> o = SmallDash();
  o["resize"] = "off";
  auto index = OpenOrDie(DashOptions(o));
  const std::vector<std::string> keys = HomeKeys(2, 43);
  Model model;
  InsertAllDash(index.get(), &model, {keys.begin(), keys.begin() + 42});
  const Status s = index->Insert(keys[42], "no room");
  EXPECT_TRUE(s.IsTableFull()) << s.ToString();
  EXPECT_EQ(index->Count(), 42u);
  ExpectMatches(index.get(), model);
}

TEST(DashTest, KeysThatWouldReadAsRecordWordsAreStoredOutOfLine) {
  auto index = OpenOrDie(DashOptions(SmallDash()));
  std::string tagged = Key8(0x1234);
  tagged[6] = tagged[7] = '\xff';
  const uint64_t pm_before = index->Stats().pm_bytes;
  ASSERT_TRUE(index->Insert(tagged, "tagged00").ok());
  EXPECT_GT(index->Stats().pm_bytes, pm_before) << "the key took a record";
  Model model{{tagged, "tagged00"}};
  for (uint64_t i = 0; i < 300; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i * 7)).ok());
    model[Key8(i)] = Key8(i * 7);
  }
  ASSERT_TRUE(index->Update(tagged, "newvalue").ok());
  model[tagged] = "newvalue";
  ExpectMatches(index.get(), model);
}

// Seeded random inserts, puts, updates and deletes of inline and record keys against a
// model, with many splits, through clean reopens and crashes (Abandon).
TEST(DashTest, RandomOpsAgreeWithAModelAcrossReopens) {
  TempDir dir("dash");
  Options o = DashOptions(SmallDash());
  o.path = dir.File("pool");
  std::mt19937_64 rng(42);
  Model model;
  for (int round = 0; round < 4; ++round) {
    std::unique_ptr<Engine> index;
    ASSERT_TRUE(Open(o, &index).ok());
    ExpectMatches(index.get(), model);
    for (int i = 0; i < 6000; ++i) {
      const uint64_t k = rng() % 4000;
      const std::string key = k % 5 == 0 ? "long key " + std::to_string(k) : Key8(k);
      const std::string value = rng() % 4 == 0 ? "a longer value " + std::to_string(i) : Key8(i);
      const bool present = model.count(key) != 0;
      switch (rng() % 4) {
        case 0: {
          const Status s = index->Insert(key, value);
          ASSERT_EQ(s.ok(), !present) << s.ToString();
          if (!present) model[key] = value;
          break;
        }
        case 1:
          ASSERT_TRUE(index->Put(key, value).ok());
          model[key] = value;
          break;
        case 2: {
          const Status s = index->Update(key, value);
          ASSERT_EQ(s.ok(), present) << s.ToString();
          if (present) model[key] = value;
          break;
        }
        default: {
          const Status s = index->Delete(key);
          ASSERT_EQ(s.ok(), present) << s.ToString();
          model.erase(key);
        }
      }
    }
    ExpectMatches(index.get(), model);
    EXPECT_GT(Counter(index.get(), "segments"), 8u) << "the segment split";
    if (round % 2 == 0) {
      index->Abandon();  // recovered at the next open
    } else {
      ASSERT_TRUE(index->Close().ok());
    }
  }
}

TEST(DashTest, ThreadsAgreeWithTheirModels) {
  auto index = OpenOrDie(DashOptions(SmallDash(4)));
  ExpectThreadsAgreeWithTheirModels(index.get(), 4, 3000, 5);
  EXPECT_GT(Counter(index.get(), "splits"), 0u);
}

Dash* AsDash(Index* index) { return dynamic_cast<Dash*>(index); }

TEST(DashTest, FirstTryReadsTheEntryAgainAfterASplitMovedTheKey) {
  // A search reads the directory entry; before it reads the buckets, writers split the
  // segment (the key moves to the new one, the old one is pruned) and double the
  // directory. The first try must notice (the entry it read is no longer current) and
  // not answer from the pruned segment. (Uncounted: searches take the first try.)
  Options o = DashOptions(SmallDash());
  o.count_stats = false;
  auto index = OpenOrDie(o);
  const std::vector<std::string> keys = HomeKeys(1, 200);
  const std::string& moving = keys[2];  // top hash bits 10: the first split moves it
  ASSERT_TRUE(index->Insert(moving, Key8(1)).ok());  // 8-byte key and value: inline
  bool fired = false;
  AsDash(index.get())->TEST_SetFirstTryHook([&](Dash::FirstTryPoint p) {
    if (p != Dash::FirstTryPoint::kEntryRead || fired) return;
    fired = true;
    for (size_t i = 0; i < keys.size() && Counter(index.get(), "splits") == 0; ++i) {
      if (i != 2) {
        ASSERT_TRUE(index->Insert(keys[i], keys[i]).ok());
      }
    }
  });
  std::string v;
  EXPECT_TRUE(index->Get(moving, &v).ok());
  EXPECT_EQ(v, Key8(1));
  EXPECT_TRUE(fired);
  EXPECT_GT(Counter(index.get(), "splits"), 0u);
}

TEST(DashTest, FirstTryValidatesASlotThatWasReusedUnderIt) {
  // A search matched its key's word in a slot; before it reads the value, the key is
  // deleted and another key of the same home takes the slot. The search must not
  // return the other key's value.
  Options o = DashOptions(SmallDash());
  o.count_stats = false;
  auto index = OpenOrDie(o);
  const std::vector<std::string> keys = HomeKeys(1, 2);
  ASSERT_TRUE(index->Insert(keys[0], Key8(1)).ok());  // 8-byte key and value: inline
  bool fired = false;
  AsDash(index.get())->TEST_SetFirstTryHook([&](Dash::FirstTryPoint p) {
    if (p != Dash::FirstTryPoint::kKeyMatched || fired) return;
    fired = true;
    ASSERT_TRUE(index->Delete(keys[0]).ok());
    ASSERT_TRUE(index->Insert(keys[1], Key8(2)).ok());
  });
  std::string v;
  EXPECT_TRUE(index->Get(keys[0], &v).IsNotFound()) << v;
  EXPECT_TRUE(fired);
}

TEST(DashTest, ThreadsSplitAndReadWhileTheDirectoryDoubles) {
  // Uncounted, searches take DoGet's first try (the original's read set, validated by the
  // directory entry read again); counted, the general path. Small segments: the stash and
  // its overflow fingerprints are in use throughout. The first try with its prefetch too
  // (prefetches of a segment a split prunes meanwhile are harmless hints).
  struct Variant {
    bool counted;
    const char* prefetch;
  };
  for (const Variant v : {Variant{false, "off"}, Variant{false, "on"}, Variant{true, "off"}}) {
    auto extra = SmallDash();
    extra["first_try_prefetch"] = v.prefetch;
    Options o = DashOptions(extra);
    o.count_stats = v.counted;
    auto index = OpenOrDie(o);
    EXPECT_EQ(ReadWhileWritersSplit(index.get(), 2000, 20000), 0u) << v.counted << v.prefetch;
    EXPECT_GT(Counter(index.get(), "doublings"), 5u);
    EXPECT_GT(Counter(index.get(), "stash_inserts"), 0u);
  }
}

}  // namespace
}  // namespace pmhash::engines
