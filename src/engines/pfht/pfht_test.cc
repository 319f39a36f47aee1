// Unit tests of `pfht` and `pfht-log` beyond the generic suites: options, growth with
// displacements and the stash, a full table refusing cleanly with resize off, reopen, and
// what the log costs.
#include "engines/pfht/pfht.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "support/engine_tests.h"

namespace pmhash::engines {
namespace {

using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

Options PfhtOptions(const std::string& engine, std::map<std::string, std::string> opts = {}) {
  return OptionsFor(engine, std::move(opts), 64ull << 20);
}

class PfhtTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PfhtTest, BadOptionsAreInvalidArgument) {
  std::unique_ptr<Index> index;
  Status s = Open(PfhtOptions(GetParam(), {{"buckets", "1"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = Open(PfhtOptions(GetParam(), {{"min_resize_load", "2"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
}

TEST_P(PfhtTest, GrowsAndKeepsEveryKey) {
  auto index = OpenOrDie(PfhtOptions(GetParam(), {{"buckets", "4"}}));
  ASSERT_NE(index, nullptr);
  Model model;
  for (uint64_t i = 0; i < 20000; ++i) {
    const std::string k = i % 7 == 0 ? "long key " + std::to_string(i) : Key8(i);
    const std::string v = i % 5 == 0 ? "long value " + std::to_string(i) : Key8(i + 1);
    ASSERT_TRUE(index->Insert(k, v).ok()) << i;
    model[k] = v;
  }
  const uint64_t resizes = Counter(index.get(), "resizes");
  EXPECT_GE(resizes, 8u);
  EXPECT_EQ(Counter(index.get(), "buckets"), uint64_t{4} << resizes);
  EXPECT_GT(Counter(index.get(), "displacements"), 0u);
  EXPECT_GT(Counter(index.get(), "stash_inserts"), 0u);
  EXPECT_EQ(Counter(index.get(), "log_txs") > 0, GetParam() == "pfht-log");
  ExpectMatches(index.get(), model);
  for (uint64_t i = 0; i < 20000; i += 2) {
    const std::string k = i % 7 == 0 ? "long key " + std::to_string(i) : Key8(i);
    ASSERT_TRUE(index->Delete(k).ok());
    model.erase(k);
  }
  ExpectMatches(index.get(), model);
}

TEST_P(PfhtTest, FullTableWithResizeOffRefusesCleanly) {
  // Two buckets (8 slots) and a stash of one bucket (4 slots): at most 12 keys.
  auto index = OpenOrDie(PfhtOptions(GetParam(), {{"buckets", "2"}, {"resize", "off"}}));
  ASSERT_NE(index, nullptr);
  Model model;
  int refused = 0;
  for (uint64_t i = 0; i < 40; ++i) {
    const Status s = index->Insert(Key8(i), Key8(i));
    if (s.IsTableFull()) {
      ++refused;
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.ToString();
    model[Key8(i)] = Key8(i);
  }
  EXPECT_LE(model.size(), 12u);
  EXPECT_EQ(refused, 40 - static_cast<int>(model.size()));
  EXPECT_EQ(Counter(index.get(), "stash_used"), 4u);
  ExpectMatches(index.get(), model);
  // A delete makes room again.
  ASSERT_TRUE(index->Delete(Key8(0)).ok());
  model.erase(Key8(0));
  ExpectMatches(index.get(), model);
}

TEST_P(PfhtTest, ReopensWithItsStash) {
  TempDir dir("pfht");
  Options o = PfhtOptions(GetParam(), {{"buckets", "8"}, {"resize", "off"}});
  o.path = dir.File("pool");
  Model model;
  {
    auto index = OpenOrDie(o);
    ASSERT_NE(index, nullptr);
    for (uint64_t i = 0; i < 60; ++i) {
      const Status s = index->Insert(Key8(i), "value " + std::to_string(i));
      if (s.ok()) model[Key8(i)] = "value " + std::to_string(i);
    }
    ASSERT_GT(Counter(index.get(), "stash_used"), 0u);
    ASSERT_TRUE(index->Close().ok());
  }
  auto index = OpenOrDie(o);
  ASSERT_NE(index, nullptr);
  EXPECT_GT(Counter(index.get(), "stash_used"), 0u);
  ExpectMatches(index.get(), model);
}

INSTANTIATE_TEST_SUITE_P(Variants, PfhtTest, ::testing::Values("pfht", "pfht-log"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "pfht" ? std::string("pfht")
                                                       : std::string("pfht_log");
                         });

// The log's price (WOPHI's Fig. 3: PFHT-Log's flushes per insert): the same inserts and
// deletes flush more lines logged than not.
TEST(PfhtLogTest, LoggingCostsFlushes) {
  uint64_t flushes[2] = {0, 0};
  const char* engines[2] = {"pfht", "pfht-log"};
  for (int e = 0; e < 2; ++e) {
    auto index = OpenOrDie(PfhtOptions(engines[e], {{"buckets", "1024"}}));
    ASSERT_NE(index, nullptr);
    for (uint64_t i = 0; i < 2000; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    for (uint64_t i = 0; i < 2000; i += 2) ASSERT_TRUE(index->Delete(Key8(i)).ok());
    flushes[e] = index->Stats().persist.flushes;
  }
  EXPECT_GT(flushes[1], 2 * flushes[0]) << flushes[0] << " vs " << flushes[1];
}

}  // namespace
}  // namespace pmhash::engines
