// Tests of the floor's test engine: each Get returns the first word of the line its key's
// hash picks, through the public path; it takes no writes and fills its pool.
#include "bench/floor_engine.h"

#include <gtest/gtest.h>

#include "bench/keygen.h"
#include "pm/pool.h"
#include "util/hash.h"

namespace pmhash::bench {
namespace {

std::unique_ptr<engines::Engine> OpenFloorEngine(uint64_t pool_size, bool count) {
  std::unique_ptr<pm::Pool> pool;
  EXPECT_TRUE(pm::Pool::CreateDram(kFloorEngineName, pool_size, &pool).ok());
  Options options;
  options.engine = kFloorEngineName;
  options.count_stats = count;
  std::unique_ptr<engines::Engine> engine;
  const Status s = engines::OpenEngine(MakeFloorEngine(), std::move(pool), true, options,
                                       nullptr, &engine);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return engine;
}

TEST(FloorEngine, GetReturnsTheFirstWordOfTheLineTheHashPicks) {
  const std::unique_ptr<engines::Engine> e = OpenFloorEngine(8ull << 20, true);
  ASSERT_NE(e, nullptr);
  const uint64_t lines = FloorEngineLines(*e);
  // The table takes most of the pool.
  EXPECT_GT(lines * sizeof(FloorLine), 6ull << 20);
  EXPECT_LT(lines * sizeof(FloorLine), 8ull << 20);
  const KeySpace keys(16, DistSpec{});
  std::string value;
  for (uint64_t i = 0; i < 1000; ++i) {
    const std::string key = keys.Key(i);
    ASSERT_TRUE(e->Get(key, &value).ok());
    ASSERT_EQ(value.size(), 8u);
    uint64_t word = 0;
    std::memcpy(&word, value.data(), 8);
    EXPECT_EQ(word, FloorWord(Reduce(e->KeyHash(key), lines))) << i;
  }
  // One line read per Get, counted exactly, as every engine's reads are.
  e->persister().DrainMedia();
  EXPECT_EQ(e->Stats().persist.lines_read, 1000u);
  EXPECT_EQ(e->Stats().persist.ops, 1000u);
  // An oversized key is still refused by the kit's check.
  EXPECT_TRUE(e->Get(std::string(kMaxKeySize + 1, 'k'), &value).IsInvalidArgument());
}

TEST(FloorEngine, RefusesWritesAndHoldsNoKey) {
  const std::unique_ptr<engines::Engine> e = OpenFloorEngine(8ull << 20, false);
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->Insert("12345678", "abcdefgh").IsInvalidArgument());
  EXPECT_TRUE(e->Put("12345678", "abcdefgh").IsInvalidArgument());
  EXPECT_TRUE(e->Delete("12345678").IsInvalidArgument());
  EXPECT_EQ(e->Count(), 0u);
  EXPECT_TRUE(e->CheckInvariants().ok());
  EXPECT_TRUE(e->Close().ok());
}

}  // namespace
}  // namespace pmhash::bench
