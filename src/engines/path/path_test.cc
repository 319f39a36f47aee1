// Unit tests of `path` and `path-log` beyond the generic suites: options, growth by
// doubling the leaves (the old levels copied up, the old top re-placed), the load factor
// the papers claim, refusals, reopen (clean and after Abandon), the log's transactions,
// threads.
#include "engines/path/path.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "support/engine_tests.h"

namespace pmhash::engines {
namespace {

using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

class PathTest : public ::testing::TestWithParam<std::string> {
 protected:
  Options PathOptions(std::map<std::string, std::string> engine_options = {}) const {
    return OptionsFor(GetParam(), std::move(engine_options), 64ull << 20);
  }
};

TEST_P(PathTest, BadOptionsAreInvalidArgument) {
  std::unique_ptr<Index> index;
  Status s = Open(PathOptions({{"leaves", "6"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("power of two"), std::string::npos) << s.message();
  s = Open(PathOptions({{"reserved_levels", "0"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
}

TEST_P(PathTest, GrowsAndKeepsEveryKey) {
  auto index = OpenOrDie(PathOptions({{"leaves", "4"}, {"reserved_levels", "6"}}));
  ASSERT_NE(index, nullptr);
  Model model;
  for (uint64_t i = 0; i < 20000; ++i) {
    const std::string k = i % 7 == 0 ? "long key " + std::to_string(i) : Key8(i);
    const std::string v = i % 5 == 0 ? "long value " + std::to_string(i) : Key8(i + 1);
    ASSERT_TRUE(index->Insert(k, v).ok()) << i;
    model[k] = v;
  }
  const uint64_t resizes = Counter(index.get(), "resizes");
  EXPECT_GE(resizes, 10u);
  EXPECT_EQ(Counter(index.get(), "leaves"), uint64_t{4} << resizes);
  EXPECT_EQ(Counter(index.get(), "levels"), 6u);
  // Once six levels are kept, each doubling re-places the keys of the old top level.
  EXPECT_GT(Counter(index.get(), "replaced_top_keys"), 0u);
  ExpectMatches(index.get(), model);
  for (uint64_t i = 0; i < 20000; i += 2) {
    const std::string k = i % 7 == 0 ? "long key " + std::to_string(i) : Key8(i);
    ASSERT_TRUE(index->Delete(k).ok());
    model.erase(k);
  }
  ExpectMatches(index.get(), model);
}

TEST_P(PathTest, LoadFactorAtTheFirstResizeIsHigh) {
  // The papers' point for 20 reserved levels: path sharing and two paths fill the tree to
  // a high load before an insert fails (Group hashing's Fig. 7 puts path hashing above
  // group's ~82%). 1024 leaves keep 11 levels, 2047 cells.
  auto index = OpenOrDie(PathOptions({{"leaves", "1024"}}));
  ASSERT_NE(index, nullptr);
  uint64_t i = 0;
  for (; Counter(index.get(), "resizes") == 0; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
  }
  const double load = static_cast<double>(i - 1) / 2047.0;
  EXPECT_GT(load, 0.85) << "keys before the first resize: " << i - 1;
}

TEST_P(PathTest, RefusesWhenFullWithResizeOff) {
  auto index = OpenOrDie(PathOptions({{"leaves", "4"}, {"reserved_levels", "2"},
                                      {"resize", "off"}}));
  ASSERT_NE(index, nullptr);
  Model model;
  Status s;
  for (uint64_t i = 0; i < 100; ++i) {
    s = index->Insert(Key8(i), Key8(i));
    if (s.IsTableFull()) continue;
    ASSERT_TRUE(s.ok()) << s.ToString();
    model[Key8(i)] = Key8(i);
  }
  EXPECT_LE(model.size(), 6u);  // 4 leaves and 2 cells above them
  EXPECT_GT(Counter(index.get(), "full_path_refusals"), 0u);
  EXPECT_EQ(Counter(index.get(), "resizes"), 0u);
  ExpectMatches(index.get(), model);
}

TEST_P(PathTest, ReopensCleanAndAfterAbandon) {
  TempDir dir("path");
  Options o = PathOptions({{"leaves", "8"}, {"reserved_levels", "4"}});
  o.path = dir.File("pool");
  o.pool_size = 16ull << 20;
  Model model;
  {
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    for (uint64_t i = 0; i < 3000; ++i) {
      ASSERT_TRUE(index->Insert(Key8(i), "value " + std::to_string(i)).ok());
      model[Key8(i)] = "value " + std::to_string(i);
    }
    ASSERT_TRUE(index->Close().ok());
  }
  {
    Options other = o;
    other.engine_options["reserved_levels"] = "5";
    std::unique_ptr<Index> index;
    const Status s = Open(other, &index);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  }
  {
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    ExpectMatches(index.get(), model);
    for (uint64_t i = 3000; i < 6000; ++i) {
      ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
      model[Key8(i)] = Key8(i);
    }
    for (uint64_t i = 0; i < 1000; ++i) {
      ASSERT_TRUE(index->Delete(Key8(i)).ok());
      model.erase(Key8(i));
    }
    dynamic_cast<Engine*>(index.get())->Abandon();
  }
  auto index = OpenOrDie(o);
  ASSERT_NE(index, nullptr);
  ExpectMatches(index.get(), model);
}

TEST_P(PathTest, EveryWriteOfPathLogIsATransaction) {
  auto index = OpenOrDie(PathOptions({{"leaves", "64"}}));
  ASSERT_NE(index, nullptr);
  ASSERT_TRUE(index->Insert(Key8(1), Key8(2)).ok());
  ASSERT_TRUE(index->Insert("a key of 16 bytes", "a value").ok());
  ASSERT_TRUE(index->Put(Key8(1), Key8(3)).ok());
  ASSERT_TRUE(index->Put("a key of 16 bytes", "another value").ok());
  ASSERT_TRUE(index->Delete(Key8(1)).ok());
  // path: an inline value update is one store, a record update publishes a pointer, and
  // neither insert nor delete logs. path-log: all five are undo-log transactions.
  EXPECT_EQ(Counter(index.get(), "undo_txs"), GetParam() == "path-log" ? 5u : 0u);
  ExpectMatches(index.get(), {{"a key of 16 bytes", "another value"}});
}

TEST_P(PathTest, ThreadsAgreeWithTheirModels) {
  auto index = OpenOrDie(PathOptions({{"leaves", "16"}, {"reserved_levels", "8"}}));
  ASSERT_NE(index, nullptr);
  ExpectThreadsAgreeWithTheirModels(index.get(), 4, 3000, 5);
  EXPECT_GT(Counter(index.get(), "resizes"), 0u);
}

INSTANTIATE_TEST_SUITE_P(Engines, PathTest, ::testing::Values("path", "path-log"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "path" ? std::string("Path")
                                                       : std::string("PathLog");
                         });

}  // namespace
}  // namespace pmhash::engines
