#include "engines/wophi/wophi.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "util/hash.h"
#include "support/engine_tests.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

Wophi* AsWophi(Index* index) { return dynamic_cast<Wophi*>(index); }

Options WophiOptions(std::map<std::string, std::string> engine_options = {}) {
  return testing::OptionsFor("wophi", std::move(engine_options), 64ull << 20);
}

TEST(WophiTest, BadOptionsAreInvalidArgument) {
  std::unique_ptr<Index> index;
  Status s = Open(WophiOptions({{"max_load_factor", "lots"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = Open(WophiOptions({{"buckets", "0"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = Open(WophiOptions({{"group_size", "4"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("pab_buckets"), std::string::npos) << s.message();
}

TEST(WophiTest, OperationSemanticsAndStatuses) {
  auto index = OpenOrDie(WophiOptions());
  ASSERT_NE(AsWophi(index.get()), nullptr);
  const std::string k = Key8(1), v1 = Key8(100), v2 = Key8(200);
  EXPECT_TRUE(index->Insert(k, v1).ok());
  EXPECT_TRUE(index->Insert(k, v2).IsAlreadyExists());
  std::string got;
  ASSERT_TRUE(index->Get(k, &got).ok());
  EXPECT_EQ(got, v1);
  EXPECT_TRUE(index->Update(k, v2).ok());
  EXPECT_TRUE(index->Update(Key8(2), v1).IsNotFound());
  EXPECT_TRUE(index->Put(Key8(2), v1).ok());
  EXPECT_TRUE(index->Put(Key8(2), v2).ok());
  got = "unchanged";
  EXPECT_TRUE(index->Get(Key8(3), &got).IsNotFound());
  EXPECT_EQ(got, "unchanged");
  EXPECT_TRUE(index->Delete(k).ok());
  EXPECT_TRUE(index->Delete(k).IsNotFound());
  ExpectMatches(index.get(), {{Key8(2), v2}});
  EXPECT_TRUE(index->Insert(k, v1).ok());  // a cleared token frees the slot
  ExpectMatches(index.get(), {{Key8(2), v2}, {k, v1}});
}

TEST(WophiTest, FullChainsTakePreallocatedBucketsWithoutAllocating) {
  // One main bucket: every key shares its chain. 4 keys fill it; each further 4 keys take
  // one PAB bucket (Alg. 1 lines 27-33) and allocate nothing while the PAB is stocked.
  auto index = OpenOrDie(WophiOptions(
      {{"buckets", "1"}, {"resize", "off"}, {"pab_buckets", "64"}, {"pab_low", "1"}}));
  Wophi* w = AsWophi(index.get());
  Model model;
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    model[Key8(i)] = Key8(i);
  }
  EXPECT_EQ(w->expand_bucket_num(), 0u);
  EXPECT_EQ(w->pab_free(), 64u);
  const uint64_t pm_bytes = index->Stats().pm_bytes;
  for (uint64_t i = 4; i < 160; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i * 3)).ok());
    model[Key8(i)] = Key8(i * 3);
  }
  EXPECT_EQ(w->expand_bucket_num(), 39u);  // 160 keys in 40 buckets, 39 of them chained
  EXPECT_EQ(w->pab_free(), 64u - 39u);
  EXPECT_EQ(index->Stats().pm_bytes, pm_bytes) << "an insert allocated PM";
  EXPECT_EQ(w->pab_refills(), 0u);
  ExpectMatches(index.get(), model);
  // A delete clears a token only; the next insert reuses the slot, not a new bucket.
  ASSERT_TRUE(index->Delete(Key8(77)).ok());
  model.erase(Key8(77));
  ASSERT_TRUE(index->Insert(Key8(1000), Key8(1)).ok());
  model[Key8(1000)] = Key8(1);
  EXPECT_EQ(w->expand_bucket_num(), 39u);
  ExpectMatches(index.get(), model);
}

TEST(WophiTest, PersistSequencesMatchThePaper) {
  auto index = OpenOrDie(WophiOptions(
      {{"buckets", "1"}, {"resize", "off"}, {"pab_buckets", "64"}, {"pab_low", "1"}}));
  // Alg. 1 lines 9-17: flush the slot, fence, token, flush, fence.
  PersistCounters before = index->Stats().persist;
  ASSERT_TRUE(index->Insert(Key8(1), Key8(2)).ok());
  PersistCounters after = index->Stats().persist;
  EXPECT_EQ(after.flushes - before.flushes, 2u);
  EXPECT_EQ(after.fences - before.fences, 2u);
  for (uint64_t i = 2; i <= 4; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
  // Alg. 1 lines 27-33: tmp's first line (token and slot 0) flushed, fence; link, flush,
  // fence. No allocation, no more persists.
  before = index->Stats().persist;
  ASSERT_TRUE(index->Insert(Key8(5), Key8(5)).ok());
  after = index->Stats().persist;
  EXPECT_EQ(after.flushes - before.flushes, 2u);
  EXPECT_EQ(after.fences - before.fences, 2u);
  // Alg. 2 lines 10-12: token cleared, flush, fence.
  before = after;
  ASSERT_TRUE(index->Delete(Key8(3)).ok());
  after = index->Stats().persist;
  EXPECT_EQ(after.flushes - before.flushes, 1u);
  EXPECT_EQ(after.fences - before.fences, 1u);
  // Inline value update: one 8-byte store, one persist.
  before = after;
  ASSERT_TRUE(index->Update(Key8(5), Key8(9)).ok());
  after = index->Stats().persist;
  EXPECT_EQ(after.fences - before.fences, 1u);
}

TEST(WophiTest, PabIsRefilledInTheBackgroundBeforeItRunsOut) {
  // Blocks of 4 buckets, refilled when at most 1 is free: taking the last-but-one bucket
  // wakes the refill thread. Given the time (the wait below), it restocks the PAB before
  // the next take, so no insert ever refills on its own critical path.
  auto index = OpenOrDie(WophiOptions(
      {{"buckets", "1"}, {"resize", "off"}, {"pab_buckets", "4"}, {"pab_low", "1"}}));
  Wophi* w = AsWophi(index.get());
  Model model;
  for (uint64_t i = 0; i < 4 + 4 * 40; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    w->WaitForBackgroundWork();
    model[Key8(i)] = Key8(i);
  }
  EXPECT_EQ(w->expand_bucket_num(), 40u);
  // Refills at takes 3, 7, ..., 39 (each leaves 1 free): 4 + 10 * 4 buckets, 40 taken.
  EXPECT_EQ(w->pab_refills(), 10u);
  EXPECT_EQ(Counter(index.get(), "pab_sync_refills"), 0u);
  EXPECT_EQ(w->pab_free(), 4u);
  ExpectMatches(index.get(), model);
}

TEST(WophiTest, InsertsSucceedUntilThePoolIsFull) {
  // A small pool and no resize: inserts take PAB buckets and refill until the pool cannot
  // hold one more bucket; then ResourceExhausted, with every acknowledged key intact.
  Options o = WophiOptions({{"buckets", "2048"}, {"resize", "off"}});
  o.pool_size = 4ull << 20;
  auto index = OpenOrDie(o);
  Wophi* w = AsWophi(index.get());
  Model model;
  Status s;
  for (uint64_t i = 0;; ++i) {
    s = index->Insert(Key8(i), Key8(i));
    if (!s.ok()) break;
    model[Key8(i)] = Key8(i);
  }
  EXPECT_TRUE(s.IsPoolFull()) << s.ToString();
  w->WaitForBackgroundWork();
  EXPECT_EQ(w->pab_free(), 0u);
  // Most of the pool went into buckets (each holds 4 keys in 128 bytes).
  EXPECT_GT(model.size() * 128 / 4, o.pool_size / 2);
  ExpectMatches(index.get(), model);
  // A delete frees a slot that the next insert of the same chain reuses.
  const std::string victim = model.begin()->first;
  ASSERT_TRUE(index->Delete(victim).ok());
  model.erase(victim);
  std::string extra;
  const uint64_t home = Reduce(w->KeyHash(victim), w->main_buckets());
  for (uint64_t j = 1u << 30; extra.empty(); ++j) {
    if (Reduce(w->KeyHash(Key8(j)), w->main_buckets()) == home) extra = Key8(j);
  }
  ASSERT_TRUE(index->Insert(extra, Key8(7)).ok());
  model[extra] = Key8(7);
  ExpectMatches(index.get(), model);
}

TEST(WophiTest, ResizeUnderLoadKeepsChainsShort) {
  auto index = OpenOrDie(WophiOptions({{"buckets", "4"}, {"max_load_factor", "0.75"}}));
  Wophi* w = AsWophi(index.get());
  Model model;
  std::mt19937_64 rng(3);
  for (uint64_t i = 0; i < 6000; ++i) {
    const std::string k = i % 5 == 0 ? Bytes(i, 20, 'k') : Key8(i);
    const std::string v = i % 7 == 0 ? Bytes(i, 1 + rng() % 60, 'v') : Key8(rng());
    ASSERT_TRUE(index->Insert(k, v).ok());
    model[k] = v;
    if (i % 3 == 0) {  // reads and deletes interleaved with the resizes
      auto it = model.begin();
      std::advance(it, rng() % model.size());
      std::string got;
      ASSERT_TRUE(index->Get(it->first, &got).ok());
      EXPECT_EQ(got, it->second);
      if (i % 9 == 0) {
        ASSERT_TRUE(index->Delete(it->first).ok());
        model.erase(it);
      }
    }
  }
  EXPECT_GE(w->resizes(), 8u);
  EXPECT_GT(w->main_buckets(), 1000u);
  // The trigger is checked when a chain grows, so the load factor of the main buckets
  // stays near the option.
  const double lf = static_cast<double>(model.size()) / (4.0 * w->main_buckets());
  EXPECT_LT(lf, 0.9);
  ExpectMatches(index.get(), model);
}

TEST(WophiTest, ResizeOffKeepsTheMainBucketsAndChains) {
  auto index = OpenOrDie(WophiOptions({{"buckets", "4"}, {"resize", "off"}}));
  Wophi* w = AsWophi(index.get());
  Model model;
  for (uint64_t i = 0; i < 2000; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i + 1)).ok());
    model[Key8(i)] = Key8(i + 1);
  }
  EXPECT_EQ(w->main_buckets(), 4u);
  EXPECT_EQ(w->resizes(), 0u);
  EXPECT_GE(w->expand_bucket_num(), 2000u / 4 - 4);
  ExpectMatches(index.get(), model);
}

TEST(WophiTest, SixteenByteKeysAsInThePaper) {
  // RandomNum: 16-byte random keys (record form through the shared slot encoding).
  auto index = OpenOrDie(WophiOptions());
  Model model;
  std::mt19937_64 rng(16);
  for (int i = 0; i < 5000; ++i) {
    std::string k(16, '\0');
    const uint64_t a = rng(), b = rng();
    std::memcpy(k.data(), &a, 8);
    std::memcpy(k.data() + 8, &b, 8);
    ASSERT_TRUE(index->Insert(k, Key8(i)).ok());
    model[k] = Key8(i);
  }
  int n = 0;
  for (auto it = model.begin(); it != model.end();) {
    if (n++ % 3 == 0) {
      ASSERT_TRUE(index->Delete(it->first).ok());
      it = model.erase(it);
    } else {
      ASSERT_TRUE(index->Update(it->first, Key8(n)).ok());
      it->second = Key8(n);
      ++it;
    }
  }
  ExpectMatches(index.get(), model);
}

TEST(WophiTest, LongKeysValuesAndFormChanges) {
  auto index = OpenOrDie(WophiOptions({{"buckets", "2"}}));
  Model model = {
      {"", "empty key"},
      {"empty value", ""},
      {std::string(1000, 'k'), std::string(100000, 'v')},
      {std::string("a\0b", 3), std::string("\0\0", 2)},
      {Key8(9), std::string(9, 'x')},
  };
  for (const auto& [k, v] : model) ASSERT_TRUE(index->Insert(k, v).ok());
  const std::string k = Key8(42);
  ASSERT_TRUE(index->Insert(k, Key8(1)).ok());
  ASSERT_TRUE(index->Update(k, "a value that is not 8 bytes").ok());  // inline -> record
  EXPECT_EQ(Counter(index.get(), "undo_txs"), 1u);
  ASSERT_TRUE(index->Update(k, Key8(2)).ok());  // stays a record slot
  model[k] = Key8(2);
  ExpectMatches(index.get(), model);
  EXPECT_TRUE(index->Insert(std::string(kMaxKeySize + 1, 'k'), "v").IsInvalidArgument());
  EXPECT_TRUE(index->Put("k", std::string(kMaxValueSize + 1, 'v')).IsInvalidArgument());
  ExpectMatches(index.get(), model);
}

TEST(WophiTest, ReopenAfterCleanCloseAndAfterAbandon) {
  TempDir dir("wophi");
  for (const bool clean : {true, false}) {
    SCOPED_TRACE(clean ? "clean close" : "abandon");
    Options o = WophiOptions({{"buckets", "8"}, {"pab_buckets", "16"}});
    o.path = dir.File(clean ? "clean.pool" : "crash.pool");
    Model model;
    uint64_t main_buckets = 0, expanded = 0, pab_free = 0;
    {
      auto index = OpenOrDie(o);
      for (uint64_t i = 0; i < 3000; ++i) {
        const std::string k = i % 4 == 0 ? Bytes(i, 16, 'r') : Key8(i);
        const std::string v = i % 6 == 0 ? Bytes(i, 30, 'v') : Key8(i * 5);
        ASSERT_TRUE(index->Insert(k, v).ok());
        model[k] = v;
      }
      for (uint64_t i = 0; i < 3000; i += 5) {
        const std::string k = i % 4 == 0 ? Bytes(i, 16, 'r') : Key8(i);
        ASSERT_TRUE(index->Delete(k).ok());
        model.erase(k);
      }
      Wophi* w = AsWophi(index.get());
      ASSERT_GT(w->resizes(), 0u);
      ASSERT_GT(w->expand_bucket_num(), 0u);
      main_buckets = w->main_buckets();
      expanded = w->expand_bucket_num();
      pab_free = w->pab_free();
      if (clean) {
        ASSERT_TRUE(index->Close().ok());
      } else {
        dynamic_cast<Engine*>(index.get())->Abandon();
      }
    }
    auto index = OpenOrDie(o);
    Wophi* w = AsWophi(index.get());
    EXPECT_EQ(index->Stats().recovered, !clean);
    EXPECT_EQ(w->main_buckets(), main_buckets);
    EXPECT_EQ(w->expand_bucket_num(), expanded);
    EXPECT_GE(w->pab_free(), pab_free);  // recovery may refill; never loses a bucket
    ExpectMatches(index.get(), model);
    // Keeps working: inserts that take PAB buckets and grow again.
    for (uint64_t i = 10000; i < 12000; ++i) {
      ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
      model[Key8(i)] = Key8(i);
    }
    ExpectMatches(index.get(), model);
    ASSERT_TRUE(index->Close().ok());
  }
}

TEST(WophiTest, DamagedChainPointerIsCorruptionNotACrash) {
  // A crashed pool whose chain links a wild offset: recovery (which walks every chain)
  // must refuse it with a clear Corruption.
  TempDir dir("wophi");
  Options o = WophiOptions({{"buckets", "2"}, {"resize", "off"}, {"pab_buckets", "16"}});
  o.path = dir.File("damaged.pool");
  {
    auto index = OpenOrDie(o);
    for (uint64_t i = 0; i < 40; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    dynamic_cast<Engine*>(index.get())->Abandon();
  }
  {
    // Patch mb[0].next in the file (root at pm::kRootOffset; WophiRoot.table at +16).
    std::FILE* f = std::fopen(o.path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    uint64_t table = 0;
    ASSERT_EQ(std::fseek(f, pm::kRootOffset + offsetof(EngineRoot, table), SEEK_SET), 0);
    ASSERT_EQ(std::fread(&table, 8, 1, f), 1u);
    ASSERT_TRUE(UnsealWord(table, pm::kRootOffset + offsetof(EngineRoot, table), &table));
    const long next_at = static_cast<long>(table + sizeof(WophiTableHeader) +
                                           offsetof(WophiBucket, next));
    uint64_t next = 0;
    ASSERT_EQ(std::fseek(f, next_at, SEEK_SET), 0);
    ASSERT_EQ(std::fread(&next, 8, 1, f), 1u);
    ASSERT_NE(next, 0u) << "20 keys per main bucket must have chained";
    next += 8;  // inside a bucket, not at its start
    ASSERT_EQ(std::fseek(f, next_at, SEEK_SET), 0);
    ASSERT_EQ(std::fwrite(&next, 8, 1, f), 1u);
    std::fclose(f);
  }
  std::unique_ptr<Index> index;
  Status s = Open(o, &index);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("wophi"), std::string::npos) << s.message();
}

TEST(WophiTest, FourThreadsWithResizes) {
  // Each thread owns a key range (exact model) and reads the others' while the table grows
  // from 4 main buckets.
  auto index = OpenOrDie(WophiOptions({{"buckets", "4"}, {"pab_buckets", "8"}}));
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 3000;
  std::atomic<int> failures{0};
  std::vector<Model> models(kThreads);
  auto work = [&](int t) {
    std::mt19937_64 rng(t);
    Model& m = models[t];
    for (uint64_t i = 0; i < kPerThread; ++i) {
      const uint64_t id = t * 1000000 + i;
      const std::string k = i % 3 == 0 ? Bytes(id, 16, 't') : Key8(id);
      const std::string v = Key8(rng());
      if (!index->Insert(k, v).ok()) ++failures;
      m[k] = v;
      if (i % 4 == 0) {
        std::string got;
        const uint64_t other = ((t + 1) % kThreads) * 1000000 + rng() % (i + 1);
        Status s = index->Get(Key8(other), &got);
        if (!s.ok() && !s.IsNotFound()) ++failures;
      }
      if (i % 10 == 5) {
        if (!index->Delete(k).ok()) ++failures;
        m.erase(k);
      }
      if (i % 10 == 7) {
        const std::string nv = Bytes(i, 12, 'u');
        if (!index->Put(k, nv).ok()) ++failures;
        m[k] = nv;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  Model all;
  for (const Model& m : models) all.insert(m.begin(), m.end());
  EXPECT_GT(AsWophi(index.get())->resizes(), 5u);
  ExpectMatches(index.get(), all);
}

TEST(WophiTest, ForEachVisitorMayInsert) {
  // An insert from a visitor that would grow the table defers the resize instead of
  // waiting for the visitor's own lock.
  auto index = OpenOrDie(WophiOptions({{"buckets", "1"}, {"max_load_factor", "0.5"}}));
  Model model;
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    model[Key8(i)] = Key8(i);
  }
  uint64_t next = 100;
  ASSERT_TRUE(index
                  ->ForEach([&](std::string_view, std::string_view) {
                    EXPECT_TRUE(index->Insert(Key8(next), Key8(next)).ok());
                    model[Key8(next)] = Key8(next);
                    ++next;
                    return true;
                  })
                  .ok());
  ExpectMatches(index.get(), model);
}

}  // namespace
}  // namespace pmhash::engines
