// Key generators and distributions of the benchmark driver, the latency recorder, and
// the small JSON value.
#include "bench/keygen.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <unordered_set>
#include <vector>

#include <gtest/gtest.h>

#include "bench/config.h"
#include "bench/json.h"
#include "bench/latency.h"

namespace pmhash::bench {
namespace {

std::vector<uint64_t> Counts(IndexGenerator& gen, uint64_t n, uint64_t draws, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint64_t> counts(n, 0);
  for (uint64_t i = 0; i < draws; ++i) {
    const uint64_t v = gen.Next(rng);
    EXPECT_LT(v, n);
    if (v < n) ++counts[v];
  }
  return counts;
}

TEST(KeyGen, UniformCoversTheRangeEvenly) {
  const uint64_t n = 100, draws = 100000;
  UniformGenerator gen(n);
  const std::vector<uint64_t> c = Counts(gen, n, draws, 1);
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_GT(c[i], draws / n * 7 / 10) << i;
    EXPECT_LT(c[i], draws / n * 13 / 10) << i;
  }
}

TEST(KeyGen, ScrambledZipfianTopKeysAreTheMostFrequent) {
  const uint64_t n = 1000, draws = 200000;
  ScrambledZipfianGenerator gen(n, 0.99);
  std::vector<uint64_t> c = Counts(gen, n, draws, 2);
  // YCSB: rank 0 of the zipfian lands on fnv(0) % n, rank 1 on fnv(1) % n.
  const uint64_t top = ScrambledZipfianGenerator::FnvHash64(0) % n;
  const uint64_t second = ScrambledZipfianGenerator::FnvHash64(1) % n;
  EXPECT_EQ(std::max_element(c.begin(), c.end()) - c.begin(), static_cast<ptrdiff_t>(top));
  EXPECT_GT(c[top], c[second]);
  std::vector<uint64_t> sorted = c;
  std::sort(sorted.begin(), sorted.end());
  const uint64_t median = sorted[n / 2];
  EXPECT_GT(c[top], 10 * draws / n);  // ~3.8% of draws against 0.1% if uniform
  EXPECT_GT(c[second], 5 * median);
  // Skewed: the top 10% of keys take far more than 10% of the draws.
  uint64_t top_tenth = 0;
  for (uint64_t i = n - n / 10; i < n; ++i) top_tenth += sorted[i];
  EXPECT_GT(top_tenth, draws / 4);  // uniform would give 10%
}

// The oracle hotspot detector's keys: the draws a generator makes most.
TEST(KeyGen, HottestDrawsAreTheGeneratorsMostFrequent) {
  const uint64_t n = 100000, k = 64, draws = 400000;
  DistSpec zipf{DistSpec::Kind::kZipfian, 0.99};
  const std::vector<uint64_t> hot = HottestDraws(zipf, n, k);
  ASSERT_EQ(hot.size(), k);
  EXPECT_EQ(hot[0], ScrambledZipfianGenerator::FnvHash64(0) % n);
  EXPECT_EQ(std::set<uint64_t>(hot.begin(), hot.end()).size(), k);
  for (uint64_t h : hot) EXPECT_LT(h, n);
  // They take about as many draws as the k most drawn items (which are them, but for
  // the noise of the draws at the k-th's rank), far more than k items of a uniform.
  ScrambledZipfianGenerator gen(n, 0.99);
  std::vector<uint64_t> c = Counts(gen, n, draws, 3);
  uint64_t oracle = 0, best = 0;
  for (uint64_t h : hot) oracle += c[h];
  std::sort(c.begin(), c.end(), std::greater<>());
  for (uint64_t i = 0; i < k; ++i) best += c[i];
  EXPECT_GE(oracle, best * 97 / 100);
  EXPECT_GT(oracle, draws / 8);  // ranks 0-63: about 18% (uniform: 0.06%)
  // Another constant places its ranks the same way; fewer items than asked: all of them.
  EXPECT_EQ(HottestDraws({DistSpec::Kind::kZipfian, 0.5}, n, 1)[0], hot[0]);
  const std::vector<uint64_t> all = HottestDraws(zipf, 10, 64);
  EXPECT_EQ(std::set<uint64_t>(all.begin(), all.end()).size(), 10u);
  // Self-similar: the low indices; no draw likelier than another: none.
  EXPECT_EQ(HottestDraws({DistSpec::Kind::kSelfSimilar, 0.2}, n, 3),
            (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_TRUE(HottestDraws({DistSpec::Kind::kUniform, 0}, n, k).empty());
  EXPECT_TRUE(HottestDraws({DistSpec::Kind::kSequential, 0}, n, k).empty());
}

TEST(KeyGen, ZipfianWithOtherConstantComputesItsZeta) {
  const uint64_t n = 500, draws = 50000;
  ScrambledZipfianGenerator gen(n, 0.8);
  std::vector<uint64_t> c = Counts(gen, n, draws, 3);
  EXPECT_EQ(std::max_element(c.begin(), c.end()) - c.begin(),
            static_cast<ptrdiff_t>(ScrambledZipfianGenerator::FnvHash64(0) % n));
  // Unscrambled: item 0 is the most popular, popularity falls with the rank.
  ZipfianGenerator plain(n, 0.99);
  std::vector<uint64_t> p = Counts(plain, n, draws, 4);
  EXPECT_GT(p[0], p[1]);
  EXPECT_GT(p[1], p[10]);
  EXPECT_GT(p[10], p[400]);
}

TEST(KeyGen, FnvHashMatchesYcsb) {
  // FNV-1a 64 over the 8 little-endian bytes of 0: eight rounds of *prime from the basis.
  uint64_t h = 0xCBF29CE484222325ull;
  for (int i = 0; i < 8; ++i) h *= 1099511628211ull;
  const int64_t s = static_cast<int64_t>(h);
  EXPECT_EQ(ScrambledZipfianGenerator::FnvHash64(0),
            s < 0 ? static_cast<uint64_t>(-s) : h);
  EXPECT_LT(ScrambledZipfianGenerator::FnvHash64(12345), 1ull << 63);  // Math.abs
}

TEST(KeyGen, SelfSimilarPutsEightyPercentOnTwentyPercent) {
  const uint64_t n = 10000, draws = 200000;
  SelfSimilarGenerator gen(n, 0.2);
  const std::vector<uint64_t> c = Counts(gen, n, draws, 5);
  uint64_t hot = 0;
  for (uint64_t i = 0; i < n / 5; ++i) hot += c[i];
  const double frac = static_cast<double>(hot) / draws;
  EXPECT_GT(frac, 0.78);
  EXPECT_LT(frac, 0.82);
}

TEST(KeyGen, SequentialWrapsFromItsStart) {
  SequentialGenerator gen(5, 3);
  Rng rng(6);
  std::vector<uint64_t> got;
  for (int i = 0; i < 7; ++i) got.push_back(gen.Next(rng));
  EXPECT_EQ(got, (std::vector<uint64_t>{3, 4, 0, 1, 2, 3, 4}));
}

TEST(KeyGen, KeysAreDistinctAndNegativeKeysDisjoint) {
  DistSpec crafted;
  ASSERT_TRUE(ParseDist("crafted:4", &crafted).ok());
  for (DistSpec dist : {DistSpec{}, DistSpec{DistSpec::Kind::kSequential, 0}, crafted}) {
    for (size_t size : {size_t{8}, size_t{16}}) {
      KeySpace keys(size, dist);
      std::unordered_set<std::string> positive;
      for (uint64_t i = 0; i < 20000; ++i) {
        const std::string k = keys.Key(i);
        ASSERT_EQ(k.size(), size);
        EXPECT_TRUE(positive.insert(k).second) << "duplicate key for index " << i;
      }
      Rng rng(7);
      for (int i = 0; i < 20000; ++i) {
        const uint64_t index = kNegativeBit | (rng.Next() >> 1);
        EXPECT_EQ(positive.count(keys.Key(index)), 0u);
      }
      // Low negative indices too (the sequential case is the risky one).
      for (uint64_t i = 0; i < 20000; ++i) {
        EXPECT_EQ(positive.count(keys.Key(kNegativeBit | i)), 0u);
      }
    }
  }
  // Sequential keys are the index itself; random ones are not.
  uint64_t w = 0;
  const std::string k = KeySpace(8, {DistSpec::Kind::kSequential, 0}).Key(42);
  std::memcpy(&w, k.data(), 8);
  EXPECT_EQ(w, 42u);
  EXPECT_NE(KeySpace(8, DistSpec{}).FirstWord(42), 42u);
}

// --dist crafted[:B]: every key, positive or negative, of any size, hashes under seed 0
// to B leading zero bits (one home in every table of up to 2^B homes), and under another
// seed like any key; the same keys every time.
TEST(KeyGen, CraftedKeysShareTheirTopHashBitsUnderSeedZeroOnly) {
  DistSpec d;
  ASSERT_TRUE(ParseDist("crafted", &d).ok());
  EXPECT_EQ(d.param, kCraftedDefaultBits);
  EXPECT_EQ(DistName(d), "crafted:12");
  ASSERT_TRUE(ParseDist("crafted:10", &d).ok());
  for (const char* bad : {"crafted:0", "crafted:17", "crafted:x", "crafted:1.5"}) {
    EXPECT_TRUE(ParseDist(bad, &d).IsInvalidArgument()) << bad;
  }
  ASSERT_TRUE(ParseDist("crafted:10", &d).ok());
  for (size_t size : {size_t{8}, size_t{24}}) {
    const KeySpace keys(size, d);
    uint64_t seeded_low = 0;
    for (uint64_t i = 0; i < 300; ++i) {
      for (uint64_t index : {i, uint64_t{kNegativeBit | (i * 0x9e3779b97f4a7c15ull >> 1)}}) {
        const std::string k = keys.Key(index);
        EXPECT_EQ(HashKey(k, 0) >> 54, 0u) << index;
        seeded_low += HashKey(k, 42) >> 54 == 0;
      }
    }
    EXPECT_LT(seeded_low, 10u) << "under seed 42 they should spread (1 in 1024 at home 0)";
    EXPECT_EQ(KeySpace(size, d).Key(123), keys.Key(123));
  }
}

TEST(KeyGen, ParsersAcceptTheContractSpellings) {
  DistSpec d;
  ASSERT_TRUE(ParseDist("zipfian", &d).ok());
  EXPECT_EQ(d.kind, DistSpec::Kind::kZipfian);
  EXPECT_DOUBLE_EQ(d.param, 0.99);
  ASSERT_TRUE(ParseDist("zipfian:0.5", &d).ok());
  EXPECT_DOUBLE_EQ(d.param, 0.5);
  ASSERT_TRUE(ParseDist("selfsimilar", &d).ok());
  EXPECT_DOUBLE_EQ(d.param, 0.2);
  ASSERT_TRUE(ParseDist("sequential", &d).ok());
  EXPECT_EQ(d.kind, DistSpec::Kind::kSequential);
  EXPECT_FALSE(ParseDist("uniform:3", &d).ok());
  EXPECT_FALSE(ParseDist("selfsimilar:0.7", &d).ok());

  ValueSizeSpec v;
  ASSERT_TRUE(ParseValueSize("16-1024", &v).ok());
  EXPECT_EQ(v.min, 16u);
  EXPECT_EQ(v.max, 1024u);
  ASSERT_TRUE(ParseValueSize("8", &v).ok());
  EXPECT_TRUE(v.fixed());
  EXPECT_FALSE(ParseValueSize("x", &v).ok());
  EXPECT_FALSE(ParseValueSize("16-", &v).ok());

  Mix m;
  ASSERT_TRUE(ParseMix("search=90,update=10", &m).ok());
  EXPECT_EQ(m.search, 90);
  EXPECT_EQ(m.update, 10);
  EXPECT_EQ(MixText(m), "search=90,update=10");
  EXPECT_FALSE(ParseMix("search=90", &m).ok());
}

TEST(Latencies, PercentilesWithinBucketError) {
  Latencies lat;
  for (uint64_t v = 1; v <= 100000; ++v) lat.Record(v);
  EXPECT_EQ(lat.count(), 100000u);
  EXPECT_NEAR(lat.Percentile(0.5), 50000, 50000 * 0.02);
  EXPECT_NEAR(lat.Percentile(0.99), 99000, 99000 * 0.02);
  EXPECT_NEAR(lat.Mean(), 50000.5, 0.01);
  Latencies small;
  small.Record(7);
  EXPECT_EQ(small.Percentile(0.5), 7);  // exact for small values
  Latencies merged;
  merged.Merge(lat);
  merged.Merge(small);
  EXPECT_EQ(merged.count(), 100001u);
  EXPECT_EQ(merged.Max(), 100000);
}

TEST(JsonValue, RoundTripsAndReportsErrors) {
  Json j = Json::Object();
  j.Set("a", 1);
  j.Set("b", Json());
  j.Set("c", "x\"y\n");
  Json arr = Json::Array();
  arr.Push(1.5);
  arr.Push(true);
  j.Set("d", arr);
  Json back;
  ASSERT_TRUE(Json::Parse(j.Dump(2), &back).ok());
  EXPECT_EQ(back.Dump(-1), j.Dump(-1));
  EXPECT_EQ(j.Dump(-1), R"({"a":1,"b":null,"c":"x\"y\n","d":[1.5,true]})");
  Json bad;
  Status s = Json::Parse("{\"a\": 1,\n \"b\" 2}", &bad);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("2:"), std::string::npos) << s.message();
  EXPECT_FALSE(Json::Parse("[1, 2", &bad).ok());
  EXPECT_EQ(NumberOrNull(false, 3).Dump(-1), "null");
}

}  // namespace
}  // namespace pmhash::bench
