#include "common/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace pmhash {
namespace {

TEST(LatencyHistogram, EmptyReportsZeros) {
  LatencyHistogram h;
  EXPECT_EQ(h.Count(), 0u);
  EXPECT_EQ(h.Min(), 0u);
  EXPECT_EQ(h.Max(), 0u);
  EXPECT_EQ(h.Mean(), 0.0);
  EXPECT_EQ(h.Percentile(50), 0u);
  EXPECT_EQ(h.Percentile(100), 0u);
}

TEST(LatencyHistogram, SmallSetsAreExact) {
  LatencyHistogram h;
  for (uint64_t v = 10; v >= 1; --v) h.Record(v);  // order does not matter
  EXPECT_EQ(h.Count(), 10u);
  EXPECT_EQ(h.Min(), 1u);
  EXPECT_EQ(h.Max(), 10u);
  EXPECT_DOUBLE_EQ(h.Mean(), 5.5);
  // Nearest rank: the ceil(p% * 10)-th smallest.
  EXPECT_EQ(h.Percentile(0), 1u);
  EXPECT_EQ(h.Percentile(10), 1u);
  EXPECT_EQ(h.Percentile(10.001), 2u);
  EXPECT_EQ(h.Percentile(50), 5u);
  EXPECT_EQ(h.Percentile(90), 9u);
  EXPECT_EQ(h.Percentile(99), 10u);
  EXPECT_EQ(h.Percentile(99.99), 10u);
  EXPECT_EQ(h.Percentile(100), 10u);
  // Out-of-range p is clamped.
  EXPECT_EQ(h.Percentile(-5), 1u);
  EXPECT_EQ(h.Percentile(250), 10u);
  EXPECT_EQ(h.Percentile(std::nan("")), 1u);

  LatencyHistogram skewed;
  skewed.RecordMany(100, 99);
  skewed.Record(250);
  EXPECT_EQ(skewed.Percentile(99), 100u);
  EXPECT_EQ(skewed.Percentile(99.9), 250u);
  EXPECT_EQ(skewed.Percentile(50), 100u);
  EXPECT_DOUBLE_EQ(skewed.Mean(), (99.0 * 100 + 250) / 100);
}

TEST(LatencyHistogram, SingleLargeValueIsReportedExactly) {
  LatencyHistogram h;
  h.Record(123456789);
  EXPECT_EQ(h.Min(), 123456789u);
  EXPECT_EQ(h.Max(), 123456789u);
  // Clamped to [Min, Max], so a lone value comes back exactly.
  EXPECT_EQ(h.Percentile(50), 123456789u);
  EXPECT_EQ(h.Percentile(99.99), 123456789u);
}

TEST(LatencyHistogram, BucketsTileTheRangeWithBoundedWidth) {
  const size_t n = LatencyHistogram::NumBuckets();
  EXPECT_EQ(LatencyHistogram::BucketLow(0), 0u);
  EXPECT_EQ(LatencyHistogram::BucketHigh(n - 1), LatencyHistogram::kMaxTrackable);
  for (size_t b = 0; b < n; ++b) {
    const uint64_t lo = LatencyHistogram::BucketLow(b);
    const uint64_t hi = LatencyHistogram::BucketHigh(b);
    ASSERT_LE(lo, hi) << b;
    ASSERT_EQ(LatencyHistogram::BucketOf(lo), b);
    ASSERT_EQ(LatencyHistogram::BucketOf(hi), b);
    if (b + 1 < n) {
      ASSERT_EQ(LatencyHistogram::BucketLow(b + 1), hi + 1) << b;
    }
    // Width at most 1/128 of the smallest value in the bucket.
    ASSERT_LE(static_cast<double>(hi - lo + 1), std::max(1.0, lo / 128.0)) << b;
  }
  // Beyond the tracked range: the top bucket.
  EXPECT_EQ(LatencyHistogram::BucketOf(UINT64_MAX), n - 1);
}

TEST(LatencyHistogram, RelativeErrorIsBoundedFrom1nsTo100s) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> log_ns(0, std::log(1e11));
  for (int i = 0; i < 3000; ++i) {
    const uint64_t v = static_cast<uint64_t>(std::exp(log_ns(rng)));
    LatencyHistogram h;
    h.Record(0);
    h.Record(v);
    h.Record(LatencyHistogram::kMaxTrackable);  // so the clamp to Min/Max cannot help
    const double got = static_cast<double>(h.Percentile(50));
    ASSERT_LE(std::abs(got - static_cast<double>(v)),
              LatencyHistogram::kMaxRelativeError * static_cast<double>(v))
        << v << " reported as " << got;
  }
}

TEST(LatencyHistogram, PercentilesOfAUniformDistributionWithin1Percent) {
  LatencyHistogram h;
  constexpr uint64_t kN = 1000000;
  // A permutation of 1 .. kN: percentile p is p% of kN.
  std::vector<uint64_t> values(kN);
  for (uint64_t i = 0; i < kN; ++i) values[i] = i + 1;
  std::shuffle(values.begin(), values.end(), std::mt19937_64(7));
  for (uint64_t v : values) h.Record(v);
  EXPECT_EQ(h.Count(), kN);
  EXPECT_EQ(h.Min(), 1u);
  EXPECT_EQ(h.Max(), kN);
  EXPECT_DOUBLE_EQ(h.Mean(), (kN + 1) / 2.0);
  for (double p : {1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 99.99}) {
    const double want = p / 100 * kN;
    EXPECT_NEAR(static_cast<double>(h.Percentile(p)), want, want * 0.01) << "p" << p;
  }
}

TEST(LatencyHistogram, MergeEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(1234);
  std::lognormal_distribution<double> dist(6.0, 2.0);  // a long-tailed latency shape
  LatencyHistogram all;
  std::vector<LatencyHistogram> parts(4);
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 25000 * (t + 1); ++i) {
      const uint64_t v = static_cast<uint64_t>(dist(rng)) + t * 1000;
      parts[t].Record(v);
      all.Record(v);
    }
  }
  LatencyHistogram merged;
  merged.Merge(LatencyHistogram());  // merging an empty one changes nothing
  for (const auto& p : parts) merged.Merge(p);
  merged.Merge(LatencyHistogram());
  EXPECT_EQ(merged.Count(), all.Count());
  EXPECT_EQ(merged.Min(), all.Min());
  EXPECT_EQ(merged.Max(), all.Max());
  EXPECT_NEAR(merged.Mean(), all.Mean(), all.Mean() * 1e-12);
  for (size_t b = 0; b < LatencyHistogram::NumBuckets(); ++b) {
    ASSERT_EQ(merged.BucketCount(b), all.BucketCount(b)) << b;
  }
  for (double p : {0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0}) {
    EXPECT_EQ(merged.Percentile(p), all.Percentile(p)) << "p" << p;
  }
}

TEST(LatencyHistogram, RecordManyClearAndHugeValues) {
  LatencyHistogram many, one_by_one;
  many.RecordMany(777, 5);
  many.RecordMany(5, 0);  // no-op
  for (int i = 0; i < 5; ++i) one_by_one.Record(777);
  EXPECT_EQ(many.Count(), 5u);
  EXPECT_EQ(many.Min(), 777u);
  EXPECT_EQ(many.Mean(), one_by_one.Mean());
  EXPECT_EQ(many.BucketCount(LatencyHistogram::BucketOf(777)), 5u);

  many.Record(UINT64_MAX);
  EXPECT_EQ(many.Max(), UINT64_MAX);
  EXPECT_EQ(many.Percentile(100), UINT64_MAX);
  EXPECT_EQ(many.BucketCount(LatencyHistogram::NumBuckets() - 1), 1u);

  many.Clear();
  EXPECT_EQ(many.Count(), 0u);
  EXPECT_EQ(many.Min(), 0u);
  EXPECT_EQ(many.Max(), 0u);
  EXPECT_EQ(many.BucketCount(LatencyHistogram::BucketOf(777)), 0u);
  many.Record(3);
  EXPECT_EQ(many.Min(), 3u);
  EXPECT_EQ(many.Percentile(50), 3u);
}

}  // namespace
}  // namespace pmhash
