// The conformance suite: the Index contract, over every registered engine plus the
// test-only `test-tiny` (docs/testing.md). Every test ends by checking the engine's own
// invariants (Engine::CheckInvariants) besides the contract.
#include <gtest/gtest.h>
#include <unistd.h>

// GCC 12 warns falsely on "literal" + std::string (GCC bug 105651).
#pragma GCC diagnostic ignored "-Wrestrict"

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "engines/engine.h"
#include "support/engine_tests.h"
#include "support/harness.h"
#include "support/heap_counter.h"

namespace pmhash::testing {
namespace {

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { spec_ = FindSpec(GetParam()); }
  // A fresh DRAM index; `pool` 0: the engine's TestProfile::conformance_pool_size.
  std::unique_ptr<Index> Fresh(uint64_t initial_capacity = 0, uint64_t pool = 0,
                               std::map<std::string, std::string> engine_options = {}) {
    Options o;
    o.initial_capacity = initial_capacity;
    o.pool_size = pool != 0 ? pool : spec_.test.conformance_pool_size;
    o.engine_options = std::move(engine_options);
    std::unique_ptr<Index> index;
    Status s = OpenDram(spec_, o, &index);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return index;
  }
  // The model's contents exactly (CheckIndex) and the engine's invariants.
  static void ExpectMatches(Index* index, const Model& model) {
    EXPECT_EQ(CheckIndex(index, model, nullptr), "");
    EXPECT_EQ(CheckInvariantsOf(index), "");
  }
  // One run of ThreadsAgainstAModel: the threads' ops come from `seed`.
  void ThreadsAgainstAModel(uint64_t seed);
  EngineSpec spec_;
};

TEST_P(Conformance, StatusesOfEveryCall) {
  auto index = Fresh();
  ASSERT_NE(index, nullptr);
  std::string v = "untouched";
  EXPECT_TRUE(index->Get("key00001", &v).IsNotFound());
  EXPECT_EQ(v, "untouched") << "a NotFound Get must leave *value unchanged";
  EXPECT_TRUE(index->Update("key00001", "v").IsNotFound());
  EXPECT_TRUE(index->Delete("key00001").IsNotFound());
  EXPECT_EQ(index->Count(), 0u);
  ASSERT_TRUE(index->Insert("key00001", "value001").ok());
  EXPECT_TRUE(index->Insert("key00001", "other").IsAlreadyExists());
  ASSERT_TRUE(index->Get("key00001", &v).ok());
  EXPECT_EQ(v, "value001") << "a refused Insert must not change the value";
  ASSERT_TRUE(index->Update("key00001", "value002").ok());
  ASSERT_TRUE(index->Get("key00001", &v).ok());
  EXPECT_EQ(v, "value002");
  ASSERT_TRUE(index->Put("key00002", "fresh").ok());  // upsert: insert
  ASSERT_TRUE(index->Put("key00002", "again").ok());  // upsert: update
  ASSERT_TRUE(index->Get("key00002", &v).ok());
  EXPECT_EQ(v, "again");
  EXPECT_EQ(index->Count(), 2u);
  ASSERT_TRUE(index->Delete("key00001").ok());
  EXPECT_TRUE(index->Delete("key00001").IsNotFound());
  EXPECT_TRUE(index->Get("key00001", &v).IsNotFound());
  EXPECT_EQ(index->Count(), 1u);
  ExpectMatches(index.get(), {{"key00002", "again"}});
}

TEST_P(Conformance, GetsOfInlineKeysAllocateNothing) {
  // The hot path: a Get of an 8-byte key with an 8-byte value, present or absent, makes
  // no heap allocation (the Status of NotFound is static; the value fits the string's
  // inline buffer). Only registered engines are held to it.
  if (spec_.test_only) GTEST_SKIP() << "test-only engine";
  auto index = Fresh();
  ASSERT_NE(index, nullptr);
  constexpr uint64_t kKeys = 2000;
  std::vector<std::string> present, absent;
  for (uint64_t i = 0; i < kKeys; ++i) {
    present.push_back(Key8(i));
    absent.push_back(Key8(1'000'000 + i));
    ASSERT_TRUE(index->Insert(present.back(), Key8(i * 3)).ok());
  }
  WaitForBackgroundWork(index.get());
  std::string v;
  // A thread's first call may register it (counter slots, reader slots): not measured.
  ASSERT_TRUE(index->Get(present[0], &v).ok());
  ASSERT_TRUE(index->Get(absent[0], &v).IsNotFound());
  size_t found = 0, not_found = 0;
  const size_t allocations = HeapAllocationsOf([&] {
    for (uint64_t i = 0; i < kKeys; ++i) {
      found += index->Get(present[i], &v).ok() && v.size() == 8;
      not_found += index->Get(absent[i], &v).IsNotFound();
    }
  });
  EXPECT_EQ(found, kKeys);
  EXPECT_EQ(not_found, kKeys);
  EXPECT_EQ(allocations, 0u);
  // The counter counts this thread's allocations (a control for the zero above).
  EXPECT_GT(HeapAllocationsOf([&] { v = std::string(64, 'x'); }), 0u);
}

TEST_P(Conformance, MultiGetMatchesGet) {
  auto index = Fresh();
  ASSERT_TRUE(index->Insert("a", "1").ok());
  ASSERT_TRUE(index->Insert("bbbbbbbb", "22222222").ok());
  std::vector<std::string_view> keys = {"a", "missing", "bbbbbbbb"};
  std::vector<std::string> values(3);
  std::vector<Status> statuses(3);
  index->MultiGet(keys, values, statuses);
  EXPECT_TRUE(statuses[0].ok());
  EXPECT_EQ(values[0], "1");
  EXPECT_TRUE(statuses[1].IsNotFound());
  EXPECT_TRUE(statuses[2].ok());
  EXPECT_EQ(values[2], "22222222");
}

// MultiGet (pipelined where the engine prefetches) answers every key as Get does, at
// every pipeline depth, for batches shorter and longer than the depth, with duplicates,
// absent keys, short, inline, long and empty keys, and an overlong key in the middle
// (InvalidArgument for it alone). A NotFound leaves its value untouched.
TEST_P(Conformance, MultiGetAgreesWithGetAtEveryDepth) {
  for (const char* depth : {"1", "3", "8", "64"}) {
    SCOPED_TRACE(std::string("multiget_depth=") + depth);
    auto index = Fresh(16, 0, {{"multiget_depth", depth}});
    ASSERT_NE(index, nullptr);
    std::vector<std::string> stored;
    for (uint64_t i = 0; i < 300; ++i) {
      std::string k = i % 3 == 0   ? std::string(reinterpret_cast<const char*>(&i), 8)
                      : i % 3 == 1 ? "key-" + std::to_string(i)
                                   : std::string(40, 'L') + std::to_string(i);
      const std::string v = i % 2 ? std::string(8, static_cast<char>('a' + i % 26))
                                  : "value " + std::to_string(i);
      ASSERT_TRUE(index->Insert(k, v).ok());
      stored.push_back(std::move(k));
    }
    ASSERT_TRUE(index->Insert("", "empty key").ok());
    const std::string overlong(kMaxKeySize + 1, 'x');
    std::vector<std::string> pool = stored;
    for (int i = 0; i < 50; ++i) pool.push_back("absent-" + std::to_string(i));
    pool.push_back("");
    std::mt19937_64 rng(7);
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{64}, size_t{65},
                     size_t{500}}) {
      std::vector<std::string> owned;
      for (size_t i = 0; i < n; ++i) owned.push_back(pool[rng() % pool.size()]);
      if (n >= 2) owned[n / 2] = owned[0];  // a duplicate
      if (n >= 7) owned[5] = overlong;
      std::vector<std::string_view> keys(owned.begin(), owned.end());
      std::vector<std::string> values(n, "untouched");
      std::vector<Status> statuses(n);
      index->MultiGet(keys, values, statuses);
      for (size_t i = 0; i < n; ++i) {
        std::string want = "untouched";
        const Status s = index->Get(keys[i], &want);
        EXPECT_EQ(statuses[i].code(), s.code())
            << "batch of " << n << ", key #" << i << " " << Printable(keys[i]);
        EXPECT_EQ(values[i], want) << "batch of " << n << ", key #" << i;
      }
      if (n >= 7) {
        EXPECT_TRUE(statuses[5].IsInvalidArgument());
      }
    }
    EXPECT_EQ(CheckInvariantsOf(index.get()), "");
  }
}

// The registry describes the engine with data, and Open holds the engine to it: every
// declared option (the engine's, resize, the common ones) accepts its default given
// explicitly and refuses garbage and values just out of range with an InvalidArgument
// naming it; an unknown option is refused listing every declared name.
TEST_P(Conformance, DeclaredOptionsAcceptTheirDefaultsAndRefuseGarbage) {
  ASSERT_NE(spec_.info, nullptr);
  const std::vector<engines::OptionSpec> declared =
      engines::DeclaredOptions(*spec_.info, /*with_common=*/true);
  auto open = [&](std::map<std::string, std::string> engine_options) {
    Options o;
    o.pool_size = spec_.test.conformance_pool_size;
    o.initial_capacity = 16;
    o.engine_options = std::move(engine_options);
    std::unique_ptr<Index> index;
    return OpenDram(spec_, o, &index);
  };
  for (const engines::OptionSpec& d : declared) {
    SCOPED_TRACE(d.name);
    if (d.has_default) {
      const Status s = open({{d.name, d.DefaultText()}});
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    std::vector<std::string> garbage = {"", "x", " 1", "1 ", "0x10", "on off", "1e999999"};
    if (d.type == engines::OptionSpec::Type::kUint) {
      garbage.push_back("-1");
      garbage.push_back("18446744073709551616");  // 2^64
      if (d.uint_min > 0) garbage.push_back(std::to_string(d.uint_min - 1));
      if (d.uint_max < UINT64_MAX) garbage.push_back(std::to_string(d.uint_max + 1));
    } else if (d.type == engines::OptionSpec::Type::kDouble) {
      garbage.push_back("nan");
      garbage.push_back(std::to_string(d.double_max * 2 + 1));
      garbage.push_back(std::to_string(d.double_min - 1));
    } else {
      garbage.push_back("2");
      garbage.push_back("onn");
    }
    for (const std::string& bad : garbage) {
      const Status s = open({{d.name, bad}});
      EXPECT_TRUE(s.IsInvalidArgument()) << "'" << bad << "': " << s.ToString();
      EXPECT_NE(s.message().find(d.name), std::string::npos) << s.ToString();
    }
  }
  const Status s = open({{"no_such_option", "1"}});
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  for (const engines::OptionSpec& d : declared) {
    EXPECT_NE(s.message().find(d.name), std::string::npos) << d.name << ": " << s.ToString();
  }
  // The capabilities agree with the options: resize=off is accepted exactly when the
  // engine says it has the switch.
  const Status off = open({{"resize", "off"}});
  EXPECT_EQ(off.ok(), spec_.info->capabilities.resize_switch) << off.ToString();
}

// A persistence mode the engine does not declare is refused at Open.
TEST_P(Conformance, OpenRefusesAPersistModeTheEngineDoesNotSupport) {
  ASSERT_NE(spec_.info, nullptr);
  for (PersistMode m : {PersistMode::kAdr, PersistMode::kEadr, PersistMode::kNone}) {
    Options o;
    o.pool_size = spec_.test.conformance_pool_size;
    o.persist = m;
    std::unique_ptr<Index> index;
    const Status s = OpenDram(spec_, o, &index);
    const auto& modes = spec_.info->capabilities.persist_modes;
    const bool supported = std::find(modes.begin(), modes.end(), m) != modes.end();
    EXPECT_EQ(s.ok(), supported) << PersistModeName(m) << ": " << s.ToString();
  }
}

TEST_P(Conformance, MultiGetDepthOutOfRangeIsInvalidArgument) {
  for (const char* bad : {"0", "65", "-1", "eight", ""}) {
    Options o;
    o.pool_size = spec_.test.conformance_pool_size;
    o.engine_options = {{"multiget_depth", bad}};
    std::unique_ptr<Index> index;
    const Status s = OpenDram(spec_, o, &index);
    EXPECT_TRUE(s.IsInvalidArgument()) << bad << ": " << s.ToString();
    EXPECT_NE(s.message().find("multiget_depth"), std::string::npos) << s.ToString();
  }
}

TEST_P(Conformance, KeysAndValuesAtTheirLimits) {
  auto index = Fresh(0, std::max<uint64_t>(32ull << 20, spec_.test.conformance_pool_size));
  Model model;
  const std::vector<size_t> key_sizes = {0, 1, 7, 8, 9, 64, 1000, kMaxKeySize};
  const std::vector<size_t> value_sizes = {0, 1, 8, 9, 500, 70000, kMaxValueSize};
  for (size_t k : key_sizes) {
    for (size_t vs : value_sizes) {
      if (k >= 1000 && vs >= 70000) continue;  // keep the pool small
      std::string key(k, 'k');
      if (k >= 2) key[1] = static_cast<char>('a' + model.size() % 26), key[k - 1] = 'z';
      if (model.count(key)) key += std::string(1, static_cast<char>(model.size()));
      std::string value(vs, static_cast<char>('A' + vs % 26));
      Status s = index->Insert(key, value);
      ASSERT_TRUE(s.ok()) << "key " << key.size() << " B, value " << vs << " B: " << s.ToString();
      model[key] = value;
    }
  }
  ExpectMatches(index.get(), model);
  // Over the limits: InvalidArgument, and nothing changes.
  EXPECT_TRUE(index->Insert(std::string(kMaxKeySize + 1, 'x'), "v").IsInvalidArgument());
  EXPECT_TRUE(index->Insert("x", std::string(kMaxValueSize + 1, 'v')).IsInvalidArgument());
  EXPECT_TRUE(index->Put("x", std::string(kMaxValueSize + 1, 'v')).IsInvalidArgument());
  const std::string some_key = model.begin()->first;
  EXPECT_TRUE(index->Update(some_key, std::string(kMaxValueSize + 1, 'v')).IsInvalidArgument());
  ExpectMatches(index.get(), model);
  // Inline <-> out-of-line transitions by update.
  ASSERT_TRUE(index->Put("inline01", "8bytes!!").ok());
  ASSERT_TRUE(index->Update("inline01", std::string(300, 'L')).ok());
  ASSERT_TRUE(index->Update("inline01", "8bytes??").ok());
  model["inline01"] = "8bytes??";
  ExpectMatches(index.get(), model);
}

TEST_P(Conformance, EmptyAndBinaryKeys) {
  auto index = Fresh();
  Model model;
  const std::vector<std::string> keys = {
      "", std::string("\0", 1), std::string("\0\0", 2), std::string("a\0b", 3),
      std::string("a\0c", 3), std::string("\0\0\0\0\0\0\0\0", 8), std::string("\xff\0\xfe", 3)};
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string value = i % 2 ? std::string("\0val\0", 5) : std::string(8, '\0');
    ASSERT_TRUE(index->Insert(keys[i], value).ok()) << Printable(keys[i]);
    model[keys[i]] = value;
  }
  ExpectMatches(index.get(), model);
  ASSERT_TRUE(index->Delete(std::string("a\0b", 3)).ok());
  model.erase(std::string("a\0b", 3));
  std::string v;
  EXPECT_TRUE(index->Get(std::string("a\0c", 3), &v).ok());
  EXPECT_TRUE(index->Get("a", &v).IsNotFound()) << "a key must not match a prefix of another";
  ExpectMatches(index.get(), model);
}

TEST_P(Conformance, RandomOperationsAgreeWithAModel) {
  for (uint64_t seed : TestSeeds({GetParam().size(), 1001})) {
    SCOPED_TRACE(SeedNote(seed));
    auto index = Fresh(16);
    ASSERT_NE(index, nullptr);
    Model model;
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 3000; ++i) {
      Op op;
      op.kind = static_cast<Op::Kind>(rng() % 4);
      const uint64_t k = rng() % 400;
      op.key = k % 3 ? std::string(reinterpret_cast<const char*>(&k), 8)
                     : "key" + std::to_string(k);
      op.value = std::string(rng() % 3 ? 8 : rng() % 200, static_cast<char>('a' + i % 26));
      Status want = ApplyToModel(op, &model);
      Status got = ApplyToIndex(op, index.get());
      ASSERT_EQ(got.code(), want.code())
          << Describe(op) << " at step " << i << ": " << got.ToString();
    }
    ExpectMatches(index.get(), model);
  }
}

TEST_P(Conformance, ResizeUnderLoad) {
  auto index = Fresh(16);
  Model model;
  for (uint64_t i = 0; i < 6000; ++i) {
    const std::string k(reinterpret_cast<const char*>(&i), 8);
    ASSERT_TRUE(index->Insert(k, k).ok()) << "insert #" << i;
    model[k] = k;
  }
  ExpectMatches(index.get(), model);
  IndexStats st = index->Stats();
  EXPECT_EQ(st.count, 6000u);
  EXPECT_GE(st.key_slots, 6000u) << "the table must have grown";
  for (uint64_t i = 0; i < 6000; i += 2) {
    const std::string k(reinterpret_cast<const char*>(&i), 8);
    ASSERT_TRUE(index->Delete(k).ok());
    model.erase(k);
  }
  for (uint64_t i = 6000; i < 7000; ++i) {
    const std::string k = "long-key-" + std::to_string(i);
    ASSERT_TRUE(index->Insert(k, std::string(40, 'v')).ok());
    model[k] = std::string(40, 'v');
  }
  ExpectMatches(index.get(), model);
}

TEST_P(Conformance, ReopenAfterCleanClose) {
  const std::string dir = ::testing::TempDir() + "pmhash_conf_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + GtestName(GetParam()) + ".pool";
  std::filesystem::remove(path);
  Options o;
  o.pool_size = spec_.test.conformance_pool_size;
  o.initial_capacity = 16;
  Model model;
  {
    std::unique_ptr<Index> index;
    ASSERT_TRUE(OpenFile(spec_, path, o, &index).ok());
    for (int i = 0; i < 500; ++i) {
      const std::string k = "k" + std::to_string(i), v = std::string(i % 3 ? 8 : 30, 'a' + i % 26);
      ASSERT_TRUE(index->Insert(k, v).ok());
      model[k] = v;
    }
    ASSERT_TRUE(index->Close().ok());
  }
  {
    std::unique_ptr<Index> index;
    Status s = OpenFile(spec_, path, o, &index);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_FALSE(index->Stats().recovered) << "a clean close must not need recovery";
    ExpectMatches(index.get(), model);
    ASSERT_TRUE(index->Insert("after-reopen", "x").ok());
    model["after-reopen"] = "x";
    ASSERT_TRUE(index->Close().ok());
  }
  {
    std::unique_ptr<Index> index;
    ASSERT_TRUE(OpenFile(spec_, path, o, &index).ok());
    ExpectMatches(index.get(), model);
  }
  std::filesystem::remove_all(dir);
}

// 4 threads: each owns a key range (exact per-thread model, checked by Get after each
// op) and reads the others' keys; all Put to a few shared keys. Every value is distinct
// per write, so a value read must be one a thread wrote to that key (a torn value, or
// one of another key, is not). No lost or phantom keys at the end.
TEST_P(Conformance, ThreadsAgainstAModel) {
  for (uint64_t seed : TestSeeds({0})) {
    SCOPED_TRACE(SeedNote(seed));
    ThreadsAgainstAModel(seed);
  }
}

void Conformance::ThreadsAgainstAModel(uint64_t seed) {
  auto index = Fresh(16);
  ASSERT_NE(index, nullptr);
  constexpr int kThreads = 4, kOps = 1500;
  std::vector<Model> models(kThreads);
  // Every value each thread wrote, by key (read by other threads only after the join).
  std::vector<std::map<std::string, std::set<std::string>>> written(kThreads);
  struct Read {
    std::string key, value;
  };
  std::vector<std::vector<Read>> reads(kThreads);
  std::atomic<int> failures{0};
  std::mutex errors_mu;
  std::vector<std::string> errors;
  auto error = [&](const std::string& e) {
    ++failures;
    std::lock_guard<std::mutex> l(errors_mu);
    if (errors.size() < 5) errors.push_back(e);
  };
  auto value_for = [](int t, uint64_t k, int i, size_t len) {
    std::string v(len, '\0');
    uint64_t x = (uint64_t{static_cast<uint32_t>(t)} << 48) ^ (k << 24) ^ static_cast<uint64_t>(i);
    for (size_t j = 0; j < len; ++j) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      v[j] = static_cast<char>(x >> 56);
    }
    return v;
  };
  auto work = [&](int t) {
    std::mt19937_64 rng(seed * 100 + t);
    std::string v;
    for (int i = 0; i < kOps; ++i) {
      const uint64_t k = rng() % 200;
      Op op;
      op.kind = static_cast<Op::Kind>(rng() % 4);
      op.key = "t" + std::to_string(t) + "-" + std::to_string(k);
      op.value = value_for(t, k, i, rng() % 2 ? 8 : 20);
      if (op.kind != Op::kDelete) written[t][op.key].insert(op.value);
      Status want = ApplyToModel(op, &models[t]);
      Status got = ApplyToIndex(op, index.get());
      if (got.code() != want.code()) error(Describe(op) + " returned " + got.ToString());
      // Only this thread writes its keys: Get must agree with its model exactly.
      auto m = models[t].find(op.key);
      Status g = index->Get(op.key, &v);
      if (m == models[t].end() ? !g.IsNotFound() : !(g.ok() && v == m->second)) {
        error("Get(" + op.key + ") right after " + Describe(op) + " gave " + g.ToString());
      }
      const std::string other = "t" + std::to_string(rng() % kThreads) + "-" + std::to_string(k);
      if (index->Get(other, &v).ok()) reads[t].push_back({other, v});
      const std::string shared = "shared-" + std::to_string(rng() % 4);
      if (!index->Put(shared, "by-thread-" + std::to_string(t)).ok()) error("Put(" + shared + ")");
      if (index->Get(shared, &v).ok() &&
          !(v.size() == 11 && v.rfind("by-thread-", 0) == 0 && v[10] >= '0' &&
            v[10] < '0' + kThreads)) {
        error("Get(" + shared + ") returned " + Printable(v) + ", which no thread wrote");
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << (errors.empty() ? "" : errors[0]);
  uint64_t checked = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (const Read& r : reads[t]) {
      const int owner = std::atoi(r.key.c_str() + 1);
      auto it = written[owner].find(r.key);
      ++checked;
      if (it == written[owner].end() || it->second.count(r.value) == 0) {
        ADD_FAILURE() << "thread " << t << " read " << Printable(r.value) << " from "
                      << r.key << ", a value no thread wrote to it (torn or misplaced)";
        break;
      }
    }
  }
  EXPECT_GT(checked, 0u);
  Model seen;
  ASSERT_EQ(Snapshot(*index, &seen), "");
  EXPECT_EQ(index->Count(), seen.size());
  Model expect;
  for (const Model& m : models) expect.insert(m.begin(), m.end());
  for (int s = 0; s < 4; ++s) {
    auto it = seen.find("shared-" + std::to_string(s));
    ASSERT_NE(it, seen.end());
    EXPECT_EQ(it->second.rfind("by-thread-", 0), 0u);
    expect[it->first] = it->second;
  }
  ExpectMatches(index.get(), expect);
}

// A key longer than kMaxKeySize is InvalidArgument for every call that takes a key (not
// NotFound: the caller passed something no index can hold), and changes nothing.
TEST_P(Conformance, OverlongKeyIsInvalidArgumentForEveryCall) {
  auto index = Fresh();
  ASSERT_TRUE(index->Insert("present1", "value001").ok());
  const std::string big(kMaxKeySize + 1, 'k');
  std::string v = "untouched";
  Status s = index->Get(big, &v);
  EXPECT_TRUE(s.IsInvalidArgument()) << "Get: " << s.ToString();
  EXPECT_EQ(v, "untouched");
  s = index->Delete(big);
  EXPECT_TRUE(s.IsInvalidArgument()) << "Delete: " << s.ToString();
  s = index->Update(big, "v");
  EXPECT_TRUE(s.IsInvalidArgument()) << "Update: " << s.ToString();
  s = index->Insert(big, "v");
  EXPECT_TRUE(s.IsInvalidArgument()) << "Insert: " << s.ToString();
  s = index->Put(big, "v");
  EXPECT_TRUE(s.IsInvalidArgument()) << "Put: " << s.ToString();
  ExpectMatches(index.get(), {{"present1", "value001"}});
}

// Readers against writers that update values in place, add and delete keys (cells are
// reused; linear shifts keys back) and so grow the table, while wophi, smartht, linear and
// group search with no lock, validated by a version. Each value carries its key's tag in
// its upper half, so a value a search returns must be one written to that key: a torn
// read (the key word of one key, the value word of the key that took the cell over) is
// caught, and so is a key present throughout that a search misses. The readers also read
// the keys the writers are adding and deleting right now. Six threads on two cores, so a
// search is now and then preempted half-way through. The windows a missing validation
// opens are a few instructions wide, so this race rarely meets one (a linear search with
// its validation removed passed it 8 times out of 8): the validation itself is tested
// deterministically by OptimisticRead.ATryAWriterOverlappedIsNeverReturned.
TEST_P(Conformance, SearchesDuringWritesAndGrowthSeeNoTornValueAndMissNoKey) {
  auto index = Fresh(16);
  ASSERT_NE(index, nullptr);
  const auto tag = [](uint64_t i) { return static_cast<uint32_t>((i * 0x9E3779B97F4A7C15ull) >> 32); };
  const auto value_of = [&](uint64_t i, uint32_t n) {  // key i's value number n
    const uint64_t w = (uint64_t{tag(i)} << 32) | n;
    return std::string(reinterpret_cast<const char*>(&w), 8);
  };
  const auto is_value_of = [&](const std::string& got, uint64_t i) {
    uint64_t w = 0;
    if (got.size() != 8) return false;
    std::memcpy(&w, got.data(), 8);
    return static_cast<uint32_t>(w >> 32) == tag(i);
  };
  const auto key = [](uint64_t i) { return std::string(reinterpret_cast<const char*>(&i), 8); };
  constexpr uint64_t kStable = 500;
  constexpr int kWriters = 2, kReaders = 4;
  constexpr uint32_t kWrites = 10000;
  const auto churn_key = [](int w, uint32_t n) { return 1'000'000 + uint64_t(w) * 100'000 + n; };
  for (uint64_t i = 0; i < kStable; ++i) ASSERT_TRUE(index->Insert(key(i), value_of(i, 0)).ok());
  const uint64_t slots_before = index->Stats().key_slots;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> bad{0}, missing{0}, reads{0}, failures{0}, churn_found{0};
  std::atomic<uint32_t> progress[kWriters] = {};
  std::vector<std::thread> writers, readers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937_64 rng(w + 10);
      while (reads.load() < 200) std::this_thread::yield();  // the readers are at it
      for (uint32_t n = 1; n < kWrites; ++n) {
        const uint64_t s = rng() % kStable;
        if (!index->Put(key(s), value_of(s, n)).ok()) ++failures;
        const uint64_t c = churn_key(w, n);
        if (!index->Insert(key(c), value_of(c, n)).ok()) ++failures;
        // An older key, in the middle of its run of cells now: linear shifts the keys
        // after it back, stable ones among them.
        if (n % 3 == 0 && n > 64 && !index->Delete(key(churn_key(w, n - 64))).ok()) ++failures;
        progress[w].store(n, std::memory_order_relaxed);
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(r + 20);
      std::string got;
      while (!done.load()) {
        const uint64_t s = rng() % kStable;
        const Status st = index->Get(key(s), &got);
        if (!st.ok()) {
          ++missing;
        } else if (!is_value_of(got, s)) {
          ++bad;
        }
        // A key a writer added or deleted a moment ago: absent or its own value.
        const int w = static_cast<int>(rng() % kWriters);
        const uint32_t at = progress[w].load(std::memory_order_relaxed);
        const uint32_t back = static_cast<uint32_t>(rng() % 8);
        if (at > back) {
          const uint64_t c = churn_key(w, at - back);
          if (index->Get(key(c), &got).ok()) {
            ++churn_found;
            if (!is_value_of(got, c)) ++bad;
          }
        }
        // Let writers in now and then: a reader-preferring table lock starves them.
        if (++reads % 256 == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& th : writers) th.join();
  done = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(missing.load(), 0u) << "a search missed a key that was present throughout";
  EXPECT_EQ(bad.load(), 0u) << "a search returned a value no writer wrote to its key (torn)";
  EXPECT_GT(churn_found.load(), 0u) << "the readers never met a key being added";
  EXPECT_GT(index->Stats().key_slots, slots_before) << "the table never grew during the test";
  EXPECT_EQ(CheckInvariantsOf(index.get()), "");
}

INSTANTIATE_TEST_SUITE_P(Engines, Conformance, ::testing::ValuesIn(Names(ConformanceEngines())),
                         [](const auto& info) { return GtestName(info.param); });

}  // namespace
}  // namespace pmhash::testing
