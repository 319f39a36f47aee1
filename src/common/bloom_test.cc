#include "common/bloom.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "util/hash.h"

namespace pmhash {
namespace {

// Deterministic 64-bit key hashes (splitmix64 of a counter): hashing a counter gives
// uniform hashes without depending on string formatting.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
constexpr uint64_t kPresentSeed = 1ull << 40;  // present keys: Mix(kPresentSeed + i)
constexpr uint64_t kAbsentSeed = 1ull << 50;   // absent keys: Mix(kAbsentSeed + i)

BloomFilter MakeFilter(uint64_t keys, double rate = 1e-4, uint32_t k = 3) {
  BloomOptions o;
  o.expected_keys = keys;
  o.false_positive_rate = rate;
  o.num_probes = k;
  Result<BloomFilter> f = BloomFilter::Make(o);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(f).value();
}

TEST(BloomFilter, NoFalseNegatives) {
  BloomFilter f = MakeFilter(50000);
  for (uint64_t i = 0; i < 50000; ++i) f.AddHash(Mix(kPresentSeed + i));
  for (uint64_t i = 0; i < 50000; ++i) ASSERT_TRUE(f.MayContainHash(Mix(kPresentSeed + i))) << i;

  // Keys' hashes as engines give them (HashKey under a pool's seed), zero bytes and the
  // empty key too.
  const std::vector<std::string> keys = {"", std::string("\0", 1), std::string("a\0b", 3),
                                         std::string(1000, 'x')};
  for (const auto& k : keys) f.AddHash(HashKey(k, 7));
  for (const auto& k : keys) EXPECT_TRUE(f.MayContainHash(HashKey(k, 7)));
}

TEST(BloomFilter, EmptyFilterContainsNothing) {
  BloomFilter f = MakeFilter(1000);
  EXPECT_EQ(f.BitsSet(), 0u);
  for (uint64_t i = 0; i < 10000; ++i) ASSERT_FALSE(f.MayContainHash(Mix(i)));
  EXPECT_EQ(f.EstimatedFalsePositiveRate(), 0.0);
}

// Measures the FP rate on 1M absent keys after filling to the sized key count.
double MeasuredRate(BloomFilter& f, uint64_t keys) {
  for (uint64_t i = 0; i < keys; ++i) f.AddHash(Mix(kPresentSeed + i));
  uint64_t false_positives = 0;
  constexpr uint64_t kQueries = 1000000;
  for (uint64_t i = 0; i < kQueries; ++i) false_positives += f.MayContainHash(Mix(kAbsentSeed + i));
  return static_cast<double>(false_positives) / kQueries;
}

TEST(BloomFilter, FalsePositiveRateIsWithinTwiceTheTarget) {
  BloomFilter f = MakeFilter(100000, 1e-4, 3);
  const double rate = MeasuredRate(f, 100000);
  EXPECT_LE(rate, 2e-4);
  EXPECT_GE(rate, 0.5e-4);  // not oversized by an order of magnitude either
  // The fill-based estimate agrees with the measurement.
  EXPECT_NEAR(f.EstimatedFalsePositiveRate(), 1e-4, 0.5e-4);
}

TEST(BloomFilter, FalsePositiveRateHoldsForOtherProbeCountsAndRates) {
  struct Case {
    double rate;
    uint32_t k;
  };
  for (Case c : {Case{1e-2, 1}, Case{1e-3, 7}, Case{1e-4, 13}}) {
    SCOPED_TRACE("rate " + std::to_string(c.rate) + " k " + std::to_string(c.k));
    BloomFilter f = MakeFilter(20000, c.rate, c.k);
    const double rate = MeasuredRate(f, 20000);
    EXPECT_LE(rate, 2 * c.rate);
    EXPECT_GE(rate, 0.5 * c.rate);
  }
}

TEST(BloomFilter, SizingFollowsTheBlockedModel) {
  BloomOptions o;
  o.expected_keys = 1000000;
  Result<uint64_t> blocks = BloomFilter::BlocksFor(o);
  ASSERT_TRUE(blocks.ok());
  // The smallest size meeting the target: 2% fewer blocks would miss it.
  EXPECT_LE(BloomFilter::ModelFalsePositiveRate(o.expected_keys, *blocks, 3), 1e-4);
  EXPECT_GT(BloomFilter::ModelFalsePositiveRate(o.expected_keys, *blocks * 98 / 100, 3), 1e-4);
  // k = 3 at 1e-4 needs about 71 bits per key (bloom.h); the optimal k about 22.
  const double bits_per_key = static_cast<double>(*blocks) * 512 / 1e6;
  EXPECT_NEAR(bits_per_key, 71, 2);
  o.num_probes = BloomFilter::OptimalProbes(1e-4);
  EXPECT_EQ(o.num_probes, 13u);
  Result<uint64_t> optimal = BloomFilter::BlocksFor(o);
  ASSERT_TRUE(optimal.ok());
  EXPECT_LT(*optimal, *blocks / 2);

  // More keys or a lower rate need more memory.
  o.num_probes = 3;
  o.expected_keys = 2000000;
  EXPECT_GT(BloomFilter::BlocksFor(o).value(), *blocks);
  o.expected_keys = 1000000;
  o.false_positive_rate = 1e-5;
  EXPECT_GT(BloomFilter::BlocksFor(o).value(), *blocks);

  // No keys expected still makes a usable filter.
  BloomFilter tiny = MakeFilter(0);
  EXPECT_EQ(tiny.num_blocks(), 1u);
  EXPECT_EQ(tiny.MemoryBytes(), 64u);
  tiny.AddHash(HashKey("k", 0));
  EXPECT_TRUE(tiny.MayContainHash(HashKey("k", 0)));
}

TEST(BloomFilter, RejectsBadOptions) {
  auto make = [](uint64_t keys, double rate, uint32_t k) {
    BloomOptions o;
    o.expected_keys = keys;
    o.false_positive_rate = rate;
    o.num_probes = k;
    return BloomFilter::Make(o).status();
  };
  EXPECT_TRUE(make(10, 0, 3).IsInvalidArgument());
  EXPECT_TRUE(make(10, -1, 3).IsInvalidArgument());
  EXPECT_TRUE(make(10, 0.6, 3).IsInvalidArgument());
  EXPECT_TRUE(make(10, std::nan(""), 3).IsInvalidArgument());
  EXPECT_TRUE(make(10, 1e-4, 0).IsInvalidArgument());
  Status s = make(10, 1e-4, BloomFilter::kMaxProbes + 1);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("num_probes"), std::string::npos) << s.message();
  s = make(1ull << 40, 1e-4, 3);  // ~9 TB
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("MiB"), std::string::npos) << s.message();
}

TEST(BloomFilter, ConcurrentAddsLoseNothing) {
  constexpr uint64_t kPerThread = 50000;
  constexpr int kThreads = 4;
  // Sized small so that threads often hit the same words.
  BloomFilter shared = MakeFilter(kPerThread, 1e-2, 3);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&shared, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        shared.AddHash(Mix(kPresentSeed + i * kThreads + t));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (uint64_t i = 0; i < kPerThread * kThreads; ++i) {
    ASSERT_TRUE(shared.MayContainHash(Mix(kPresentSeed + i))) << i;
  }
  // Bit-OR is order-independent: the result equals a single-threaded build bit for bit.
  BloomFilter serial = MakeFilter(kPerThread, 1e-2, 3);
  for (uint64_t i = 0; i < kPerThread * kThreads; ++i) serial.AddHash(Mix(kPresentSeed + i));
  EXPECT_EQ(shared.BitsSet(), serial.BitsSet());
  EXPECT_EQ(shared.Serialize(), serial.Serialize());
}

TEST(BloomFilter, FillEstimatesTrackInsertions) {
  BloomFilter f = MakeFilter(100000, 1e-3, 3);
  for (uint64_t i = 0; i < 60000; ++i) f.AddHash(Mix(kPresentSeed + i));
  EXPECT_NEAR(f.EstimatedKeys(), 60000, 60000 * 0.03);
  const double fill = f.FillRatio();
  EXPECT_GT(fill, 0.0);
  EXPECT_LT(fill, 0.2);
  EXPECT_EQ(fill, static_cast<double>(f.BitsSet()) / static_cast<double>(f.num_bits()));
  // Re-adding present keys changes nothing.
  const uint64_t bits = f.BitsSet();
  for (uint64_t i = 0; i < 60000; ++i) f.AddHash(Mix(kPresentSeed + i));
  EXPECT_EQ(f.BitsSet(), bits);
}

TEST(BloomFilter, ClearForgetsEverything) {
  BloomFilter f = MakeFilter(1000);
  for (uint64_t i = 0; i < 1000; ++i) f.AddHash(Mix(kPresentSeed + i));
  ASSERT_GT(f.BitsSet(), 0u);
  f.Clear();
  EXPECT_EQ(f.BitsSet(), 0u);
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_FALSE(f.MayContainHash(Mix(kPresentSeed + i)));
}

TEST(BloomFilter, SerializeRoundTrip) {
  BloomFilter f = MakeFilter(20000, 1e-3, 5);
  for (uint64_t i = 0; i < 20000; ++i) f.AddHash(Mix(kPresentSeed + i));
  const std::vector<uint8_t> image = f.Serialize();
  ASSERT_EQ(image.size(), f.SerializedSize());
  ASSERT_EQ(image.size(), BloomFilter::kHeaderBytes + f.MemoryBytes());

  Result<BloomFilter> copy = BloomFilter::Deserialize(image);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(copy->num_blocks(), f.num_blocks());
  EXPECT_EQ(copy->num_probes(), 5u);
  EXPECT_EQ(copy->options().expected_keys, 20000u);
  EXPECT_EQ(copy->options().false_positive_rate, 1e-3);
  EXPECT_EQ(copy->BitsSet(), f.BitsSet());
  EXPECT_EQ(copy->Serialize(), image);
  for (uint64_t i = 0; i < 20000; ++i) ASSERT_TRUE(copy->MayContainHash(Mix(kPresentSeed + i)));
  for (uint64_t i = 0; i < 20000; ++i) {
    ASSERT_EQ(copy->MayContainHash(Mix(kAbsentSeed + i)), f.MayContainHash(Mix(kAbsentSeed + i)));
  }

  // LoadFrom into a filter of the same geometry.
  BloomFilter same = MakeFilter(20000, 1e-3, 5);
  ASSERT_TRUE(same.LoadFrom(image).ok());
  EXPECT_EQ(same.Serialize(), image);

  // SerializeTo wants the exact size.
  std::vector<uint8_t> small(image.size() - 1);
  EXPECT_TRUE(f.SerializeTo(small).IsInvalidArgument());
}

TEST(BloomFilter, MalformedImagesAreCorruption) {
  BloomFilter f = MakeFilter(5000);
  for (uint64_t i = 0; i < 5000; ++i) f.AddHash(Mix(kPresentSeed + i));
  const std::vector<uint8_t> good = f.Serialize();
  auto load = [](const std::vector<uint8_t>& image) {
    return BloomFilter::Deserialize(image).status();
  };
  ASSERT_TRUE(load(good).ok());

  EXPECT_TRUE(load({}).IsCorruption());
  EXPECT_TRUE(load(std::vector<uint8_t>(good.begin(), good.begin() + 10)).IsCorruption());
  EXPECT_TRUE(load(std::vector<uint8_t>(good.begin(), good.begin() + 64)).IsCorruption());

  std::vector<uint8_t> truncated(good.begin(), good.end() - 64);
  Status s = load(truncated);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("does not match"), std::string::npos) << s.message();
  std::vector<uint8_t> extended = good;
  extended.resize(good.size() + 64);
  EXPECT_TRUE(load(extended).IsCorruption());
  std::vector<uint8_t> odd = good;
  odd.push_back(0);
  EXPECT_TRUE(load(odd).IsCorruption());

  std::vector<uint8_t> bad = good;
  bad[0] ^= 1;  // magic
  s = load(bad);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s.message();
  bad = good;
  bad[8] = 99;  // version
  EXPECT_TRUE(load(bad).IsCorruption());
  bad = good;
  bad[12] = 0;  // num_probes = 0
  EXPECT_TRUE(load(bad).IsCorruption());
  bad = good;
  bad[16] ^= 0x80;  // num_blocks
  EXPECT_TRUE(load(bad).IsCorruption());
  bad = good;
  bad[24] ^= 1;  // expected_keys: covered by the checksum
  EXPECT_TRUE(load(bad).IsCorruption());
  bad = good;
  bad[63] = 1;  // a reserved header byte after the checksum
  s = load(bad);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("reserved"), std::string::npos) << s.message();
  bad = good;
  bad[good.size() - 1] ^= 0x10;  // one filter bit
  s = load(bad);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.message();

  // LoadFrom rejects the same images and leaves the filter as it was.
  BloomFilter target = MakeFilter(5000);
  target.AddHash(HashKey("keep me", 0));
  const std::vector<uint8_t> before = target.Serialize();
  EXPECT_TRUE(target.LoadFrom(bad).IsCorruption());
  EXPECT_TRUE(target.LoadFrom(truncated).IsCorruption());
  BloomFilter other_size = MakeFilter(50000);
  s = target.LoadFrom(other_size.Serialize());
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("blocks"), std::string::npos) << s.message();
  // Same block count (one), different k.
  BloomFilter one_block_k3 = MakeFilter(0, 1e-4, 3);
  BloomFilter one_block_k4 = MakeFilter(0, 1e-4, 4);
  ASSERT_EQ(one_block_k3.num_blocks(), one_block_k4.num_blocks());
  EXPECT_TRUE(one_block_k3.LoadFrom(one_block_k4.Serialize()).IsInvalidArgument());
  EXPECT_EQ(target.Serialize(), before);
}

}  // namespace
}  // namespace pmhash
