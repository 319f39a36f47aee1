// Tests of `pmhash bench ab` (src/bench/ab.h): the slices and orders it measures, that
// each side gets its own options, and bad input. Correctness only: nothing is timed.
#include "bench/ab.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "bench/json.h"

namespace pmhash::bench {
namespace {

AbConfig Small() {
  AbConfig c;
  c.engine = "cceh";
  c.records = 5000;
  c.ops = 3000;
  c.slice = 1000;
  c.dram_pool = true;
  return c;
}

TEST(BenchAb, MeasuresEverySliceOfEveryPhaseInBothOrders) {
  AbConfig c = Small();
  c.b_options = {{"first_try", "off"}};
  c.phases = {"insert", "search", "negative", "delete"};
  AbResult r;
  const Status s = MeasureAb(c, DefaultEnv(), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(r.phases.size(), 4u);
  const size_t slices[] = {5, 3, 3, 3};  // 5000 inserts, 3000 of each lookup, 3000 deletes
  for (size_t p = 0; p < 4; ++p) {
    EXPECT_EQ(r.phases[p].phase, c.phases[p]);
    ASSERT_EQ(r.phases[p].ratios.size(), 2u);
    for (int o = 0; o < 2; ++o) {
      ASSERT_EQ(r.phases[p].ratios[o].size(), slices[p]) << p;
      ASSERT_EQ(r.phases[p].a_mops[o].size(), slices[p]);
      for (size_t k = 0; k < slices[p]; ++k) {
        EXPECT_GT(r.phases[p].ratios[o][k], 0);
        // The ratio is A's time over B's: A's rate over B's, inverted.
        EXPECT_NEAR(r.phases[p].ratios[o][k],
                    r.phases[p].b_mops[o][k] / r.phases[p].a_mops[o][k], 1e-9);
      }
    }
    EXPECT_GT(r.phases[p].ratio, 0);
  }
}

TEST(BenchAb, TheJsonFileHoldsEverySlice) {
  // Written through bench/json.h (option values quoted as JSON strings), parsed back.
  const std::string path = ::testing::TempDir() + "ab_test.json";
  ASSERT_EQ(RunAbArgs({"--engine", "cceh", "--records", "2000", "--ops", "1000", "--slice",
                       "500", "--pool", "dram", "--b", "first_try=off", "--phases",
                       "insert,negative", "--json", path},
                      DefaultEnv()),
            0);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  Json doc;
  ASSERT_TRUE(Json::Parse(text.str(), &doc).ok()) << text.str();
  ASSERT_NE(doc.Find("phases"), nullptr);
  const std::vector<Json>& phases = doc.Find("phases")->items();
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[1].Find("phase")->string(), "negative");
  const std::vector<Json>& orders = phases[0].Find("orders")->items();
  ASSERT_EQ(orders.size(), 2u);
  EXPECT_EQ(orders[0].Find("ratios")->items().size(), 4u);  // 2000 inserts in slices of 500
  EXPECT_EQ(doc.Find("b")->string(), "first_try=off");
  std::remove(path.c_str());
}

TEST(BenchAb, EachSideOpensWithItsOwnOptions) {
  // An option only B's engine refuses names B; one only A's gets, A.
  AbConfig c = Small();
  c.orders = 1;
  c.b_options = {{"no_such_option", "1"}};
  AbResult r;
  Status s = MeasureAb(c, DefaultEnv(), &r);
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(std::string(s.message()).rfind("B: ", 0), 0u) << s.ToString();
  c.b_options.clear();
  c.a_options = {{"no_such_option", "1"}};
  s = MeasureAb(c, DefaultEnv(), &r);
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(std::string(s.message()).rfind("A: ", 0), 0u) << s.ToString();
}

TEST(BenchAb, BadConfigsAreRefused) {
  AbConfig c = Small();
  c.engine.clear();
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.phases = {"search", "insert"};
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c.phases = {"insert", "scan"};
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.slice = 0;
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.orders = 3;
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.engine = "no-such-engine";
  AbResult r;
  EXPECT_FALSE(MeasureAb(c, DefaultEnv(), &r).ok());
  // The command line: bad arguments exit 2.
  EXPECT_EQ(RunAbArgs({"--engine", "cceh", "--a", "first_try"}, DefaultEnv()), 2);
  EXPECT_EQ(RunAbArgs({"--engine", "cceh", "--pool", "disk"}, DefaultEnv()), 2);
  EXPECT_EQ(RunAbArgs({"--a", "x=1"}, DefaultEnv()), 2);  // no engine
  EXPECT_EQ(RunAbArgs({"--engine", "cceh", "--phases", "delete"}, DefaultEnv()), 2);
  // Well-formed but refused by the engine: the run fails (exit 1), naming the side.
  EXPECT_EQ(RunAbArgs({"--engine", "cceh", "--records", "100", "--pool", "dram", "--b",
                       "first_try=\"x\\"},
                      DefaultEnv()),
            1);
}

}  // namespace
}  // namespace pmhash::bench
