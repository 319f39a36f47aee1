// The conformance suite: the Index contract, over every registered engine plus the
// test-only `test-tiny` (docs/testing.md). Every test ends by checking the engine's own
// invariants (Engine::CheckInvariants) besides the contract.
#include <gtest/gtest.h>

// GCC 12 warns falsely on "literal" + std::string (GCC bug 105651).
#pragma GCC diagnostic ignored "-Wrestrict"

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <functional>
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
  void SetUp() override {
    spec_ = FindSpec(GetParam());
    if (degenerate() && !spec_.test.degenerate_hash_known_failure.empty()) {
      GTEST_SKIP() << "known failure: " << spec_.test.degenerate_hash_known_failure;
    }
  }
  // A fresh DRAM index; `pool` 0: the engine's TestProfile::conformance_pool_size.
  // Uncounted, so that the suite runs the operations' fast path (Engine::Get's inline
  // hash, the engines' first try: docs/architecture.md); the engines' own tests, the crash
  // runs and the degenerate-hash run (its test hash) take the checked, counted path.
  std::unique_ptr<Index> Fresh(uint64_t initial_capacity = 0, uint64_t pool = 0,
                               std::map<std::string, std::string> engine_options = {}) {
    Options o;
    o.count_stats = false;
    o.initial_capacity = initial_capacity;
    o.pool_size = pool != 0 ? pool : spec_.test.conformance_pool_size;
    o.engine_options = std::move(engine_options);
    std::unique_ptr<Index> index;
    Status s = OpenDram(spec_, o, &index);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return index;
  }
  // Options of a file pool of the engine's test size (OpenFile).
  Options FileOptions() const {
    Options o;
    o.count_stats = false;  // as Fresh
    o.pool_size = spec_.test.conformance_pool_size;
    o.initial_capacity = 16;
    return o;
  }
  // The model's contents exactly (CheckIndex) and the engine's invariants.
  static void ExpectMatches(Index* index, const Model& model) {
    EXPECT_EQ(CheckIndex(index, model, nullptr), "");
    EXPECT_EQ(CheckInvariantsOf(index), "");
  }
  // One run of ThreadsAgainstAModel: the threads' ops come from `seed`.
  void ThreadsAgainstAModel(uint64_t seed);

  // The degenerate-hash run (FindSpec's `<engine>@degenerate-hash`): every key hashes to
  // one of four values (DegenerateHash).
  bool degenerate() const { return spec_.test_hash != nullptr; }
  // Whether `s`, the answer to an insert (or a put of a new key), is a refusal this run
  // allows: TableFull from an engine that says it holds a bounded number of keys of one
  // 64-bit hash (capabilities.refuses_full_collisions), under the degenerate hash. The
  // caller leaves such a key out of its model.
  bool Refused(const Status& s) const { return MayRefuse() && s.IsTableFull(); }
  bool MayRefuse() const {
    return degenerate() && spec_.info->capabilities.refuses_full_collisions;
  }
  // Key counts of the bulk tests, a quarter under the degenerate hash: there every probe
  // walks every key of its hash value, so n keys cost n^2 (docs/testing.md).
  uint64_t Bulk(uint64_t n) const { return degenerate() ? n / 4 : n; }
  // Applies `op` to the index, then to the model unless the index refused it (Refused):
  // "" or how their answers differ.
  std::string ApplyToBoth(const Op& op, Index* index, Model* model) const {
    const Status got = ApplyToIndex(op, index);
    if (Refused(got)) return "";
    const Status want = ApplyToModel(op, model);
    if (got.code() == want.code()) return "";
    return Describe(op) + " returned " + got.ToString() + ", the model " + want.ToString();
  }
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
  std::vector<std::string> present, absent;
  for (uint64_t i = 0; i < Bulk(2000); ++i) {
    absent.push_back(Key8(1'000'000 + i));
    const Status st = index->Insert(Key8(i), Key8(i * 3));
    if (Refused(st)) continue;
    ASSERT_TRUE(st.ok()) << st.ToString();
    present.push_back(Key8(i));
  }
  WaitForBackgroundWork(index.get());
  std::string v;
  // A thread's first call may register it (counter slots, reader slots): not measured.
  ASSERT_TRUE(index->Get(present[0], &v).ok());
  ASSERT_TRUE(index->Get(absent[0], &v).IsNotFound());
  size_t found = 0, not_found = 0;
  size_t allocations = 0;
  const std::string& upkeep = spec_.test.get_upkeep_counter;
  if (upkeep.empty()) {
    allocations = HeapAllocationsOf([&] {
      for (const std::string& k : present) found += index->Get(k, &v).ok() && v.size() == 8;
      for (const std::string& k : absent) not_found += index->Get(k, &v).IsNotFound();
    });
  } else {
    // Gets one at a time: one that did the engine's upkeep may allocate; they are rare.
    size_t upkeep_gets = 0;
    auto get = [&](const std::string& k, bool present_key) {
      const uint64_t before = Counter(index.get(), upkeep);
      const size_t a = HeapAllocationsOf([&] {
        if (present_key) {
          found += index->Get(k, &v).ok() && v.size() == 8;
        } else {
          not_found += index->Get(k, &v).IsNotFound();
        }
      });
      if (Counter(index.get(), upkeep) != before) {
        ++upkeep_gets;
      } else {
        allocations += a;
      }
    };
    for (const std::string& k : present) get(k, true);
    for (const std::string& k : absent) get(k, false);
    EXPECT_LE(upkeep_gets * 50, present.size() + absent.size()) << upkeep << " moved often";
  }
  EXPECT_EQ(found, present.size());
  EXPECT_EQ(not_found, absent.size());
  EXPECT_EQ(allocations, 0u);
  // The counter counts this thread's allocations (a control for the zero above).
  EXPECT_GT(HeapAllocationsOf([&] { v = std::string(64, 'x'); }), 0u);
}

TEST_P(Conformance, GetsIntoStringsOfAnySizeAnswerAlike) {
  // Get stores a found value whatever the caller's string held (empty, shorter, longer:
  // the kit's quick lookup resizes it after one probe) and leaves it as it was on
  // NotFound, for 8-byte keys with 8-byte values and with longer ones.
  auto index = Fresh();
  ASSERT_NE(index, nullptr);
  std::vector<std::pair<std::string, std::string>> stored;
  for (uint64_t i = 0; i < 200; ++i) {
    const std::string value = i % 4 == 0 ? std::string(40, static_cast<char>('a' + i % 26))
                                         : Key8(i * 7);
    const Status st = index->Insert(Key8(i), value);
    if (Refused(st)) continue;
    ASSERT_TRUE(st.ok()) << st.ToString();
    stored.emplace_back(Key8(i), value);
  }
  WaitForBackgroundWork(index.get());
  for (const std::string& before : {std::string(), std::string(3, 'q'), std::string(8, 'q'),
                                    std::string(100, 'q')}) {
    for (const auto& [key, value] : stored) {
      std::string v = before;
      const Status st = index->Get(key, &v);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(v, value) << "string of " << before.size() << " bytes before";
    }
    std::string v = before;
    EXPECT_TRUE(index->Get(Key8(1'000'000), &v).IsNotFound());
    EXPECT_EQ(v, before) << "NotFound changed the caller's string";
  }
}

// GetU64 answers as Get does for every key of 8 bytes: the value's word where it is 8
// bytes long (inserted so, updated to another word, or after a delete and a reinsert),
// InvalidArgument where it is of another size, NotFound where the key is absent or was
// deleted; *value changes only on OK.
TEST_P(Conformance, GetU64AnswersAsGetDoes) {
  auto index = Fresh();
  ASSERT_NE(index, nullptr);
  const auto word_of = [](const std::string& key8) {
    uint64_t w;
    std::memcpy(&w, key8.data(), sizeof(w));
    return w;
  };
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 300; ++i) {
    const std::string value = i % 5 == 0   ? std::string(40, static_cast<char>('a' + i % 26))
                              : i % 5 == 1 ? std::string(3, 'v')
                                           : Key8(i * 7 + 1);
    const Status st = index->Insert(Key8(i), value);
    if (Refused(st)) continue;
    ASSERT_TRUE(st.ok()) << st.ToString();
    keys.push_back(i);
  }
  for (uint64_t i : keys) {
    Status st;
    if (i % 7 == 2) st = index->Update(Key8(i), Key8(i + 99));  // a word to another word
    if (i % 7 == 3) st = index->Update(Key8(i), std::string(20, 'u'));  // to a longer value
    if (i % 7 == 4) st = index->Delete(Key8(i));
    if (i % 7 == 5 && index->Delete(Key8(i)).ok()) st = index->Insert(Key8(i), Key8(i + 5));
    if (Refused(st)) continue;
    ASSERT_TRUE(st.ok()) << i << ": " << st.ToString();
  }
  WaitForBackgroundWork(index.get());
  size_t words = 0, others = 0, absent = 0;
  for (uint64_t i = 0; i < 400; ++i) {
    std::string expected;
    const Status want = index->Get(Key8(i), &expected);
    uint64_t got = 0x5eed;
    const Status st = index->GetU64(word_of(Key8(i)), &got);
    if (want.ok() && expected.size() == 8) {
      ASSERT_TRUE(st.ok()) << i << ": " << st.ToString();
      EXPECT_EQ(got, word_of(expected)) << i;
      ++words;
    } else if (want.ok()) {
      EXPECT_TRUE(st.IsInvalidArgument()) << i << ": " << st.ToString();
      EXPECT_EQ(got, 0x5eedu) << i;
      ++others;
    } else {
      ASSERT_TRUE(want.IsNotFound()) << want.ToString();
      EXPECT_TRUE(st.IsNotFound()) << i << ": " << st.ToString();
      EXPECT_EQ(got, 0x5eedu) << i;
      ++absent;
    }
  }
  // Each answer was exercised (a degenerate hash refuses most keys: a few of each remain).
  EXPECT_GE(words, 10u);
  EXPECT_GE(others, 5u);
  EXPECT_GE(absent, 100u);
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
      const Status st = index->Insert(k, v);
      if (Refused(st)) continue;
      ASSERT_TRUE(st.ok()) << st.ToString();
      stored.push_back(std::move(k));
    }
    if (const Status st = index->Insert("", "empty key"); !Refused(st)) {
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
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

// Write applies a batch as the single calls would, one op after another: each op's status
// is the one its call would return, a key written twice in a batch ends with the later
// write, a refused op (overlong key or value, an unknown kind) changes nothing and the
// rest of the batch still runs; at write_depth 1, 4 and 64 (engines that pipeline
// prefetch that far ahead; the others ignore it).
TEST_P(Conformance, WriteBatchesActAsTheirSingleCallsInOrder) {
  for (const char* depth : {"1", "4", "64"}) {
    SCOPED_TRACE(std::string("write_depth=") + depth);
    auto index = Fresh(16, 0, {{"write_depth", depth}});
    ASSERT_NE(index, nullptr);
    Model model;
    std::mt19937_64 rng(11);
    const std::string overlong(kMaxKeySize + 1, 'x');
    const std::string too_big(kMaxValueSize + 1, 'v');
    std::vector<std::string> pool;
    for (uint64_t i = 0; i < 120; ++i) {
      pool.push_back(i % 3 == 0   ? std::string(reinterpret_cast<const char*>(&i), 8)
                     : i % 3 == 1 ? "key-" + std::to_string(i)
                                  : std::string(40, 'L') + std::to_string(i));
    }
    pool.push_back("");
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{5}, size_t{64}, size_t{65},
                     size_t{300}, size_t{300}, size_t{300}}) {
      std::vector<std::string> keys(n), values(n);
      std::vector<WriteOp> ops(n);
      for (size_t i = 0; i < n; ++i) {
        keys[i] = pool[rng() % pool.size()];
        const uint64_t v = rng();
        values[i] = v % 3 == 0 ? std::string(reinterpret_cast<const char*>(&v), 8)
                               : "value " + std::to_string(v % 1000);
        ops[i].kind = static_cast<WriteOp::Kind>(rng() % 4);
      }
      if (n >= 2) keys[n - 1] = keys[0];  // written twice
      if (n >= 5) {
        keys[3] = overlong;
        values[4] = too_big;
        ops[4].kind = WriteOp::Kind::kPut;
      }
      for (size_t i = 0; i < n; ++i) {
        ops[i].key = keys[i];
        ops[i].value = values[i];
      }
      std::vector<Status> statuses(n, Status::Corruption("not set"));
      index->Write(ops, statuses);
      for (size_t i = 0; i < n; ++i) {
        // What the single call would have returned against the model at this point.
        const bool present = model.count(keys[i]) != 0;
        Status want;
        if (keys[i].size() > kMaxKeySize ||
            (ops[i].kind != WriteOp::Kind::kDelete && values[i].size() > kMaxValueSize)) {
          want = Status::InvalidArgument("");
        } else {
          const bool adds = !present && (ops[i].kind == WriteOp::Kind::kInsert ||
                                          ops[i].kind == WriteOp::Kind::kPut);
          switch (ops[i].kind) {
            case WriteOp::Kind::kInsert:
            case WriteOp::Kind::kPut:
              if (adds && Refused(statuses[i])) {  // a new key the engine may refuse
                want = statuses[i];
                break;
              }
              want = present && ops[i].kind == WriteOp::Kind::kInsert ? Status::AlreadyExists()
                                                                      : Status::OK();
              if (!present || ops[i].kind == WriteOp::Kind::kPut) model[keys[i]] = values[i];
              break;
            case WriteOp::Kind::kUpdate:
              want = present ? Status::OK() : Status::NotFound();
              if (present) model[keys[i]] = values[i];
              break;
            case WriteOp::Kind::kDelete:
              want = present ? Status::OK() : Status::NotFound();
              model.erase(keys[i]);
              break;
          }
        }
        EXPECT_EQ(statuses[i].code(), want.code())
            << "batch of " << n << ", op #" << i << " " << Printable(keys[i]) << ": "
            << statuses[i].ToString();
      }
      ExpectMatches(index.get(), model);
    }
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
      if (Refused(s)) continue;
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
  // Inline <-> out-of-line transitions by update (unless the key is refused: Refused).
  const Status put = index->Put("inline01", "8bytes!!");
  if (Refused(put)) return;
  ASSERT_TRUE(put.ok()) << put.ToString();
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
      ASSERT_EQ(ApplyToBoth(op, index.get(), &model), "") << "at step " << i;
    }
    ExpectMatches(index.get(), model);
  }
}

TEST_P(Conformance, ResizeUnderLoad) {
  auto index = Fresh(16);
  Model model;
  const uint64_t n = Bulk(6000);
  for (uint64_t i = 0; i < n; ++i) {
    const std::string k(reinterpret_cast<const char*>(&i), 8);
    ASSERT_EQ(ApplyToBoth({Op::kInsert, k, k}, index.get(), &model), "") << "insert #" << i;
  }
  ExpectMatches(index.get(), model);
  IndexStats st = index->Stats();
  EXPECT_EQ(st.count, model.size());
  EXPECT_GE(st.key_slots, model.size()) << "the table must have grown";
  for (uint64_t i = 0; i < n; i += 2) {
    const std::string k(reinterpret_cast<const char*>(&i), 8);
    ASSERT_EQ(ApplyToBoth({Op::kDelete, k, ""}, index.get(), &model), "");
  }
  for (uint64_t i = n; i < n + n / 6; ++i) {
    const std::string k = "long-key-" + std::to_string(i);
    ASSERT_EQ(ApplyToBoth({Op::kInsert, k, std::string(40, 'v')}, index.get(), &model), "");
  }
  ExpectMatches(index.get(), model);
}

TEST_P(Conformance, ReopenAfterCleanClose) {
  TempDir dir("conf");
  const std::string path = dir.File(GtestName(GetParam()) + ".pool");
  const Options o = FileOptions();
  Model model;
  {
    std::unique_ptr<Index> index;
    ASSERT_TRUE(OpenFile(spec_, path, o, &index).ok());
    for (int i = 0; i < 500; ++i) {
      const std::string k = "k" + std::to_string(i), v = std::string(i % 3 ? 8 : 30, 'a' + i % 26);
      ASSERT_EQ(ApplyToBoth({Op::kInsert, k, v}, index.get(), &model), "");
    }
    ASSERT_TRUE(index->Close().ok());
  }
  {
    std::unique_ptr<Index> index;
    Status s = OpenFile(spec_, path, o, &index);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_FALSE(index->Stats().recovered) << "a clean close must not need recovery";
    ExpectMatches(index.get(), model);
    ASSERT_EQ(ApplyToBoth({Op::kInsert, "after-reopen", "x"}, index.get(), &model), "");
    ASSERT_TRUE(index->Close().ok());
  }
  {
    std::unique_ptr<Index> index;
    ASSERT_TRUE(OpenFile(spec_, path, o, &index).ok());
    ExpectMatches(index.get(), model);
  }
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
      if (std::string e = ApplyToBoth(op, index.get(), &models[t]); !e.empty()) error(e);
      // Only this thread writes its keys: Get must agree with its model exactly.
      auto m = models[t].find(op.key);
      Status g = index->Get(op.key, &v);
      if (m == models[t].end() ? !g.IsNotFound() : !(g.ok() && v == m->second)) {
        error("Get(" + op.key + ") right after " + Describe(op) + " gave " + g.ToString());
      }
      const std::string other = "t" + std::to_string(rng() % kThreads) + "-" + std::to_string(k);
      if (index->Get(other, &v).ok()) reads[t].push_back({other, v});
      const std::string shared = "shared-" + std::to_string(rng() % 4);
      const Status put = index->Put(shared, "by-thread-" + std::to_string(t));
      if (!put.ok() && !Refused(put)) error("Put(" + shared + ") returned " + put.ToString());
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
    if (it == seen.end() && MayRefuse()) {
      continue;  // every Put of it may have been refused
    }
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
  constexpr int kWriters = 2;
  // Under the degenerate hash a search walks every key of its hash value while it holds a
  // reader-preferring lock (test-tiny): two readers that yield after each search, so that
  // the writers get in (four starved them for minutes under ASan); otherwise a yield
  // every 16 searches (every 64 left test-tiny's writers 20 s under ASan).
  const int readers_n = degenerate() ? 2 : 4;
  const uint64_t yield_every = degenerate() ? 1 : 16;
  // Under the degenerate hash every probe walks every key of its hash value: as few
  // writes as the issue-28 version of this test made there.
  const uint32_t writes = degenerate() ? 1000 : 10000;
  const auto churn_key = [](int w, uint32_t n) { return 1'000'000 + uint64_t(w) * 100'000 + n; };
  std::vector<uint64_t> stable;  // present throughout
  for (uint64_t i = 0; i < 500; ++i) {
    const Status st = index->Insert(key(i), value_of(i, 0));
    if (Refused(st)) continue;
    ASSERT_TRUE(st.ok()) << st.ToString();
    stable.push_back(i);
  }
  const uint64_t slots_before = index->Stats().key_slots;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> bad{0}, missing{0}, reads{0}, failures{0}, churn_found{0};
  std::atomic<uint32_t> progress[kWriters] = {};
  std::vector<std::thread> writers, readers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937_64 rng(w + 10);
      // Past `writes`, a writer goes on (up to 4x) until a reader has met a key being
      // added (checked below): on a loaded machine the readers may not run at all before.
      const uint32_t most = MayRefuse() ? writes : 4 * writes;
      std::vector<bool> added(most, false);
      while (reads.load() < 200) std::this_thread::yield();  // the readers are at it
      for (uint32_t n = 1; n < writes || (n < most && churn_found.load() == 0); ++n) {
        const uint64_t s = stable[rng() % stable.size()];
        if (!index->Put(key(s), value_of(s, n)).ok()) ++failures;
        const uint64_t c = churn_key(w, n);
        const Status st = index->Insert(key(c), value_of(c, n));
        added[n] = st.ok();
        if (!st.ok() && !Refused(st)) ++failures;
        // An older key, in the middle of its run of cells now: linear shifts the keys
        // after it back, stable ones among them.
        if (n % 3 == 0 && n > 64 && added[n - 64] &&
            !index->Delete(key(churn_key(w, n - 64))).ok()) {
          ++failures;
        }
        progress[w].store(n, std::memory_order_relaxed);
        if (n >= writes) std::this_thread::yield();  // the readers' turn
      }
    });
  }
  for (int r = 0; r < readers_n; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(r + 20);
      std::string got;
      while (!done.load()) {
        const uint64_t s = stable[rng() % stable.size()];
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
        if (++reads % yield_every == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& th : writers) th.join();
  done = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(missing.load(), 0u) << "a search missed a key that was present throughout";
  EXPECT_EQ(bad.load(), 0u) << "a search returned a value no writer wrote to its key (torn)";
  if (!MayRefuse()) {  // a table full of colliding keys refuses instead of growing
    EXPECT_GT(churn_found.load(), 0u) << "the readers never met a key being added";
    EXPECT_GT(index->Stats().key_slots, slots_before) << "the table never grew during the test";
  }
  EXPECT_EQ(CheckInvariantsOf(index.get()), "");
}

// ---- Scan -----------------------------------------------------------------------------

// One scan from cursor 0 to the end in pages of max_keys, `between(page)` run after each
// page but the last (writers, resizes). Checks each page: progress, at least max_keys keys
// unless it is the last, and no key passed more than twice (a key repeats only from the
// sliver below a page's start, engines/scan.h: a third time is a cursor going round).
struct ScanRun {
  std::vector<std::pair<std::string, std::string>> seen;  // every key passed, in order
  size_t pages = 0;
  std::string error;  // "" or the broken rule
};
ScanRun ScanAll(const Index& index, size_t max_keys,
                const std::function<void(size_t page)>& between = nullptr) {
  ScanRun run;
  std::map<std::string, int> passed;
  std::string passed_too_often;
  uint64_t cursor = 0;
  for (;;) {
    size_t in_page = 0;
    uint64_t next = 0;
    const Status s = index.Scan(cursor, max_keys, [&](std::string_view k, std::string_view v) {
      run.seen.emplace_back(std::string(k), std::string(v));
      if (++passed[run.seen.back().first] > 2) passed_too_often = run.seen.back().first;
      ++in_page;
      return true;
    }, &next);
    ++run.pages;
    if (!s.ok()) {
      run.error = "Scan(" + std::to_string(cursor) + ") failed: " + s.ToString();
      return run;
    }
    if (!passed_too_often.empty()) {
      run.error = "key " + Printable(passed_too_often) + " passed three times (page " +
                  std::to_string(run.pages) + "): the cursor goes round";
      return run;
    }
    if (next == 0) return run;
    if (in_page < max_keys) {
      run.error = "page " + std::to_string(run.pages) + " held " + std::to_string(in_page) +
                  " keys, fewer than max_keys " + std::to_string(max_keys) +
                  ", and was not the last";
      return run;
    }
    // Every test here holds well under 100,000 keys: more pages is a cursor going round.
    if (next == cursor || run.pages > 100'000) {
      run.error = "the scan makes no progress at cursor " + std::to_string(cursor);
      return run;
    }
    cursor = next;
    if (between) between(run.pages);
  }
}

// What a scan saw, as a map; "" or a key seen with two values.
std::string Union(const ScanRun& run, Model* out, size_t* repeats) {
  out->clear();
  *repeats = 0;
  for (const auto& [k, v] : run.seen) {
    auto [it, fresh] = out->emplace(k, v);
    if (fresh) continue;
    ++*repeats;
    if (it->second != v) return "key " + Printable(k) + " seen with two values";
  }
  return "";
}

// Mixed keys: inline, short and long records (Bulk decides how many).
std::string ScanKey(uint64_t i) {
  return i % 3 == 0 ? Key8(i) : i % 3 == 1 ? "scan-" + std::to_string(i)
                                           : std::string(30, 'L') + std::to_string(i);
}

TEST_P(Conformance, ScanPassesEveryKeyWhenNothingChanges) {
  auto index = Fresh(16);
  ASSERT_NE(index, nullptr);
  uint64_t next = 99;
  ASSERT_TRUE(index->Scan(0, 10, [](std::string_view, std::string_view) { return true; }, &next)
                  .ok());
  EXPECT_EQ(next, 0u) << "an empty index is scanned in one page";
  Model model;
  uint64_t inserted = 0;
  // Pages of one key over 300 keys, then pages of 7, 100 and all over 3,000: a page reads
  // whole homes (a segment, or level's whole table), so one-key pages over all 3,000
  // cost 3,000 reads of them (a third of the sanitizer runs' conformance time).
  for (size_t max_keys : {size_t{1}, size_t{7}, size_t{100}, size_t{1} << 20}) {
    for (; inserted < Bulk(max_keys == 1 ? 300 : 3000); ++inserted) {
      ASSERT_EQ(ApplyToBoth({Op::kInsert, ScanKey(inserted), Key8(inserted * 3)}, index.get(),
                            &model),
                "");
    }
    SCOPED_TRACE("max_keys " + std::to_string(max_keys) + ", " + std::to_string(inserted) +
                 " keys");
    const ScanRun run = ScanAll(*index, max_keys);
    ASSERT_EQ(run.error, "");
    Model seen;
    size_t repeats = 0;
    ASSERT_EQ(Union(run, &seen, &repeats), "");
    EXPECT_EQ(seen, model);
    // A key repeats only when its hash lies in the 2^16 positions below a page boundary
    // (engines/scan.h): never in practice, but the degenerate hash puts thousands there.
    if (!degenerate()) {
      EXPECT_EQ(repeats, 0u);
    }
    if (max_keys == size_t{1} << 20) {
      EXPECT_EQ(run.pages, 1u);
    }
  }
  ExpectMatches(index.get(), model);
}

// Redis's SCAN guarantee with inserts, deletes, updates and table growth between pages:
// every key present throughout is passed at least once, with a value it had; nothing is
// passed that was never written.
TEST_P(Conformance, ScanKeepsItsGuaranteeWithWritersAndResizesBetweenPages) {
  for (size_t max_keys : {size_t{1}, size_t{8}}) {
    SCOPED_TRACE("max_keys " + std::to_string(max_keys));
    auto index = Fresh(16);
    ASSERT_NE(index, nullptr);
    Model model;
    std::map<std::string, std::set<std::string>> written;
    std::vector<std::string> stable;
    uint64_t refused = 0;  // new keys the engine refused (Refused)
    const auto write = [&](const std::string& k, const std::string& v) {
      const bool had = model.count(k) != 0;
      ASSERT_EQ(ApplyToBoth({Op::kPut, k, v}, index.get(), &model), "");
      if (model.count(k) != 0) written[k].insert(v);
      if (!had && model.count(k) == 0) ++refused;
    };
    // One-key pages over a quarter of the keys: each page reads whole homes (segments,
    // level's whole table), and the sanitizer runs pay for every read.
    const uint64_t keys = max_keys == 1 && !degenerate() ? 100 : Bulk(400);
    for (uint64_t i = 0; i < keys; ++i) write(ScanKey(i), "v0-" + std::to_string(i));
    for (const auto& [k, v] : model) stable.push_back(k);
    const uint64_t slots_before = index->Stats().key_slots;
    uint64_t churn = 1'000'000;
    std::vector<std::string> churned;
    const ScanRun run = ScanAll(*index, max_keys, [&](size_t page) {
      if (page > keys) return;  // enough growth; the rest runs undisturbed
      // Pages are whole homes: under the degenerate hash a few hold every key.
      for (int j = 0; j < (degenerate() ? 100 : 12); ++j) {
        churned.push_back(ScanKey(churn++));
        write(churned.back(), "churn");
      }
      if (churned.size() > 4) {  // delete an older churn key
        const std::string gone = churned[churned.size() - 5];
        ASSERT_EQ(ApplyToBoth({Op::kDelete, gone, ""}, index.get(), &model), "");
      }
      const std::string& k = stable[page % stable.size()];
      write(k, "v" + std::to_string(page) + "-" + k);
    });
    ASSERT_EQ(run.error, "");
    // An engine that refuses keys of one full hash may refuse where no growth helps (spash
    // under the degenerate hash: no split separates them); any other must have grown.
    if (refused == 0) {
      EXPECT_GT(index->Stats().key_slots, slots_before) << "the table never grew during the scan";
    }
    std::set<std::string> seen;
    for (const auto& [k, v] : run.seen) {
      seen.insert(k);
      auto it = written.find(k);
      ASSERT_NE(it, written.end()) << "the scan passed " << Printable(k) << ", never written";
      EXPECT_EQ(it->second.count(v), 1u) << Printable(k) << " passed with a value it never had";
    }
    for (const std::string& k : stable) {
      EXPECT_EQ(seen.count(k), 1u) << "a key present throughout was never passed: "
                                   << Printable(k);
    }
    ExpectMatches(index.get(), model);
  }
}

// The same with writer threads running during the pages, growing the table.
TEST_P(Conformance, ScanKeepsItsGuaranteeBesideConcurrentWriters) {
  auto index = Fresh(16);
  ASSERT_NE(index, nullptr);
  std::vector<std::string> stable;
  for (uint64_t i = 0; i < Bulk(300); ++i) {
    const Status st = index->Insert(ScanKey(i), "stable");
    if (Refused(st)) continue;
    ASSERT_TRUE(st.ok()) << st.ToString();
    stable.push_back(ScanKey(i));
  }
  const uint64_t slots_before = index->Stats().key_slots;
  std::atomic<int> writing{2};
  std::atomic<uint64_t> failures{0}, refused{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (uint64_t n = 0; n < Bulk(1000); ++n) {
        const std::string k = ScanKey(10'000'000 * (w + 1) + n);
        const Status st = index->Insert(k, "churn");
        if (Refused(st)) {
          ++refused;
          continue;
        }
        if (!st.ok()) ++failures;
        if (n % 2 == 0 && !index->Delete(k).ok()) ++failures;
        if (!index->Put(stable[n % stable.size()], "stable").ok()) ++failures;
      }
      --writing;
    });
  }
  // Whole scans for as long as the writers run (three at least); the first failure ends
  // them (reported after the writers are joined).
  std::string error;
  for (int round = 0; error.empty() && (round < 3 || writing.load() > 0); ++round) {
    const ScanRun run = ScanAll(*index, 16);
    error = run.error;
    std::set<std::string> seen;
    for (const auto& kv : run.seen) seen.insert(kv.first);
    for (const std::string& k : stable) {
      if (error.empty() && seen.count(k) == 0) {
        error = "scan " + std::to_string(round) + " missed " + Printable(k);
      }
    }
  }
  for (auto& th : writers) th.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(failures.load(), 0u);
  if (refused.load() == 0) {  // as in the test above
    EXPECT_GT(index->Stats().key_slots, slots_before) << "the table never grew";
  }
  EXPECT_EQ(CheckInvariantsOf(index.get()), "");
}

// A cursor this pool never handed out is InvalidArgument, whether garbage or another
// pool's (but for a chance of 2^-16 each, which then resumes harmlessly); max_keys 0 too.
TEST_P(Conformance, ScanRefusesCursorsItNeverHandedOut) {
  auto a = Fresh(16), b = Fresh(16);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (uint64_t i = 0; i < 300; ++i) {
    for (Index* index : {a.get(), b.get()}) {
      const Status st = index->Insert(ScanKey(i), "v");
      ASSERT_TRUE(st.ok() || Refused(st)) << st.ToString();
    }
  }
  const auto all = [](std::string_view, std::string_view) { return true; };
  uint64_t next = 0;
  EXPECT_TRUE(a->Scan(0, 0, all, &next).IsInvalidArgument());
  // Cursors of b.
  std::vector<uint64_t> foreign;
  for (uint64_t c = 0; foreign.size() < 8;) {
    ASSERT_TRUE(b->Scan(c, 4, all, &c).ok());
    if (c == 0) break;
    foreign.push_back(c);
  }
  ASSERT_GE(foreign.size(), 2u);
  size_t refused = 0;
  for (uint64_t c : foreign) {
    const Status s = a->Scan(c, 4, all, &next);
    ASSERT_TRUE(s.ok() || s.IsInvalidArgument()) << s.ToString();
    refused += s.IsInvalidArgument();
  }
  EXPECT_GE(refused, foreign.size() - 1);
  std::mt19937_64 rng(GetParam().size());
  refused = 0;
  for (int i = 0; i < 1000; ++i) {
    const Status s = a->Scan(rng(), 4, all, &next);
    ASSERT_TRUE(s.ok() || s.IsInvalidArgument()) << s.ToString();
    refused += s.IsInvalidArgument();
  }
  EXPECT_GE(refused, 990u);
  EXPECT_EQ(CheckInvariantsOf(a.get()), "");
}

// A cursor names a position in hash order, not a table address: it is good after a clean
// close and reopen (the same pool, a new session).
TEST_P(Conformance, ScanResumesAfterReopen) {
  TempDir dir("scan");
  const std::string path = dir.File(GtestName(GetParam()) + ".pool");
  const Options o = FileOptions();
  Model model, seen;
  uint64_t cursor = 0;
  const auto collect = [&](std::string_view k, std::string_view v) {
    seen.emplace(std::string(k), std::string(v));
    return true;
  };
  {
    std::unique_ptr<Index> index;
    ASSERT_TRUE(OpenFile(spec_, path, o, &index).ok());
    for (uint64_t i = 0; i < 500; ++i) {
      ASSERT_EQ(ApplyToBoth({Op::kInsert, ScanKey(i), Key8(i)}, index.get(), &model), "");
    }
    for (int calls = 0; seen.size() < model.size() / 2; ++calls) {
      ASSERT_TRUE(index->Scan(cursor, 16, collect, &cursor).ok());
      ASSERT_NE(cursor, 0u);
      ASSERT_LT(calls, 100'000) << "no progress";
    }
    ASSERT_TRUE(index->Close().ok());
  }
  std::unique_ptr<Index> index;
  ASSERT_TRUE(OpenFile(spec_, path, o, &index).ok());
  for (int calls = 0; cursor != 0; ++calls) {
    const Status s = index->Scan(cursor, 16, collect, &cursor);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_LT(calls, 100'000) << "no progress";
  }
  EXPECT_EQ(seen, model);
}

// A visitor that returns false ends its page there; the next page resumes at the home
// bucket of the next key, so nothing is skipped.
TEST_P(Conformance, ScanResumesWhereTheVisitorStopped) {
  auto index = Fresh(16);
  ASSERT_NE(index, nullptr);
  Model model, seen;
  for (uint64_t i = 0; i < Bulk(1000); ++i) {
    ASSERT_EQ(ApplyToBoth({Op::kInsert, ScanKey(i), Key8(i)}, index.get(), &model), "");
  }
  uint64_t cursor = 0, calls = 0;
  bool stop_early = true;
  do {
    uint64_t passed = 0, next = 0;
    ASSERT_TRUE(index->Scan(cursor, 20, [&](std::string_view k, std::string_view v) {
      seen.emplace(std::string(k), std::string(v));
      return !stop_early || ++passed < 5;
    }, &next).ok());
    // A stop within the page's first home returns the same cursor: then read it whole.
    stop_early = next != cursor;
    cursor = next;
    ASSERT_LT(++calls, 100'000u) << "no progress";
  } while (cursor != 0);
  EXPECT_EQ(seen, model);
}

// ---- The degenerate hash --------------------------------------------------------------

// Keys that collide in all 64 bits of their hash: an engine stores them all (chains,
// probing runs), or holds a bounded number and refuses the rest with TableFull, as its
// capabilities say, and never grows its table without end trying to separate them.
TEST_P(Conformance, KeysOfOneHashAreStoredOrRefusedCleanly) {
  if (!degenerate()) GTEST_SKIP() << "needs the degenerate hash (" << kDegenerateSuffix << ")";
  auto index = Fresh(16);
  ASSERT_NE(index, nullptr);
  Model model;
  uint64_t refused = 0;
  for (uint64_t i = 0; i < Bulk(4000); ++i) {
    const std::string k = i % 3 ? Key8(i) : "colliding key " + std::to_string(i);
    const std::string v = i % 2 ? Key8(i * 7) : "value " + std::to_string(i);
    const Status st = index->Insert(k, v);
    if (Refused(st)) {
      ++refused;
      continue;
    }
    ASSERT_TRUE(st.ok()) << "insert #" << i << ": " << st.ToString();
    model[k] = v;
  }
  if (!MayRefuse()) {
    EXPECT_EQ(refused, 0u);
  }
  // Four hash values: at least a handful of keys of each is stored, and the table stays
  // in proportion to what it holds (a refusal comes before any futile doubling).
  EXPECT_GE(model.size(), 16u);
  EXPECT_LE(index->Stats().key_slots, 64 * std::max<uint64_t>(model.size(), 1024));
  ExpectMatches(index.get(), model);
  // Deletes and updates among them, then the survivors checked again.
  uint64_t i = 0;
  for (auto it = model.begin(); it != model.end(); ++i) {
    if (i % 3 == 0) {
      ASSERT_TRUE(index->Delete(it->first).ok()) << Printable(it->first);
      it = model.erase(it);
      continue;
    }
    if (i % 3 == 1) {
      it->second = "updated " + std::to_string(i);
      ASSERT_TRUE(index->Update(it->first, it->second).ok()) << Printable(it->first);
    }
    ++it;
  }
  ExpectMatches(index.get(), model);
}

INSTANTIATE_TEST_SUITE_P(Engines, Conformance, ::testing::ValuesIn(Names(ConformanceEngines())),
                         [](const auto& info) { return GtestName(info.param); });

// The whole suite again with every key hashing to one of four values (docs/testing.md,
// "The degenerate-hash run").
std::vector<std::string> DegenerateHashNames() {
  std::vector<std::string> out;
  for (const std::string& name : Names(ConformanceEngines())) out.push_back(name + kDegenerateSuffix);
  return out;
}
INSTANTIATE_TEST_SUITE_P(DegenerateHash, Conformance, ::testing::ValuesIn(DegenerateHashNames()),
                         [](const auto& info) { return GtestName(info.param); });

}  // namespace
}  // namespace pmhash::testing
