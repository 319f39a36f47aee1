// Tests of the summary of repeated rounds and of the round order, on made-up rounds (no
// benchmark runs, nothing timed): medians, ranges, per-round ratios and floor shares,
// the stability flag, and orders that change from round to round.
#include "bench/summary.h"

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

namespace pmhash::bench {
namespace {

// A row of `ops` operations at `mops` Mops/s.
PhaseResult Row(const std::string& engine, const std::string& phase, int index, int round,
                double mops, uint64_t ops = 1000) {
  PhaseResult r;
  r.engine = engine;
  r.phase = phase;
  r.phase_index = index;
  r.round = round;
  r.ops = ops;
  r.seconds = static_cast<double>(ops) / (mops * 1e6);
  r.samples = 10;
  r.p50 = 100 * mops;  // latency figures that differ per round
  r.p99 = 1000 * mops;
  r.checksum = 7 + round;
  return r;
}

BenchConfig TwoEngines(int repeat) {
  BenchConfig config;
  config.engines = {"a", "b"};
  config.repeat = repeat;
  config.max_spread = 1.25;
  return config;
}

TEST(Summary, MedianRangeAndTheMedianRoundsOtherFigures) {
  BenchConfig config = TwoEngines(4);
  RunOutcome outcome;
  const double mops[] = {1, 4, 2, 3};
  for (int round = 0; round < 4; ++round) {
    PhaseResult r = Row("a", "search", 0, round, mops[round]);
    r.errors = round == 3 ? 2 : 0;
    if (round == 3) r.first_error = "NotFound: x";
    outcome.rows.push_back(r);
  }
  const RunSummary s = Summarize(config, outcome);
  ASSERT_EQ(s.rows.size(), 1u);
  const RowSummary& row = s.rows[0];
  ASSERT_EQ(row.rounds.size(), 4u);
  EXPECT_EQ(row.mops.samples, (std::vector<double>{1, 4, 2, 3}));  // round order kept
  EXPECT_NEAR(row.mops.median, 2.5, 1e-9);  // even count: the mean of the middle two
  EXPECT_NEAR(row.mops.min, 1, 1e-9);
  EXPECT_NEAR(row.mops.max, 4, 1e-9);
  EXPECT_NEAR(row.mops.max_over_min(), 4, 1e-9);
  EXPECT_TRUE(row.unstable);
  EXPECT_NEAR(row.median.mops(), 2.5, 1e-9);        // seconds = ops / median Mops/s
  EXPECT_NEAR(row.median.p50, 250, 1e-6);           // each latency figure's own median
  EXPECT_NEAR(row.median.p99, 2500, 1e-6);
  EXPECT_EQ(row.median_round, 2);                   // the lower middle round (2 Mops/s)
  EXPECT_EQ(row.median.checksum, 9u);               // other figures: that round's
  EXPECT_EQ(row.median.errors, 2u);                 // errors: summed over the rounds
  EXPECT_EQ(row.median.first_error, "NotFound: x");
  EXPECT_FALSE(row.ratio.has_value());              // the first engine has no ratio
  EXPECT_FALSE(row.floor_pct.has_value());          // no floor measured
  ASSERT_EQ(UnstableFigures(s).size(), 1u);
  EXPECT_NE(UnstableFigures(s)[0].find("a search t1"), std::string::npos);

  const Json j = row.ToJson();
  EXPECT_EQ(j.Find("mops")->number(), row.mops.median);
  EXPECT_EQ(j.Find("rounds")->uint(), 4u);
  EXPECT_FALSE(j.Find("stable")->boolean());
  EXPECT_EQ(j.Find("mops_range")->Find("samples")->items().size(), 4u);
  ASSERT_EQ(j.Find("samples")->items().size(), 4u);
  EXPECT_EQ(j.Find("samples")->items()[3].Find("round")->uint(), 3u);
}

TEST(Summary, RatiosAndFloorSharesAreTakenWithinEachRound) {
  BenchConfig config = TwoEngines(3);
  config.floor = true;
  RunOutcome outcome;
  const double a[] = {2, 1, 4}, b[] = {5, 2, 4.4};  // b / a per round: 2.5, 2, 1.1
  const double lookup[] = {10, 5, 20};
  for (int round = 0; round < 3; ++round) {
    outcome.rows.push_back(Row("a", "search", 1, round, a[round]));
    outcome.rows.push_back(Row("b", "search", 1, round, b[round]));
    outcome.rows.push_back(Row("b", "update", 2, round, 1));
    FloorResult f;
    f.round = round;
    f.ops = 1000;
    for (FloorKind kind : kAllFloorKinds) {
      f.seconds[static_cast<size_t>(kind)] = 1000 / (lookup[round] * 1e6);
    }
    // The api row at 4, 3, 2 Mops/s: 40%, 60%, 10% of its round's lookup loop.
    const double api[] = {4, 3, 2};
    f.seconds[static_cast<size_t>(FloorKind::kApi)] = 1000 / (api[round] * 1e6);
    outcome.floors.push_back(f);
  }
  const RunSummary s = Summarize(config, outcome);
  ASSERT_EQ(s.rows.size(), 3u);
  const RowSummary& ra = s.rows[0];
  const RowSummary& rb = s.rows[1];
  ASSERT_EQ(rb.median.engine, "b");
  ASSERT_TRUE(rb.ratio.has_value());
  EXPECT_EQ(rb.ratio_to, "a");
  ASSERT_EQ(rb.ratio->samples.size(), 3u);
  EXPECT_NEAR(rb.ratio->samples[0], 2.5, 1e-9);
  EXPECT_NEAR(rb.ratio->samples[1], 2.0, 1e-9);
  EXPECT_NEAR(rb.ratio->samples[2], 1.1, 1e-9);
  EXPECT_NEAR(rb.ratio->median, 2.0, 1e-9);  // not median(b) / median(a) = 4.4 / 2
  // Shares of the matching floor (search: independent lookups), per round: a is
  // 20%, 20%, 20% of its round's lookup floor although its Mops/s varied 4x.
  ASSERT_TRUE(ra.floor_pct.has_value());
  EXPECT_EQ(*ra.floor_kind, FloorKind::kLookup);
  for (double pct : ra.floor_pct->samples) EXPECT_NEAR(pct, 20, 1e-9);
  // update has no matching floor, and b's update has no first-engine row to divide by.
  EXPECT_FALSE(s.rows[2].floor_pct.has_value());
  EXPECT_FALSE(s.rows[2].ratio.has_value());
  ASSERT_EQ(s.floors.size(), 1u);
  EXPECT_NEAR(s.floors[0].mops[static_cast<size_t>(FloorKind::kLookup)].median, 10, 1e-9);
  EXPECT_TRUE(s.floors[0].unstable[static_cast<size_t>(FloorKind::kLookup)]);
  // The api row against the lookup loop of the same round: median of 40, 60, 10.
  EXPECT_NEAR(s.floors[0].api_pct_of_lookup.median, 40, 1e-9);
  EXPECT_NEAR(s.floors[0].api_pct_of_lookup.min, 10, 1e-9);
  EXPECT_NEAR(s.floors[0].api_pct_of_lookup.max, 60, 1e-9);
}

TEST(Summary, OneRoundIsNeverFlaggedAndTwoCloseRoundsAreStable) {
  BenchConfig config = TwoEngines(1);
  RunOutcome one;
  one.rows.push_back(Row("a", "load", 0, 0, 3));
  const RunSummary s1 = Summarize(config, one);
  EXPECT_FALSE(s1.rows[0].unstable);
  EXPECT_EQ(s1.rows[0].mops.max_over_min(), 1);
  RunOutcome two;
  two.rows.push_back(Row("a", "load", 0, 0, 3));
  two.rows.push_back(Row("a", "load", 0, 1, 3.6));  // 1.2x apart: within 1.25x
  config.repeat = 2;
  EXPECT_FALSE(Summarize(config, two).rows[0].unstable);
  config.max_spread = 1.1;
  EXPECT_TRUE(Summarize(config, two).rows[0].unstable);
}

TEST(RoundOrder, ChangesEveryRoundDeterministicallyFromTheSeed) {
  const std::vector<Cell> cells = {{"a", 1}, {"b", 1}, {"c", 1}, {"a", 2}, {"floor", 1}};
  const auto orders = RoundOrders(cells, 42, 6);
  ASSERT_EQ(orders.size(), 6u);
  EXPECT_EQ(orders[0], cells);  // round 0 runs the cells as listed
  for (size_t r = 1; r < orders.size(); ++r) {
    EXPECT_NE(orders[r], orders[r - 1]) << r;
    std::vector<std::string> a, b;  // a permutation of the cells
    for (const Cell& c : orders[r]) a.push_back(c.Label());
    for (const Cell& c : cells) b.push_back(c.Label());
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(RoundOrders(cells, 42, 6), orders);  // the same seed, the same orders
  EXPECT_NE(RoundOrders(cells, 43, 6), orders);
  // Two cells: every round the other way round.
  const std::vector<Cell> pair = {{"a", 1}, {"b", 1}};
  const auto flips = RoundOrders(pair, 7, 4);
  for (size_t r = 1; r < flips.size(); ++r) EXPECT_NE(flips[r], flips[r - 1]);
  EXPECT_EQ(RoundOrders({{"a", 1}}, 7, 3).size(), 3u);  // one cell: nothing to change
}

TEST(Median, OddEvenAndEmpty) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3}), 3);
  EXPECT_EQ(Median({5, 1, 3}), 3);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
}

}  // namespace
}  // namespace pmhash::bench
