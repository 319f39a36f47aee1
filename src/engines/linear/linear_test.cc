// Tests of `linear` and `linear-log` (parametrized over both): Index semantics, slot
// forms, backward-shift deletion against a std::unordered_map model (including runs
// that wrap past the table's end), resizing, resize=off, reopen, threads.
#include "engines/linear/linear.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pmhash/index.h"
#include "support/engine_tests.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

// A key of the given length derived from i (length 8 gives the inline form with an
// 8-byte value).
std::string KeyOf(uint64_t i, size_t len) {
  std::string k = "k" + std::to_string(i) + ":";
  while (k.size() < len) k += static_cast<char>('a' + (i + k.size()) % 26);
  k.resize(len);
  if (len == 8) return Key8(i * 0x9E3779B97F4A7C15ull + 1);
  return k;
}

class LinearTest : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override { index_.reset(); }

  Options BaseOptions() const { return testing::OptionsFor(GetParam(), {}, 32ull << 20); }

  // A new pool file in the test's directory (removed with it).
  std::string TempPath() { return dir_.File("pool" + std::to_string(paths_++)); }

  void OpenWith(const Options& o) {
    index_.reset();
    Status s = Open(o, &index_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  LinearProbing* Engine() { return dynamic_cast<LinearProbing*>(index_.get()); }

  void ExpectInvariants() {
    ASSERT_NE(Engine(), nullptr);
    Status s = Engine()->CheckInvariants();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  // The index holds exactly the model (testing::CheckIndex).
  void ExpectEquals(const std::unordered_map<std::string, std::string>& model) {
    EXPECT_EQ(testing::CheckIndex(index_.get(), testing::Model(model.begin(), model.end()),
                                  nullptr),
              "");
  }

  TempDir dir_{"linear"};
  int paths_ = 0;
  std::unique_ptr<Index> index_;
};

TEST_P(LinearTest, RegisteredWithCrashConsistencyFlag) {
  const EngineDescription d = testing::Registration(GetParam());
  EXPECT_EQ(d.crash_consistent, GetParam() == "linear-log");
  EXPECT_EQ(d.paper, "baseline (004)");
}

TEST_P(LinearTest, InsertUpdatePutGetDeleteStatuses) {
  OpenWith(BaseOptions());
  std::string v = "unchanged";
  EXPECT_TRUE(index_->Get(Key8(1), &v).IsNotFound());
  EXPECT_EQ(v, "unchanged");
  EXPECT_TRUE(index_->Update(Key8(1), Key8(10)).IsNotFound());
  EXPECT_TRUE(index_->Delete(Key8(1)).IsNotFound());

  ASSERT_TRUE(index_->Insert(Key8(1), Key8(10)).ok());
  EXPECT_TRUE(index_->Insert(Key8(1), Key8(11)).IsAlreadyExists());
  ASSERT_TRUE(index_->Get(Key8(1), &v).ok());
  EXPECT_EQ(v, Key8(10));
  EXPECT_EQ(index_->Count(), 1u);

  ASSERT_TRUE(index_->Update(Key8(1), Key8(12)).ok());
  ASSERT_TRUE(index_->Get(Key8(1), &v).ok());
  EXPECT_EQ(v, Key8(12));

  ASSERT_TRUE(index_->Put(Key8(2), Key8(20)).ok());  // inserts
  ASSERT_TRUE(index_->Put(Key8(2), Key8(21)).ok());  // updates
  ASSERT_TRUE(index_->Get(Key8(2), &v).ok());
  EXPECT_EQ(v, Key8(21));
  EXPECT_EQ(index_->Count(), 2u);

  ASSERT_TRUE(index_->Delete(Key8(1)).ok());
  EXPECT_TRUE(index_->Delete(Key8(1)).IsNotFound());
  EXPECT_TRUE(index_->Get(Key8(1), &v).IsNotFound());
  EXPECT_EQ(index_->Count(), 1u);
  ExpectInvariants();
}

TEST_P(LinearTest, InlineRecordAndLongItems) {
  OpenWith(BaseOptions());
  std::unordered_map<std::string, std::string> model;
  const std::string key16 = "0123456789abcdef";                  // Fingerprint-like
  model[Key8(7)] = Key8(70);                                     // inline 8/8
  model[key16] = std::string(16, 'v');                           // 16-byte key and value
  model[""] = "empty key";                                       // empty key
  model["empty value"] = "";                                     // empty value
  model[std::string(1000, 'K')] = std::string(100 * 1024, 'V');  // long key and value
  model[std::string(8, '\0')] = std::string(8, '\0');            // zero bytes, inline
  for (const auto& [k, v] : model) ASSERT_TRUE(index_->Insert(k, v).ok()) << k.size();
  ExpectEquals(model);

  // inline -> record (value no longer 8 bytes), record -> record, record -> 8 bytes.
  model[Key8(7)] = "a longer value than eight bytes";
  ASSERT_TRUE(index_->Update(Key8(7), model[Key8(7)]).ok());
  model[key16] = "x";
  ASSERT_TRUE(index_->Update(key16, "x").ok());
  model[Key8(7)] = Key8(71);
  ASSERT_TRUE(index_->Put(Key8(7), Key8(71)).ok());
  ExpectEquals(model);
  ExpectInvariants();

  EXPECT_TRUE(index_->Insert(std::string(kMaxKeySize + 1, 'k'), "v").IsInvalidArgument());
  EXPECT_TRUE(index_->Put("k", std::string(kMaxValueSize + 1, 'v')).IsInvalidArgument());
  EXPECT_TRUE(index_->Update(key16, std::string(kMaxValueSize + 1, 'v')).IsInvalidArgument());
  std::string v;
  ASSERT_TRUE(index_->Get(key16, &v).ok());
  EXPECT_EQ(v, "x");  // a refused update changes nothing
  EXPECT_EQ(index_->Count(), model.size());
}

TEST_P(LinearTest, ForEachStopsWhenAsked) {
  OpenWith(BaseOptions());
  for (uint64_t i = 0; i < 50; ++i) ASSERT_TRUE(index_->Insert(Key8(i), Key8(i)).ok());
  int calls = 0;
  ASSERT_TRUE(index_->ForEach([&](std::string_view, std::string_view) { return ++calls < 5; })
                  .ok());
  EXPECT_EQ(calls, 5);
}

// Guards the backward shift across the table's end: a run that starts in the last cell
// and continues at cell 0.
TEST_P(LinearTest, DeleteShiftsBackAcrossTheTableEnd) {
  Options o = BaseOptions();
  o.engine_options = {{"resize", "off"}};
  o.engine_options["cells"] = "30";
  OpenWith(o);
  ASSERT_EQ(Engine()->cells(), 30u);
  std::vector<std::string> last = KeysWithHome(29, 30, 3, 1);     // cells 29, 0, 1
  std::vector<std::string> first = KeysWithHome(0, 30, 2, 1000);  // cells 2, 3
  std::vector<std::string> two = KeysWithHome(2, 30, 1, 5000);    // cell 4
  std::unordered_map<std::string, std::string> model;
  for (const auto* group : {&last, &first, &two}) {
    for (const std::string& k : *group) {
      ASSERT_TRUE(index_->Insert(k, k).ok());
      model[k] = k;
    }
  }
  ExpectInvariants();
  // Delete the run's head (cell 29): everything after it must shift back across the end.
  ASSERT_TRUE(index_->Delete(last[0]).ok());
  model.erase(last[0]);
  ExpectInvariants();
  ExpectEquals(model);
  // A delete in the middle of the run (home 0 key at cell 1 after the shift).
  ASSERT_TRUE(index_->Delete(first[0]).ok());
  model.erase(first[0]);
  ExpectInvariants();
  ExpectEquals(model);
  EXPECT_GT(index_->Stats().engine_counters.at("shifted_cells"), 0u);
}

// KeysDisplacedByOne(1500, 900) in a 1500-cell table: deleting the key in cell 0 must
// move all 899 others, whichever key fills each hole, so linear-log must log all their
// lines: 300 lines, beyond one lane of the smallest pool (16 KiB).

// A delete that moves more keys than one undo-log lane can log: linear-log refuses it with
// resizing off and leaves the table unchanged; linear (no log) just does it.
TEST_P(LinearTest, MovesLongerThanALaneLeaveTheTableUnchanged) {
  Options o = BaseOptions();
  o.pool_size = 4ull << 20;  // the smallest pool has the smallest lanes (16 KiB)
  o.engine_options = {{"resize", "off"}};
  o.engine_options["cells"] = "1500";
  OpenWith(o);
  const std::vector<std::string> keys = KeysDisplacedByOne(1500, 900);
  for (const std::string& k : keys) ASSERT_TRUE(index_->Insert(k, k).ok());
  Status s = index_->Delete(keys[0]);
  std::unordered_map<std::string, std::string> model;
  for (const std::string& k : keys) model[k] = k;
  if (GetParam() == "linear-log") {
    EXPECT_TRUE(s.IsResourceExhausted()) << s.ToString();
    EXPECT_NE(s.message().find("undo-log lane"), std::string::npos) << s.ToString();
  } else {
    ASSERT_TRUE(s.ok()) << s.ToString();
    model.erase(keys[0]);
  }
  ExpectInvariants();
  ExpectEquals(model);
  // A delete near the run's end shifts little and works in both.
  ASSERT_TRUE(index_->Delete(keys[890]).ok());
  model.erase(keys[890]);
  ExpectInvariants();
  ExpectEquals(model);
}

// Regression: linear-log refused (ResourceExhausted) a delete whose backward shift was
// longer than one undo-log lane holds, at the default max_load (found by the kill soak:
// a 757-cell run in a 4224-cell table). With resizing on, the delete doubles the table
// until its moves fit, and succeeds.
TEST_P(LinearTest, LongShiftDeleteGrowsTheTableInsteadOfFailing) {
  Options o = BaseOptions();
  o.pool_size = 4ull << 20;  // the smallest lanes (16 KiB, about 750 cells)
  o.engine_options["cells"] = "1500";
  OpenWith(o);
  const std::vector<std::string> keys = KeysDisplacedByOne(1500, 900);
  std::unordered_map<std::string, std::string> model;
  for (const std::string& k : keys) {
    ASSERT_TRUE(index_->Insert(k, k).ok());
    model[k] = k;
  }
  const uint64_t resizes = Counter(index_.get(), "resizes");
  const Status s = index_->Delete(keys[0]);
  ASSERT_TRUE(s.ok()) << s.ToString();
  model.erase(keys[0]);
  if (GetParam() == "linear-log") {
    EXPECT_GT(Counter(index_.get(), "resizes"), resizes) << "the table should have doubled";
  } else {
    EXPECT_EQ(Counter(index_.get(), "resizes"), resizes) << "linear logs nothing: no need";
  }
  ExpectInvariants();
  ExpectEquals(model);
}

// Regression (the degenerate-hash conformance run): a delete in a long run of keys of one
// home (colliding or crafted keys) made linear-log double its table until the pool was
// full, since no table size shortens such a run, and then refuse the delete. Now the
// backward shift, too long to log, gives way to the fewest moves: the last key of the
// run fills the hole, one move, no doubling.
TEST_P(LinearTest, DeleteInARunOfOneHomeMovesOneKeyAndNeverDoubles) {
  Options o = BaseOptions();
  o.pool_size = 4ull << 20;
  o.engine_options["cells"] = "1500";
  OpenWith(o);
  const std::vector<std::string> keys = KeysWithHome(0, 1500, 900, 1);  // cells 0..899
  std::unordered_map<std::string, std::string> model;
  for (const std::string& k : keys) {
    ASSERT_TRUE(index_->Insert(k, k).ok());
    model[k] = k;
  }
  const uint64_t resizes = Counter(index_.get(), "resizes");
  const uint64_t shifted = Counter(index_.get(), "shifted_cells");
  ASSERT_TRUE(index_->Delete(keys[0]).ok());
  model.erase(keys[0]);
  EXPECT_EQ(Counter(index_.get(), "resizes"), resizes);
  if (GetParam() == "linear-log") {
    EXPECT_EQ(Counter(index_.get(), "fewest_move_deletes"), 1u);
    EXPECT_EQ(Counter(index_.get(), "shifted_cells"), shifted + 1);
  } else {
    EXPECT_EQ(Counter(index_.get(), "shifted_cells"), shifted + 899);  // the paper's shift
  }
  ExpectInvariants();
  ExpectEquals(model);
}

// Seeded random sequences against a model, in a small table at high load so that runs
// are long, deletes land in the middle of runs, and runs wrap past the end.
TEST_P(LinearTest, RandomOperationsMatchModel) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Options o = BaseOptions();
    o.engine_options = {{"resize", "off"}};
    o.engine_options["cells"] = "60";
    OpenWith(o);
    const uint64_t cells = Engine()->cells();
    std::mt19937_64 rng(seed);
    std::unordered_map<std::string, std::string> model;
    std::vector<std::string> keys;
    for (uint64_t i = 0; i < 75; ++i) keys.push_back(KeyOf(i, i % 4 == 0 ? 16 : 8));
    for (int step = 0; step < 3000; ++step) {
      const std::string& k = keys[rng() % keys.size()];
      const bool absent = model.count(k) == 0;
      const std::string v = rng() % 3 == 0 ? "value-" + std::to_string(step) : Key8(rng());
      switch (rng() % 5) {
        case 0:
        case 1: {
          Status s = index_->Insert(k, v);
          if (!absent) {
            EXPECT_TRUE(s.IsAlreadyExists()) << s.ToString();
          } else if (model.size() == cells) {
            EXPECT_TRUE(s.IsResourceExhausted()) << s.ToString();
          } else {
            ASSERT_TRUE(s.ok()) << s.ToString();
            model[k] = v;
          }
          break;
        }
        case 2: {
          Status s = index_->Delete(k);
          EXPECT_EQ(s.ok(), !absent) << s.ToString();
          model.erase(k);
          break;
        }
        case 3: {
          Status s = index_->Update(k, v);
          EXPECT_EQ(s.ok(), !absent) << s.ToString();
          if (!absent) model[k] = v;
          break;
        }
        default: {
          std::string got;
          Status s = index_->Get(k, &got);
          ASSERT_EQ(s.ok(), !absent) << s.ToString();
          if (!absent) {
            EXPECT_EQ(got, model[k]);
          }
        }
      }
      ASSERT_EQ(index_->Count(), model.size());
      if (step % 100 == 0) {
        ExpectInvariants();
        if (HasFailure()) return;
      }
    }
    ExpectInvariants();
    ExpectEquals(model);
  }
}

TEST_P(LinearTest, GrowsUnderLoad) {
  Options o = BaseOptions();
  o.engine_options["cells"] = "30";
  OpenWith(o);
  std::unordered_map<std::string, std::string> model;
  for (uint64_t i = 0; i < 4000; ++i) {
    const std::string k = KeyOf(i, i % 5 == 0 ? 20 : 8);
    ASSERT_TRUE(index_->Insert(k, k).ok()) << i;
    model[k] = k;
    if (i % 3 == 0) {  // deletes between resizes
      const std::string d = KeyOf(i / 2, (i / 2) % 5 == 0 ? 20 : 8);
      if (model.erase(d) == 1) {
        ASSERT_TRUE(index_->Delete(d).ok());
      }
    }
  }
  IndexStats st = index_->Stats();
  EXPECT_GT(st.engine_counters.at("resizes"), 5u);
  EXPECT_EQ(st.key_slots, Engine()->cells());
  EXPECT_LE(st.load_factor, 0.9);
  EXPECT_GT(st.load_factor, 0.3);
  ExpectInvariants();
  ExpectEquals(model);
}

TEST_P(LinearTest, MaxLoadOptionSetsTheGrowthPoint) {
  Options o = BaseOptions();
  o.engine_options = {{"max_load", "0.5"}};
  o.engine_options["cells"] = "300";
  OpenWith(o);
  for (uint64_t i = 0; i < 150; ++i) ASSERT_TRUE(index_->Insert(Key8(i), Key8(i)).ok());
  EXPECT_EQ(index_->Stats().engine_counters.at("resizes"), 0u);
  ASSERT_TRUE(index_->Insert(Key8(150), Key8(150)).ok());
  EXPECT_EQ(index_->Stats().engine_counters.at("resizes"), 1u);
  EXPECT_EQ(Engine()->cells(), 600u);
}

TEST_P(LinearTest, ResizeOffFillsToTheLastCell) {
  Options o = BaseOptions();
  o.engine_options = {{"resize", "off"}};
  o.engine_options["cells"] = "300";
  OpenWith(o);
  uint64_t i = 0;
  Status s;
  for (; i < 1000; ++i) {
    s = index_->Insert(Key8(i), Key8(i));
    if (!s.ok()) break;
  }
  ASSERT_TRUE(s.IsTableFull()) << s.ToString();
  IndexStats st = index_->Stats();
  EXPECT_EQ(st.count, 300u);
  EXPECT_EQ(st.key_slots, 300u);
  EXPECT_DOUBLE_EQ(st.load_factor, 1.0);
  EXPECT_TRUE(index_->Insert(Key8(i), Key8(i)).IsTableFull());
  EXPECT_TRUE(index_->Insert(Key8(0), Key8(0)).IsAlreadyExists());
  // Updates and deletes still work in a full table; a delete makes room again.
  ASSERT_TRUE(index_->Update(Key8(5), "now a record value").ok());
  ASSERT_TRUE(index_->Delete(Key8(7)).ok());
  ASSERT_TRUE(index_->Insert(Key8(i), Key8(i)).ok());
  EXPECT_EQ(index_->Count(), 300u);
  ExpectInvariants();
}

TEST_P(LinearTest, BadOptionsAreRejected) {
  for (const auto& [name, value] : std::map<std::string, std::string>{
           {"max_load", "1.5"}, {"max_load", "abc"}, {"resize", "maybe"}, {"bogus", "1"}}) {
    Options o = BaseOptions();
    o.engine_options = {{name, value}};
    std::unique_ptr<Index> index;
    Status s = Open(o, &index);
    EXPECT_TRUE(s.IsInvalidArgument()) << name << "=" << value << ": " << s.ToString();
  }
}

TEST_P(LinearTest, TableTooBigForThePoolIsAClearError) {
  for (uint64_t capacity : {uint64_t{1} << 40, ~uint64_t{0}}) {
    Options o = BaseOptions();
    o.initial_capacity = capacity;  // keys: twice as many cells
    std::unique_ptr<Index> index;
    Status s = Open(o, &index);
    EXPECT_TRUE(s.IsPoolFull()) << s.ToString();
    EXPECT_EQ(index, nullptr);
  }
}

std::unordered_map<std::string, std::string> FillMixed(Index* index, uint64_t n) {
  std::unordered_map<std::string, std::string> model;
  for (uint64_t i = 0; i < n; ++i) {
    const std::string k = KeyOf(i, i % 3 == 0 ? 16 : 8);
    const std::string v = i % 4 == 0 ? std::string(40, 'a' + i % 26) : Key8(i * 7);
    EXPECT_TRUE(index->Insert(k, v).ok());
    model[k] = v;
  }
  for (uint64_t i = 0; i < n; i += 5) {
    const std::string k = KeyOf(i, i % 3 == 0 ? 16 : 8);
    EXPECT_TRUE(index->Delete(k).ok());
    model.erase(k);
  }
  return model;
}

TEST_P(LinearTest, ReopensAfterCleanClose) {
  Options o = BaseOptions();
  o.path = TempPath();
  o.pool_size = 8ull << 20;
  o.engine_options["cells"] = "90";
  OpenWith(o);
  auto model = FillMixed(index_.get(), 600);  // grows several times
  const uint64_t cells = Engine()->cells();
  ASSERT_TRUE(index_->Close().ok());
  index_.reset();

  Options reopen;
  reopen.path = o.path;  // engine taken from the pool
  OpenWith(reopen);
  EXPECT_FALSE(index_->Stats().recovered);
  EXPECT_EQ(index_->Stats().engine, GetParam());
  EXPECT_EQ(Engine()->cells(), cells);
  ExpectEquals(model);
  ExpectInvariants();
  // Still works after reopening.
  ASSERT_TRUE(index_->Insert("after reopen", "yes").ok());
  ASSERT_TRUE(index_->Delete(KeyOf(1, 8)).ok());
  ExpectInvariants();
}

// Abandon() drops the index as a crash between operations would. Both engines hold every
// acknowledged operation then; only linear-log promises it for a crash inside one.
TEST_P(LinearTest, RecoversAfterAbandon) {
  Options o = BaseOptions();
  o.path = TempPath();
  o.pool_size = 8ull << 20;
  o.engine_options["cells"] = "90";
  OpenWith(o);
  auto model = FillMixed(index_.get(), 500);
  dynamic_cast<engines::Engine*>(index_.get())->Abandon();
  index_.reset();

  OpenWith(o);
  EXPECT_TRUE(index_->Stats().recovered);
  ExpectEquals(model);
  ExpectInvariants();
  // Blocks were rebuilt correctly: the index keeps working, records get reused.
  for (uint64_t i = 1000; i < 1300; ++i) {
    ASSERT_TRUE(index_->Put(KeyOf(i, 24), std::string(30, 'z')).ok());
    model[KeyOf(i, 24)] = std::string(30, 'z');
  }
  ExpectEquals(model);
  ExpectInvariants();
}

TEST_P(LinearTest, FourThreadsMixedOperations) {
  Options o = BaseOptions();
  o.engine_options["cells"] = "64";  // resizes happen while threads run
  OpenWith(o);
  constexpr int kThreads = 4;
  std::vector<std::unordered_map<std::string, std::string>> models(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      auto& model = models[t];
      for (int step = 0; step < 3000; ++step) {
        const uint64_t id = t * 1000000 + rng() % 400;
        const std::string k = KeyOf(id, id % 3 == 0 ? 16 : 8);
        const std::string v = step % 4 == 0 ? "val-" + std::to_string(step) : Key8(step);
        const bool present = model.count(k) != 0;
        std::string got;
        switch (rng() % 4) {
          case 0:
            if (index_->Put(k, v).ok()) {
              model[k] = v;
            } else {
              ++errors;
            }
            break;
          case 1:
            if (index_->Delete(k).ok() != present) ++errors;
            model.erase(k);
            break;
          case 2:
            if (index_->Insert(k, v).ok() == present) ++errors;
            if (!present) model[k] = v;
            break;
          default: {
            Status s = index_->Get(k, &got);
            if (s.ok() != present || (present && got != model[k])) ++errors;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  std::unordered_map<std::string, std::string> all;
  for (auto& m : models) all.insert(m.begin(), m.end());
  ExpectEquals(all);
  ExpectInvariants();
}

INSTANTIATE_TEST_SUITE_P(Engines, LinearTest, ::testing::Values("linear", "linear-log"),
                         [](const auto& info) {
                           return info.param == "linear" ? std::string("Linear")
                                                         : std::string("LinearLog");
                         });

// The paper's point (section 2.3): logging costs extra flushes on insert and delete.
TEST(LinearLoggingCost, LoggingAddsFlushesToInsertAndDelete) {
  auto flushes = [](const std::string& engine, bool del) {
    Options o;
    o.engine = engine;
    o.pool_size = 16ull << 20;
    o.engine_options["cells"] = "3000";
    o.count_stats = true;  // off by default
    std::unique_ptr<Index> index;
    EXPECT_TRUE(Open(o, &index).ok());
    for (uint64_t i = 0; i < 1000; ++i) EXPECT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    const uint64_t before = index->Stats().persist.flushes;
    for (uint64_t i = 1000; i < 1100; ++i) {
      if (del) {
        EXPECT_TRUE(index->Delete(Key8(i - 1000)).ok());
      } else {
        EXPECT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
      }
    }
    return index->Stats().persist.flushes - before;
  };
  for (bool del : {false, true}) {
    const uint64_t plain = flushes("linear", del);
    const uint64_t logged = flushes("linear-log", del);
    EXPECT_GT(plain, 0u);
    EXPECT_GT(logged, plain) << (del ? "delete" : "insert");
  }
}

}  // namespace
}  // namespace pmhash::engines
