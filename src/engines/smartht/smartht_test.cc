#include "engines/smartht/smartht.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/engine_tests.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

SmartHt* AsSmart(Index* index) { return dynamic_cast<SmartHt*>(index); }

Options SmartOptions(std::map<std::string, std::string> engine_options = {},
                     uint64_t pool_size = 32ull << 20) {
  return testing::OptionsFor("smartht", std::move(engine_options), pool_size);
}

TEST(SmartHtTest, NegativeSearchReadsNoPm) {
  auto index = OpenOrDie(SmartOptions({{"head_buckets", "1024"}}));
  ASSERT_NE(index, nullptr);
  for (uint64_t i = 0; i < 3000; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i * 7)).ok());
  int filtered = 0;
  for (uint64_t i = 1'000'000; i < 1'004'000; ++i) {
    const IndexStats before = index->Stats();
    std::string v;
    ASSERT_TRUE(index->Get(Key8(i), &v).IsNotFound());
    ASSERT_TRUE(index->Delete(Key8(i)).IsNotFound());
    ASSERT_TRUE(index->Update(Key8(i), Key8(1)).IsNotFound());
    const IndexStats after = index->Stats();
    // Every search the filter answers (all but its rare false positives) reads no PM line
    // and writes nothing.
    if (after.engine_counters.at("filter_negatives") ==
        before.engine_counters.at("filter_negatives") + 3) {
      ++filtered;
      EXPECT_EQ(after.persist.lines_read, before.persist.lines_read);
      EXPECT_EQ(after.persist.flushes, before.persist.flushes);
      EXPECT_EQ(after.persist.bytes_stored, before.persist.bytes_stored);
    }
  }
  // Configured FP rate 1e-4: essentially every absent key is filtered.
  EXPECT_GE(filtered, 3990);
  // Positive searches do read PM (the counter works).
  const uint64_t lines = index->Stats().persist.lines_read;
  std::string v;
  ASSERT_TRUE(index->Get(Key8(5), &v).ok());
  EXPECT_EQ(v, Key8(35));
  EXPECT_GT(index->Stats().persist.lines_read, lines);
}

TEST(SmartHtTest, BucketFirstReadsTheHeadBucketBeforeTheFilter) {
  // One head bucket's keys: three in the head bucket, three in a chained bucket behind it
  // (head insertion puts the newest chained bucket first).
  auto index = OpenOrDie(SmartOptions({{"head_buckets", "256"}, {"resize", "off"},
                                       {"bucket_first", "on"}}));
  const std::vector<std::string> keys = testing::KeysWithHome(17, 256, 7, 0);
  for (int k = 0; k < 6; ++k) ASSERT_TRUE(index->Insert(keys[k], Key8(k)).ok());
  const auto read = [&](const std::string& key, std::string* value) {
    const IndexStats before = index->Stats();
    const Status s = index->Get(key, value);
    const IndexStats after = index->Stats();
    EXPECT_EQ(after.engine_counters.at("filter_negatives") -
                  before.engine_counters.at("filter_negatives"),
              s.IsNotFound() ? 1u : 0u);
    return std::pair(s, after.persist.lines_read - before.persist.lines_read);
  };
  std::string v;
  // In the head bucket: one line, no filter.
  auto [s, lines] = read(keys[0], &v);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(v, Key8(0));
  EXPECT_EQ(lines, 1u);
  // In the chained bucket: the head, the filter (maybe), the chained bucket.
  std::tie(s, lines) = read(keys[4], &v);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(v, Key8(4));
  EXPECT_EQ(lines, 2u);
  // Absent, same head bucket: the head bucket, then the filter rules it out (it holds
  // six keys of 1,024 expected, so a false positive is all but impossible).
  std::tie(s, lines) = read(keys[6], &v);
  ASSERT_TRUE(s.IsNotFound());
  EXPECT_EQ(lines, 1u);
  // The same answers as the paper's order over a random workload.
  Model model;
  for (int k = 0; k < 6; ++k) model[keys[k]] = Key8(k);
  std::mt19937_64 rng(3);
  for (int op = 0; op < 20000; ++op) {
    const std::string key = Key8(rng() % 4000);
    if (rng() % 3 == 0) {
      const Status d = index->Delete(key);
      ASSERT_EQ(d.ok(), model.erase(key) == 1) << d.ToString();
    } else if (rng() % 2 == 0) {
      ASSERT_TRUE(index->Put(key, Key8(op)).ok());
      model[key] = Key8(op);
    } else {
      const Status g = index->Get(key, &v);
      ASSERT_EQ(g.ok(), model.count(key) == 1) << g.ToString();
      if (g.ok()) {
        ASSERT_EQ(v, model[key]);
      }
    }
  }
  ExpectMatches(index.get(), model);
}

TEST(SmartHtTest, PersistSequencesFollowAlgorithm1) {
  Options o = SmartOptions({{"head_buckets", "256"}, {"resize", "off"}});
  auto index = OpenOrDie(o);
  ASSERT_NE(index, nullptr);
  // Keys of one head bucket: three fill the head bucket, the fourth needs a chained
  // bucket, the fifth and sixth fill it, the seventh needs a second one.
  const std::vector<std::string> keys =
      testing::KeysWithHome(17, 256, 8, 0);
  Model model;
  for (int k = 0; k < 7; ++k) {
    const PersistCounters before = index->Stats().persist;
    ASSERT_TRUE(index->Insert(keys[k], "valuevvv").ok());
    model[keys[k]] = "valuevvv";
    const PersistCounters after = index->Stats().persist;
    if (k == 3) continue;  // the first chained bucket also sets up an allocator chunk
    // Lines 10-13: one merged flush of the bucket, one fence. Lines 21-29 (k == 6): the
    // new bucket persisted, then the link persisted.
    const uint64_t expected = k == 6 ? 2 : 1;
    EXPECT_EQ(after.flushes - before.flushes, expected) << "insert " << k;
    EXPECT_EQ(after.fences - before.fences, expected) << "insert " << k;
  }
  EXPECT_EQ(Counter(index.get(), "chain_buckets"), 2u);
  // Lazy deletion: one token byte, one flush, one fence.
  PersistCounters before = index->Stats().persist;
  ASSERT_TRUE(index->Delete(keys[1]).ok());
  model.erase(keys[1]);
  PersistCounters after = index->Stats().persist;
  EXPECT_EQ(after.flushes - before.flushes, 1u);
  EXPECT_EQ(after.fences - before.fences, 1u);
  EXPECT_EQ(after.bytes_stored - before.bytes_stored, 1u);
  // The deleted slot is reused by the next insert into that chain (no new bucket).
  ASSERT_TRUE(index->Insert(keys[7], "valuewww").ok());
  model[keys[7]] = "valuewww";
  EXPECT_EQ(Counter(index.get(), "chain_buckets"), 2u);
  ExpectMatches(index.get(), model);
}

TEST(SmartHtTest, FilterSavedOnCleanCloseReloadedAndRebuiltAfterAbandon) {
  TempDir dir("smartht");
  Options o = SmartOptions({{"head_buckets", "512"}});
  o.path = dir.File("a.pool");
  Model model;
  {
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(AsSmart(index.get())->filter_origin(), "new");
    for (uint64_t i = 0; i < 2000; ++i) {
      model[Key8(i)] = Key8(i + 1);
      ASSERT_TRUE(index->Insert(Key8(i), Key8(i + 1)).ok());
    }
    ASSERT_TRUE(index->Close().ok());
  }
  {
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(AsSmart(index.get())->filter_origin(), "reloaded");
    EXPECT_FALSE(index->Stats().recovered);
    EXPECT_EQ(Counter(index.get(), "filter_reloaded"), 1u);
    ExpectMatches(index.get(), model);
    // The reloaded filter still answers negative searches without PM.
    const uint64_t lines = index->Stats().persist.lines_read;
    const uint64_t filtered = Counter(index.get(), "filter_negatives");
    std::string v;
    for (uint64_t i = 50'000; i < 50'100; ++i) ASSERT_TRUE(index->Get(Key8(i), &v).IsNotFound());
    const uint64_t now_filtered = Counter(index.get(), "filter_negatives") - filtered;
    EXPECT_GE(now_filtered, 99u);
    if (now_filtered == 100) {
      EXPECT_EQ(index->Stats().persist.lines_read, lines);
    }
    for (uint64_t i = 0; i < 500; ++i) {
      ASSERT_TRUE(index->Delete(Key8(i)).ok());
      model.erase(Key8(i));
    }
    model[Key8(77777)] = "a longer value";
    ASSERT_TRUE(index->Insert(Key8(77777), "a longer value").ok());
    // Crash: the filter was not saved this time.
    AsSmart(index.get())->Abandon();
  }
  {
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(AsSmart(index.get())->filter_origin(), "rebuilt");
    EXPECT_TRUE(index->Stats().recovered);
    ExpectMatches(index.get(), model);
    ASSERT_TRUE(index->Close().ok());
  }
  {
    // The parallel rebuild gives the same answers.
    o.engine_options["recovery_threads"] = "2";
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(AsSmart(index.get())->filter_origin(), "reloaded");
    AsSmart(index.get())->Abandon();
    index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(AsSmart(index.get())->filter_origin(), "rebuilt");
    ExpectMatches(index.get(), model);
  }
}

TEST(SmartHtTest, DeletesTriggerABackgroundRebuildThatMissesNoInsert) {
  auto index = OpenOrDie(SmartOptions(
      {{"head_buckets", "1024"}, {"expected_keys", "8192"}, {"rebuild_deletes", "0.05"}}));
  ASSERT_NE(index, nullptr);
  SmartHt* ht = AsSmart(index.get());
  Model model;
  for (uint64_t i = 0; i < 6000; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    model[Key8(i)] = Key8(i);
  }
  // Inserts run in another thread while the deletes start rebuilds: none may be lost
  // from the filter (CheckInvariants checks every stored key against it).
  std::atomic<bool> done{false};
  std::thread inserter([&] {
    for (uint64_t i = 100'000; i < 104'000; ++i) {
      EXPECT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    }
    done = true;
  });
  for (uint64_t i = 0; i < 5000; ++i) ASSERT_TRUE(index->Delete(Key8(i)).ok());
  inserter.join();
  for (uint64_t i = 0; i < 5000; ++i) model.erase(Key8(i));
  for (uint64_t i = 100'000; i < 104'000; ++i) model[Key8(i)] = Key8(i);
  ht->WaitForBackgroundWork();
  EXPECT_GE(ht->filter_rebuilds(), 1u);
  ExpectMatches(index.get(), model);
  // One more rebuild, now that every delete above is done: the deleted keys leave the
  // filter. Whether an earlier rebuild grew the filter (and so the threshold), and when it
  // took its snapshot of the delete count, depends on scheduling; what does not is that
  // the snapshot precedes this point (no rebuild runs now) and that a trigger is checked
  // every 64 deletes. So deleting threshold + 64 keys crosses the threshold, whatever
  // the previous rebuild saw.
  const uint64_t rebuilds = ht->filter_rebuilds();
  const uint64_t threshold = (Counter(index.get(), "filter_expected_keys") * 5 + 99) / 100;
  const uint64_t to_delete = threshold + 64;
  std::vector<std::string> victims;
  for (const auto& [key, value] : model) {
    if (victims.size() == to_delete) break;
    victims.push_back(key);
  }
  ASSERT_EQ(victims.size(), to_delete) << "too few keys left to cross the threshold";
  for (const std::string& key : victims) {
    ASSERT_TRUE(index->Delete(key).ok());
    model.erase(key);
  }
  ht->WaitForBackgroundWork();
  ASSERT_GT(ht->filter_rebuilds(), rebuilds);
  ExpectMatches(index.get(), model);
  const uint64_t filtered = Counter(index.get(), "filter_negatives");
  std::string v;
  for (uint64_t i = 0; i < 5000; ++i) ASSERT_TRUE(index->Get(Key8(i), &v).IsNotFound());
  // Keys deleted before the last rebuild's scan are gone from the filter.
  EXPECT_GE(Counter(index.get(), "filter_negatives") - filtered, 4900u);
}

TEST(SmartHtTest, GrowsTheHeadTableAndTheFilter) {
  TempDir dir("smartht");
  Options o = SmartOptions({{"head_buckets", "256"}, {"expected_keys", "1024"}});
  o.path = dir.File("g.pool");
  Model model;
  {
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    SmartHt* ht = AsSmart(index.get());
    for (uint64_t i = 0; i < 20000; ++i) {
      const std::string v = i % 10 == 0 ? Bytes(i, 40, 'v') : Key8(i);
      ASSERT_TRUE(index->Insert(Key8(i), v).ok());
      model[Key8(i)] = v;
    }
    ht->WaitForBackgroundWork();
    EXPECT_GT(ht->head_buckets(), 256u);
    EXPECT_GT(Counter(index.get(), "grows"), 0u);
    EXPECT_GE(Counter(index.get(), "filter_expected_keys"), 20000u);
    ExpectMatches(index.get(), model);
    ht->Abandon();  // crash: the grown structure must be what recovery finds
  }
  auto index = OpenOrDie(o);
  ASSERT_NE(index, nullptr);
  EXPECT_GT(AsSmart(index.get())->head_buckets(), 256u);
  ExpectMatches(index.get(), model);
}

TEST(SmartHtTest, LongKeysAndValuesAndFormChangingUpdates) {
  auto index = OpenOrDie(SmartOptions({{"head_buckets", "256"}}));
  ASSERT_NE(index, nullptr);
  Model model;
  for (uint64_t i = 0; i < 300; ++i) {
    const std::string k = Bytes(i, 1 + i % 70, 'k');
    const std::string v = Bytes(i, i % 300, 'v');
    ASSERT_TRUE(index->Insert(k, v).ok());
    model[k] = v;
  }
  // Inline -> record (undo log), record -> record, record stays record with 8 bytes.
  ASSERT_TRUE(index->Insert(Key8(1), Key8(2)).ok());
  ASSERT_TRUE(index->Update(Key8(1), "now a long value").ok());
  ASSERT_TRUE(index->Update(Key8(1), "and another long value").ok());
  ASSERT_TRUE(index->Update(Key8(1), Key8(3)).ok());
  model[Key8(1)] = Key8(3);
  EXPECT_GE(Counter(index.get(), "undo_txs"), 1u);
  const std::string big_key(kMaxKeySize, 'K');
  const std::string big_value(kMaxValueSize, 'V');
  ASSERT_TRUE(index->Put(big_key, big_value).ok());
  model[big_key] = big_value;
  EXPECT_TRUE(index->Insert(std::string(kMaxKeySize + 1, 'x'), "v").IsInvalidArgument());
  EXPECT_TRUE(index->Insert("k", std::string(kMaxValueSize + 1, 'x')).IsInvalidArgument());
  ExpectMatches(index.get(), model);
}

TEST(SmartHtTest, FourThreadsMixedOperations) {
  // In the paper's search order and with bucket_first=on (the filter read inside the
  // lock-free search, while rebuilds replace it).
  for (const char* bucket_first : {"off", "on"}) {
    SCOPED_TRACE(std::string("bucket_first=") + bucket_first);
    auto index = OpenOrDie(SmartOptions({{"head_buckets", "256"},
                                         {"expected_keys", "2048"},
                                         {"rebuild_deletes", "0.2"},
                                         {"bucket_first", bucket_first}}));
    ASSERT_NE(index, nullptr);
    constexpr int kThreads = 4;
    std::vector<Model> models(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(t + 1);
        Model& m = models[t];
        for (int n = 0; n < 6000; ++n) {
          const uint64_t id = (rng() % 1500) * kThreads + t;  // keys partitioned by thread
          const std::string k = id % 5 == 0 ? Bytes(id, 20, 'k') : Key8(id);
          const std::string v = Bytes(rng(), 8 + (rng() % 3) * 12, 'v');
          std::string got;
          switch (rng() % 4) {
            case 0: {
              const Status s = index->Insert(k, v);
              EXPECT_EQ(s.ok(), m.count(k) == 0) << s.ToString();
              m.emplace(k, v);
              break;
            }
            case 1:
              EXPECT_TRUE(index->Put(k, v).ok());
              m[k] = v;
              break;
            case 2: {
              const Status s = index->Delete(k);
              EXPECT_EQ(s.ok(), m.erase(k) == 1) << s.ToString();
              break;
            }
            default: {
              const Status s = index->Get(k, &got);
              auto it = m.find(k);
              EXPECT_EQ(s.ok(), it != m.end());
              if (s.ok() && it != m.end()) {
                EXPECT_EQ(got, it->second);
              }
            }
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    AsSmart(index.get())->WaitForBackgroundWork();
    Model all;
    for (const Model& m : models) all.insert(m.begin(), m.end());
    ExpectMatches(index.get(), all);
  }
}

TEST(SmartHtTest, SmallPoolsWorkAndHeadBucketsFollowTheCapacity) {
  {
    Options o = SmartOptions({}, 4ull << 20);  // the paper's 2^24 heads do not fit
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    EXPECT_LE(AsSmart(index.get())->head_buckets() * 64, (4ull << 20) / 4);
    ASSERT_TRUE(index->Insert("a", "b").ok());
  }
  {
    Options o = SmartOptions({}, 64ull << 20);
    o.initial_capacity = 30000;
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(AsSmart(index.get())->head_buckets(), 16384u);  // ceil2(30000 / 3)
  }
}

TEST(SmartHtTest, BadOptionsAreInvalidArgument) {
  std::unique_ptr<Index> index;
  EXPECT_TRUE(Open(SmartOptions({{"head_buckets", "1000"}}), &index).IsInvalidArgument());
  EXPECT_TRUE(Open(SmartOptions({{"head_buckets", "16"}}), &index).IsInvalidArgument());
  EXPECT_TRUE(Open(SmartOptions({{"fp_rate", "0.9"}}), &index).IsInvalidArgument());
  EXPECT_TRUE(Open(SmartOptions({{"no_such", "1"}}), &index).IsInvalidArgument());
  EXPECT_TRUE(Open(SmartOptions({{"head_buckets", "4194304"}}), &index).IsPoolFull())
      << "a 256 MiB head table in a 32 MiB pool";
}

}  // namespace
}  // namespace pmhash::engines
