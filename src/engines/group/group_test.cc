#include "engines/group/group.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pm/pool.h"
#include "support/engine_tests.h"
#include "util/hash.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

GroupHash* AsGroup(Index* index) { return dynamic_cast<GroupHash*>(index); }

Options GroupOptions(std::map<std::string, std::string> engine_options = {}) {
  return testing::OptionsFor("group", std::move(engine_options), 64ull << 20);
}

TEST(GroupHashTest, OperationSemanticsAndStatuses) {
  auto index = OpenOrDie(GroupOptions());
  ASSERT_NE(AsGroup(index.get()), nullptr);
  const std::string k = Key8(1), v1 = Key8(100), v2 = Key8(200);
  EXPECT_TRUE(index->Insert(k, v1).ok());
  EXPECT_TRUE(index->Insert(k, v2).IsAlreadyExists());
  std::string got;
  ASSERT_TRUE(index->Get(k, &got).ok());
  EXPECT_EQ(got, v1);  // a refused Insert changes nothing
  EXPECT_TRUE(index->Update(k, v2).ok());
  ASSERT_TRUE(index->Get(k, &got).ok());
  EXPECT_EQ(got, v2);
  EXPECT_TRUE(index->Update(Key8(2), v1).IsNotFound());
  EXPECT_TRUE(index->Put(Key8(2), v1).ok());  // insert
  EXPECT_TRUE(index->Put(Key8(2), v2).ok());  // update
  ASSERT_TRUE(index->Get(Key8(2), &got).ok());
  EXPECT_EQ(got, v2);
  EXPECT_EQ(index->Count(), 2u);
  got = "unchanged";
  EXPECT_TRUE(index->Get(Key8(3), &got).IsNotFound());
  EXPECT_EQ(got, "unchanged");
  EXPECT_TRUE(index->Delete(k).ok());
  EXPECT_TRUE(index->Delete(k).IsNotFound());
  EXPECT_TRUE(index->Get(k, &got).IsNotFound());
  EXPECT_EQ(index->Count(), 1u);
  ExpectMatches(index.get(), {{Key8(2), v2}});
  // Deleted cells never match, and reinserting works.
  EXPECT_TRUE(index->Insert(k, v1).ok());
  ExpectMatches(index.get(), {{Key8(2), v2}, {k, v1}});
}

TEST(GroupHashTest, CollisionsGoToTheSharedLevel2Group) {
  // One group (G = 16, 16 cells per level): 32 keys fill both levels, the 33rd is refused.
  auto index = OpenOrDie(GroupOptions({{"group_size", "16"}, {"cells", "32"}, {"resize", "off"}}));
  GroupHash* g = AsGroup(index.get());
  ASSERT_EQ(g->level_cells(), 16u);
  std::map<std::string, std::string> model;
  uint64_t i = 0;
  Status s;
  for (;; ++i) {
    s = index->Insert(Key8(i), Key8(i * 7));
    if (!s.ok()) break;
    model[Key8(i)] = Key8(i * 7);
  }
  EXPECT_TRUE(s.IsTableFull()) << s.ToString();
  EXPECT_NE(s.message().find("resize=off"), std::string::npos) << s.message();
  // Level 2 is full; level 1 has as many keys as distinct home cells.
  EXPECT_GE(model.size(), 17u);
  EXPECT_LE(model.size(), 32u);
  ExpectMatches(index.get(), model);
  // Deleting a level-2 key frees its cell for the next collision.
  std::set<uint64_t> homes;
  std::string level2_key;
  for (const auto& [k, v] : model) {
    if (!homes.insert(Reduce(HashKey(k, kTestHashSeed), 16)).second) level2_key = k;
  }
  ASSERT_FALSE(level2_key.empty());
  ASSERT_TRUE(index->Delete(level2_key).ok());
  model.erase(level2_key);
  std::string extra;
  for (uint64_t j = 1000; extra.empty(); ++j) {
    if (homes.count(Reduce(HashKey(Key8(j), kTestHashSeed), 16))) extra = Key8(j);
  }
  EXPECT_TRUE(index->Insert(extra, Key8(5)).ok());
  model[extra] = Key8(5);
  ExpectMatches(index.get(), model);
  EXPECT_EQ(Counter(index.get(), "full_group_refusals"), 1u);
}

// Keys starting with "collide" all hash to one value; the others as xxh3 under seed 7.
uint64_t CollidingHash(std::string_view key) {
  return key.starts_with("collide") ? 0x4000000000000001ull : HashKey(key, 7);
}

// Regression (the degenerate-hash conformance run): keys that share all 64 bits of their
// hash fill their group, and no table size separates them. group doubled its table until
// the pool was full (about ten doublings, then PoolFull) before refusing such a key; now
// it refuses with TableFull before any doubling, and other keys still go in.
TEST(GroupHashTest, KeysNoDoublingSeparatesAreRefusedWithoutGrowing) {
  std::unique_ptr<Engine> engine = FindEngine("group")->make();
  engine->SetKeyHashForTesting(&CollidingHash);
  std::unique_ptr<pm::Pool> pool;
  ASSERT_TRUE(pm::Pool::CreateDram("group", 64ull << 20, &pool, kTestHashSeed).ok());
  std::unique_ptr<Index> index;
  ASSERT_TRUE(OpenEngine(std::move(engine), std::move(pool), true,
                         GroupOptions({{"group_size", "8"}}), nullptr, &index)
                  .ok());
  Model model;
  // One level-1 cell and the group's 8 level-2 cells: 9 colliding keys fit.
  Status s;
  for (int i = 0; i < 9; ++i) {
    const std::string k = "collide-" + std::to_string(i);
    ASSERT_TRUE(index->Insert(k, "v").ok()) << i;
    model[k] = "v";
  }
  s = index->Insert("collide-9", "v");
  EXPECT_TRUE(s.IsTableFull()) << s.ToString();
  EXPECT_NE(s.message().find("no table the pool can hold"), std::string::npos) << s.ToString();
  EXPECT_EQ(Counter(index.get(), "resizes"), 0u) << "a doubling cannot separate them";
  EXPECT_EQ(Counter(index.get(), "inseparable_refusals"), 1u);
  // Other keys go in (and grow the table when their groups fill), the colliding ones stay
  // refused.
  for (uint64_t i = 0; i < 20000; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok()) << i;
    model[Key8(i)] = Key8(i);
  }
  EXPECT_GT(Counter(index.get(), "resizes"), 0u);
  EXPECT_TRUE(index->Insert("collide-10", "v").IsTableFull());
  ExpectMatches(index.get(), model);
}

TEST(GroupHashTest, PaperItemSizes16And32Bytes) {
  // RandomNum (8-byte key + 8-byte value, inline) and Fingerprint (16-byte key + 16-byte
  // value, record form).
  auto index = OpenOrDie(GroupOptions({{"group_size", "64"}}));
  std::map<std::string, std::string> model;
  for (uint64_t i = 0; i < 3000; ++i) {
    const std::string k8 = Key8(i), k16 = Bytes(i, 16, 'f');
    ASSERT_TRUE(index->Insert(k8, Key8(i + 1)).ok());
    ASSERT_TRUE(index->Insert(k16, Bytes(i, 16, 'v')).ok());
    model[k8] = Key8(i + 1);
    model[k16] = Bytes(i, 16, 'v');
  }
  for (uint64_t i = 0; i < 3000; i += 3) {
    ASSERT_TRUE(index->Update(Bytes(i, 16, 'f'), Bytes(i, 16, 'w')).ok());
    model[Bytes(i, 16, 'f')] = Bytes(i, 16, 'w');
    ASSERT_TRUE(index->Delete(Key8(i + 1)).ok());
    model.erase(Key8(i + 1));
  }
  ExpectMatches(index.get(), model);
}

TEST(GroupHashTest, LongKeysValuesAndLimits) {
  auto index = OpenOrDie(GroupOptions());
  std::map<std::string, std::string> model = {
      {"", "empty key"},
      {"empty value", ""},
      {std::string(1000, 'k'), std::string(100000, 'v')},
      {std::string("a\0b", 3), std::string("\0\0", 2)},
      {Key8(9), std::string(9, 'x')},  // 8-byte key, longer value: record form
  };
  for (const auto& [k, v] : model) ASSERT_TRUE(index->Insert(k, v).ok());
  ExpectMatches(index.get(), model);
  EXPECT_TRUE(index->Insert(std::string(kMaxKeySize + 1, 'k'), "v").IsInvalidArgument());
  EXPECT_TRUE(index->Put("k", std::string(kMaxValueSize + 1, 'v')).IsInvalidArgument());
  EXPECT_TRUE(index->Update("", std::string(kMaxValueSize + 1, 'v')).IsInvalidArgument());
  ExpectMatches(index.get(), model);
}

TEST(GroupHashTest, UpdatesSwitchBetweenInlineAndRecordForms) {
  auto index = OpenOrDie(GroupOptions());
  const std::string k = Key8(42);
  ASSERT_TRUE(index->Insert(k, Key8(1)).ok());
  ASSERT_TRUE(index->Update(k, "a value that is not 8 bytes").ok());  // inline -> record
  EXPECT_EQ(Counter(index.get(), "undo_txs"), 1u);
  ExpectMatches(index.get(), {{k, "a value that is not 8 bytes"}});
  ASSERT_TRUE(index->Update(k, Key8(2)).ok());  // a record slot stays a record slot
  ExpectMatches(index.get(), {{k, Key8(2)}});
  ASSERT_TRUE(index->Put(k, "").ok());
  ExpectMatches(index.get(), {{k, ""}});
  EXPECT_EQ(Counter(index.get(), "undo_txs"), 1u);
}

TEST(GroupHashTest, PersistSequencesMatchThePaper) {
  // Alg. 1 and 3: two persists (flush + fence) per insert and per delete; a third with
  // persist_count=on (count persisted after every operation, as printed).
  for (const bool persist_count : {false, true}) {
    auto index = OpenOrDie(GroupOptions({{"persist_count", persist_count ? "on" : "off"}}));
    const uint64_t per_op = persist_count ? 3 : 2;
    PersistCounters before = index->Stats().persist;
    ASSERT_TRUE(index->Insert(Key8(1), Key8(2)).ok());
    PersistCounters after = index->Stats().persist;
    EXPECT_EQ(after.fences - before.fences, per_op);
    EXPECT_EQ(after.flushes - before.flushes, per_op);
    before = after;
    ASSERT_TRUE(index->Update(Key8(1), Key8(3)).ok());  // one 8-byte store, one persist
    after = index->Stats().persist;
    EXPECT_EQ(after.fences - before.fences, 1u);
    before = after;
    std::string v;
    ASSERT_TRUE(index->Get(Key8(1), &v).ok());
    after = index->Stats().persist;
    EXPECT_EQ(after.fences, before.fences);  // a query writes nothing
    EXPECT_GT(after.lines_read, before.lines_read);
    before = after;
    ASSERT_TRUE(index->Delete(Key8(1)).ok());
    after = index->Stats().persist;
    EXPECT_EQ(after.fences - before.fences, per_op);
  }
}

TEST(GroupHashTest, ResizeUnderLoadKeepsEveryKey) {
  auto index = OpenOrDie(GroupOptions({{"group_size", "16"}, {"cells", "64"}}));
  GroupHash* g = AsGroup(index.get());
  std::map<std::string, std::string> model;
  for (uint64_t i = 0; i < 20000; ++i) {
    const std::string k = i % 5 == 0 ? Bytes(i, 12, 'r') : Key8(i);
    const std::string v = i % 7 == 0 ? Bytes(i, 24, 'v') : Key8(i * 3);
    ASSERT_TRUE(index->Insert(k, v).ok()) << i;
    model[k] = v;
  }
  IndexStats st = index->Stats();
  EXPECT_GE(st.engine_counters["resizes"], 8u);
  EXPECT_GT(g->level_cells(), 32u);
  EXPECT_EQ(st.key_slots, 2 * g->level_cells());
  EXPECT_GT(st.load_factor, 0.2);
  EXPECT_LE(st.load_factor, 1.0);
  ExpectMatches(index.get(), model);
}

TEST(GroupHashTest, ResizeOffReachesResourceExhaustedNearThePapersUtilization) {
  // The paper's space-utilization experiment (Fig. 7): G = 256, fill until the first
  // refused insert. It reports about 82%; any sane load factor is accepted here.
  auto index =
      OpenOrDie(GroupOptions({{"group_size", "256"}, {"cells", "65536"}, {"resize", "off"}}));
  GroupHash* g = AsGroup(index.get());
  uint64_t i = 0;
  Status s;
  while ((s = index->Insert(Key8(i), Key8(i))).ok()) ++i;
  EXPECT_TRUE(s.IsTableFull()) << s.ToString();
  EXPECT_EQ(g->level_cells(), 32768u);  // never grew
  const IndexStats st = index->Stats();
  EXPECT_EQ(st.count, i);
  EXPECT_GT(st.load_factor, 0.6);
  EXPECT_LT(st.load_factor, 0.95);
  std::string v;
  EXPECT_TRUE(index->Get(Key8(i), &v).IsNotFound());  // the refused key is absent
  for (uint64_t j = 0; j < i; j += 97) ASSERT_TRUE(index->Get(Key8(j), &v).ok());
  EXPECT_TRUE(g->CheckInvariants().ok());
}

TEST(GroupHashTest, PoolTooSmallToGrowIsResourceExhaustedAndChangesNothing) {
  Options o = GroupOptions({{"group_size", "64"}, {"cells", "1024"}});
  o.pool_size = 4ull << 20;  // the smallest pool: the table cannot double many times
  auto index = OpenOrDie(o);
  std::map<std::string, std::string> model;
  Status s;
  for (uint64_t i = 0; i < 1000000; ++i) {
    s = index->Insert(Key8(i), Key8(i + 1));
    if (!s.ok()) break;
    model[Key8(i)] = Key8(i + 1);
  }
  // The pool, not the table, refused (a bench's fill phase tells them apart).
  ASSERT_TRUE(s.IsPoolFull()) << s.ToString();
  EXPECT_GT(Counter(index.get(), "resizes"), 0u);
  ExpectMatches(index.get(), model);
  // Still usable: deletes, updates and inserts into groups with room work.
  ASSERT_TRUE(index->Delete(Key8(0)).ok());
  model.erase(Key8(0));
  ASSERT_TRUE(index->Insert(Key8(0), Key8(9)).ok());
  model[Key8(0)] = Key8(9);
  ExpectMatches(index.get(), model);
}

TEST(GroupHashTest, BadOptionsAreInvalidArgument) {
  std::unique_ptr<Index> index;
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"group_size", "100"},
                                                        {"group_size", "2"},
                                                        {"group_size", "0"},
                                                        {"group_size", "131072"},
                                                        {"resize", "maybe"},
                                                        {"cells", "-1"},
                                                        {"no_such_option", "1"}}) {
    Status s = Open(GroupOptions({{name, value}}), &index);
    EXPECT_TRUE(s.IsInvalidArgument()) << name << "=" << value << ": " << s.ToString();
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  }
}

TEST(GroupHashTest, ForEachVisitorMayMutateAndNeverDeadlocks) {
  auto index = OpenOrDie(GroupOptions({{"group_size", "4"}, {"cells", "8"}}));
  ASSERT_TRUE(index->Insert(Key8(1), Key8(1)).ok());
  ASSERT_TRUE(index->Insert(Key8(2), Key8(2)).ok());
  int refused = 0;
  ASSERT_TRUE(index
                  ->ForEach([&](std::string_view, std::string_view) {
                    // Eight cells in all: inserts soon need a resize, which must be refused
                    // here rather than wait for this very ForEach.
                    for (uint64_t i = 100; i < 120; ++i) {
                      Status s = index->Insert(Key8(i), Key8(i));
                      if (s.IsResourceExhausted()) ++refused;
                    }
                    return false;
                  })
                  .ok());
  EXPECT_GT(refused, 0);
  // Outside ForEach the table grows again, and a visitor may delete what it visits.
  ASSERT_TRUE(index->Insert(Key8(500), Key8(500)).ok());
  ASSERT_TRUE(index->ForEach([&](std::string_view k, std::string_view) {
                     EXPECT_TRUE(index->Delete(k).ok());
                     return true;
                   })
                  .ok());
  EXPECT_EQ(index->Count(), 0u);
  ExpectMatches(index.get(), {});
}

// Seeded random operations over keys of partition `part` (half 8-byte keys, half longer),
// checked against and applied to `model`.
void RandomOps(Index* index, std::map<std::string, std::string>* model, uint64_t seed,
               int ops, uint64_t part) {
  std::mt19937_64 rng(seed);
  for (int n = 0; n < ops; ++n) {
    const uint64_t id = rng() % 400;
    const std::string k = id % 2 == 0 ? Key8((part << 56) | id)
                                      : "p" + std::to_string(part) + "-" + std::to_string(id);
    const std::string v = rng() % 3 == 0 ? Bytes(rng(), 20, 'q') : Key8(rng());
    std::string got;
    const bool present = model->count(k) > 0;
    switch (rng() % 5) {
      case 0: {
        Status s = index->Insert(k, v);
        ASSERT_EQ(s.ok(), !present) << s.ToString();
        if (!present) (*model)[k] = v;
        break;
      }
      case 1: {
        Status s = index->Update(k, v);
        ASSERT_EQ(s.ok(), present) << s.ToString();
        if (present) (*model)[k] = v;
        break;
      }
      case 2:
        ASSERT_TRUE(index->Put(k, v).ok());
        (*model)[k] = v;
        break;
      case 3: {
        Status s = index->Delete(k);
        ASSERT_EQ(s.ok(), present) << s.ToString();
        model->erase(k);
        break;
      }
      default: {
        Status s = index->Get(k, &got);
        ASSERT_EQ(s.ok(), present) << s.ToString();
        if (present) {
          ASSERT_EQ(got, (*model)[k]);
        }
      }
    }
  }
}

TEST(GroupHashTest, FourThreadsMixedOpsOnKeyPartitions) {
  for (const char* tags : {"off", "on"}) {
    SCOPED_TRACE(std::string("tags=") + tags);
    auto index =
        OpenOrDie(GroupOptions({{"group_size", "8"}, {"cells", "32"}, {"tags", tags}}));
    constexpr int kThreads = 4;
    std::vector<std::map<std::string, std::string>> models(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        RandomOps(index.get(), &models[t], 1000 + t, 6000, t);
      });
    }
    for (auto& th : threads) th.join();
    std::map<std::string, std::string> all;
    for (const auto& m : models) all.insert(m.begin(), m.end());
    EXPECT_GT(Counter(index.get(), "resizes"), 0u);
    ExpectMatches(index.get(), all);
  }
}

TEST(GroupHashTest, ReopenAfterCleanCloseAndAfterAbandon) {
  TempDir dir("group");
  for (const int run : {0, 1, 2, 3}) {
    const bool tags = run >= 2, crash = run % 2 == 1;
    SCOPED_TRACE(std::string(tags ? "tags, " : "") + (crash ? "crash" : "clean"));
    Options o = GroupOptions(
        {{"group_size", "32"}, {"cells", "128"}, {"tags", tags ? "on" : "off"}});
    o.path = dir.File("pool" + std::to_string(run));
    std::map<std::string, std::string> model;
    {
      auto index = OpenOrDie(o);
      RandomOps(index.get(), &model, crash ? 7 : 8, 4000, 0);
      for (uint64_t i = 0; i < 500; ++i) {  // enough keys to resize a few times
        ASSERT_TRUE(index->Put(Bytes(i, 16, 'p'), Bytes(i, 16, 'q')).ok());
        model[Bytes(i, 16, 'p')] = Bytes(i, 16, 'q');
      }
      ASSERT_GT(Counter(index.get(), "resizes"), 0u);
      if (crash) {
        dynamic_cast<Engine*>(index.get())->Abandon();
      } else {
        ASSERT_TRUE(index->Close().ok());
      }
    }
    Options reopen;
    reopen.path = o.path;  // engine and group size come from the pool
    auto index = OpenOrDie(reopen);
    ASSERT_NE(index, nullptr);
    const IndexStats st = index->Stats();
    EXPECT_EQ(st.engine, "group");
    EXPECT_EQ(st.recovered, crash);
    EXPECT_EQ(AsGroup(index.get())->group_size(), 32u);
    EXPECT_EQ(AsGroup(index.get())->tags(), tags);  // from the pool's layout version
    ExpectMatches(index.get(), model);
    // The index keeps working after reopening.
    RandomOps(index.get(), &model, 99, 2000, 0);
    ExpectMatches(index.get(), model);
    ASSERT_TRUE(index->Close().ok());

    Options mismatch = reopen;
    mismatch.engine_options = {{"group_size", "64"}};
    std::unique_ptr<Index> other;
    Status s = Open(mismatch, &other);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find("group_size"), std::string::npos) << s.message();
    mismatch.engine_options = {{"tags", tags ? "off" : "on"}};
    s = Open(mismatch, &other);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find("tags"), std::string::npos) << s.message();
  }
}

TEST(GroupHashTest, TagsCompareOnlyTheCellsWhoseTagMatches) {
  // One group of 256 cells per level, 200 keys: most of level 2 is occupied. Without
  // tags a negative search compares every occupied cell (Alg. 2); with tags about one in
  // 64, so it reads fewer than half the lines (the four lines of form bytes stay).
  std::map<std::string, uint64_t> lines;
  for (const char* tags : {"off", "on"}) {
    auto index = OpenOrDie(GroupOptions({{"cells", "512"}, {"resize", "off"}, {"tags", tags}}));
    for (uint64_t i = 0; i < 200; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    const uint64_t before = index->Stats().persist.lines_read;
    std::string v;
    for (uint64_t i = 1000; i < 1100; ++i) ASSERT_TRUE(index->Get(Key8(i), &v).IsNotFound());
    for (uint64_t i = 0; i < 200; ++i) ASSERT_TRUE(index->Insert(Key8(i), v).IsAlreadyExists());
    lines[tags] = index->Stats().persist.lines_read - before;
    ExpectMatches(index.get(), [] {
      Model m;
      for (uint64_t i = 0; i < 200; ++i) m[Key8(i)] = Key8(i);
      return m;
    }());
  }
  EXPECT_LT(lines["on"] * 2, lines["off"]) << lines["on"] << " vs " << lines["off"];
}

TEST(GroupHashTest, PrefetchChangesNeitherResultsNorCountedReads) {
  // prefetch=on asks for the level-1 cell, the form bytes and the compared cells early:
  // every probe answers the same and counts the same lines (Alg. 2's) as prefetch=off.
  std::map<std::string, uint64_t> lines;
  for (const char* prefetch : {"off", "on"}) {
    SCOPED_TRACE(std::string("prefetch=") + prefetch);
    auto index = OpenOrDie(
        GroupOptions({{"cells", "512"}, {"resize", "off"}, {"prefetch", prefetch}}));
    for (uint64_t i = 0; i < 300; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    const uint64_t before = index->Stats().persist.lines_read;
    std::string v;
    for (uint64_t i = 0; i < 300; ++i) {
      ASSERT_TRUE(index->Get(Key8(i), &v).ok());
      ASSERT_EQ(v, Key8(i));
    }
    for (uint64_t i = 1000; i < 1100; ++i) ASSERT_TRUE(index->Get(Key8(i), &v).IsNotFound());
    lines[prefetch] = index->Stats().persist.lines_read - before;
  }
  EXPECT_GT(lines["off"], 400u * 2);  // every probe reads its level-1 line and form bytes
  EXPECT_EQ(lines["on"], lines["off"]);
}

// Builds a file pool holding keys 0..n-1 (inline), damages it with `damage`, drops it
// unclean and reopens it.
Status DamageAndReopen(const std::string& path, uint64_t n,
                       const std::function<void(GroupHash*, uint8_t* form1, KvWords* tab1,
                                                uint64_t cells)>& damage,
                       std::unique_ptr<Index>* reopened, bool tags = false) {
  Options o =
      GroupOptions({{"group_size", "64"}, {"cells", "4096"}, {"tags", tags ? "on" : "off"}});
  o.path = path;
  {
    auto index = OpenOrDie(o);
    for (uint64_t i = 0; i < n; ++i) EXPECT_TRUE(index->Insert(Key8(i), Key8(i + 1)).ok());
    GroupHash* g = AsGroup(index.get());
    const auto* root = static_cast<const GroupRoot*>(g->pool().root());
    uint64_t table_offset = 0;
    EXPECT_TRUE(UnsealWord(root->header.table,
                           pm::kRootOffset + offsetof(EngineRoot, table), &table_offset));
    char* table = g->pool().At<char>(table_offset);
    const uint64_t cells = g->level_cells();
    damage(g, reinterpret_cast<uint8_t*>(table + GroupLayout::Form1(cells)),
           reinterpret_cast<KvWords*>(table + GroupLayout::Tab1(cells)), cells);
    g->Abandon();
  }
  Options reopen;
  reopen.path = path;
  return Open(reopen, reopened);
}

uint64_t FirstWithForm(const uint8_t* form1, uint64_t cells, bool occupied) {
  for (uint64_t i = 0; i < cells; ++i) {
    if ((form1[i] != 0) == occupied) return i;
  }
  return cells;
}

TEST(GroupHashTest, RecoveryAfterDamagedMetadataByteStaysSane) {
  TempDir dir("group");
  constexpr uint64_t kKeys = 1000;
  std::unique_ptr<Index> index;

  // An unknown form value: Corruption with a message, no crash.
  Status s = DamageAndReopen(
      dir.File("a.pool"), kKeys,
      [](GroupHash* g, uint8_t* form1, KvWords*, uint64_t cells) {
        g->persister().Store(&form1[FirstWithForm(form1, cells, true)], uint8_t{0x7f});
      },
      &index);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("level-1 cell"), std::string::npos) << s.message();

  // An occupied cell's bitmap cleared: Alg. 4 resets the cell; that key alone is gone.
  std::string lost;
  s = DamageAndReopen(
      dir.File("b.pool"), kKeys,
      [&](GroupHash* g, uint8_t* form1, KvWords* tab1, uint64_t cells) {
        const uint64_t i = FirstWithForm(form1, cells, true);
        lost.assign(reinterpret_cast<const char*>(&tab1[i].word0), 8);
        g->persister().Store(&form1[i], uint8_t{0});
      },
      &index);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::map<std::string, std::string> model;
  for (uint64_t i = 0; i < kKeys; ++i) model[Key8(i)] = Key8(i + 1);
  ASSERT_EQ(model.erase(lost), 1u);
  ExpectMatches(index.get(), model);
  EXPECT_EQ(Counter(index.get(), "recovery_cells_reset"), 1u);
  ASSERT_TRUE(index->Close().ok());

  // An empty cell marked occupied: its (zero) key is not in its home cell, so Corruption,
  // or, should it happen to be, a consistent index.
  s = DamageAndReopen(
      dir.File("c.pool"), kKeys,
      [](GroupHash* g, uint8_t* form1, KvWords*, uint64_t cells) {
        g->persister().Store(&form1[FirstWithForm(form1, cells, false)], uint8_t{1});
      },
      &index);
  if (s.ok()) {
    EXPECT_TRUE(AsGroup(index.get())->CheckInvariants().ok());
  } else {
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  }

  // An inline cell marked as a record: its key bytes are no record offset.
  s = DamageAndReopen(
      dir.File("d.pool"), kKeys,
      [](GroupHash* g, uint8_t* form1, KvWords*, uint64_t cells) {
        g->persister().Store(&form1[FirstWithForm(form1, cells, true)], uint8_t{2});
      },
      &index);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();

  // tags=on: an occupied cell's tag changed (its form bits intact), and an empty cell
  // with tag bits but no form: Corruption naming the cell.
  for (const uint8_t flip : {uint8_t{0x04}, uint8_t{0x80}}) {
    s = DamageAndReopen(
        dir.File("e" + std::to_string(flip) + ".pool"), kKeys,
        [flip](GroupHash* g, uint8_t* form1, KvWords*, uint64_t cells) {
          ASSERT_TRUE(g->tags());
          uint8_t* f = &form1[FirstWithForm(form1, cells, true)];
          g->persister().Store(f, static_cast<uint8_t>(*f ^ flip));
        },
        &index, /*tags=*/true);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find("level-1 cell"), std::string::npos) << s.message();
  }
  s = DamageAndReopen(
      dir.File("f.pool"), kKeys,
      [](GroupHash* g, uint8_t* form1, KvWords*, uint64_t cells) {
        g->persister().Store(&form1[FirstWithForm(form1, cells, false)], uint8_t{0x40});
      },
      &index, /*tags=*/true);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

}  // namespace
}  // namespace pmhash::engines
