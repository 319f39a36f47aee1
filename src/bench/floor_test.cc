// Tests of the machine's floor: each loop does the work it claims (checked through the
// Persister's counters and the words it reads), on the pool kind and persistence mode of
// the run. Nothing here is timed.
#include "bench/floor.h"
#include "bench/floor_engine.h"
#include "bench/summary.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <gtest/gtest.h>

#include "pm/pool.h"
#include "util/hash.h"

namespace pmhash::bench {
namespace {

BenchConfig TinyConfig() {
  BenchConfig config;
  config.records = 1000;
  config.ops = 3000;
  config.pool = "dram";
  config.pool_size = 8ull << 20;
  return config;
}

const PersistCounters& Counters(const FloorResult& r, FloorKind kind) {
  return r.persist[static_cast<size_t>(kind)];
}

TEST(Floor, EachLoopDoesItsWorkOnThePoolOfTheRun) {
  BenchConfig config = TinyConfig();
  FloorResult r;
  ASSERT_TRUE(MeasureFloor(config, BenchEnv{}, 2, &r).ok());
  EXPECT_EQ(r.threads, 2);
  EXPECT_EQ(r.ops, 3000u);
  EXPECT_EQ(r.mapping, "dram");
  EXPECT_EQ(r.prefetch_distance, 16u);
  // The buckets fill the pool's heap: most of the 8 MiB.
  EXPECT_GT(r.table_bytes, 6ull << 20);
  EXPECT_LE(r.table_bytes, 8ull << 20);
  EXPECT_NE(r.checksum, 0u);
  for (FloorKind kind : kAllFloorKinds) {
    EXPECT_GT(r.seconds[static_cast<size_t>(kind)], 0) << FloorKindName(kind);
    EXPECT_GT(r.mops(kind), 0) << FloorKindName(kind);
  }
  // adr: an insert-like op stores 16 bytes and persists one line; a delete-like op
  // stores 8; lookups store and flush nothing.
  const PersistCounters& ins = Counters(r, FloorKind::kInsert);
  EXPECT_EQ(ins.flushes, 3000u);
  EXPECT_EQ(ins.fences, 3000u);
  EXPECT_EQ(ins.bytes_stored, 16u * 3000);
  const PersistCounters& del = Counters(r, FloorKind::kDelete);
  EXPECT_EQ(del.flushes, 3000u);
  EXPECT_EQ(del.bytes_stored, 8u * 3000);
  for (FloorKind kind :
       {FloorKind::kLookup, FloorKind::kPrefetch, FloorKind::kDependent, FloorKind::kApi}) {
    EXPECT_EQ(Counters(r, kind).flushes, 0u) << FloorKindName(kind);
    EXPECT_EQ(Counters(r, kind).bytes_stored, 0u) << FloorKindName(kind);
  }
}

// The api row runs the floor-api engine's Gets through the benchmark's loop: every Get
// returned its line's first word (the checksum of the values read is recomputed here from
// the same keys and an engine on a pool of the same size), each read one line, counted.
TEST(Floor, ApiRowReadsOneLinePerGetThroughTheIndex) {
  BenchConfig config = TinyConfig();
  FloorResult r;
  ASSERT_TRUE(MeasureFloor(config, BenchEnv{}, 2, &r).ok());
  const PersistCounters& api = Counters(r, FloorKind::kApi);
  EXPECT_EQ(api.ops, 3000u);
  EXPECT_EQ(api.lines_read, 3000u);

  std::unique_ptr<pm::Pool> pool;
  ASSERT_TRUE(pm::Pool::CreateDram(kFloorEngineName, config.pool_size, &pool).ok());
  Options options;
  options.engine = kFloorEngineName;
  std::unique_ptr<engines::Engine> same;  // its table's size; the bench hashes with --seed
  ASSERT_TRUE(
      engines::OpenEngine(MakeFloorEngine(), std::move(pool), true, options, nullptr, &same).ok());
  const uint64_t lines = FloorEngineLines(*same);
  uint64_t expected = 0;
  for (const ThreadPlan& p : FloorApiPlans(config, 2)) {
    for (uint64_t i = 0; i < p.n; ++i) {
      const std::string_view key(p.keys.data() + i * config.key_size, config.key_size);
      expected += FloorWord(Reduce(HashKey(key, config.seed), lines)) ^ sizeof(uint64_t);
    }
  }
  EXPECT_EQ(r.api_checksum, expected);
  EXPECT_NE(expected, 0u);
}

TEST(Floor, UsesThePersistenceModeOfTheRun) {
  BenchConfig config = TinyConfig();
  config.persist = PersistMode::kNone;
  FloorResult r;
  ASSERT_TRUE(MeasureFloor(config, BenchEnv{}, 1, &r).ok());
  EXPECT_EQ(Counters(r, FloorKind::kInsert).flushes, 0u);
  EXPECT_EQ(Counters(r, FloorKind::kInsert).fences, 0u);
  EXPECT_EQ(Counters(r, FloorKind::kInsert).bytes_stored, 16u * 3000);
}

// --counters off: the engines run without counting and without the media model, so the
// loops they are read against must too, and their persistence figures are unknown (null),
// never zero.
TEST(Floor, FollowsCountersOffAndReportsItsFiguresAsUnknown) {
  BenchConfig config = TinyConfig();
  config.count_stats = false;
  FloorResult r;
  ASSERT_TRUE(MeasureFloor(config, BenchEnv{}, 1, &r).ok());
  EXPECT_FALSE(r.counted);
  EXPECT_EQ(Counters(r, FloorKind::kInsert).flushes, 0u);
  EXPECT_GT(r.mops(FloorKind::kInsert), 0);
  FloorSummary s;
  s.rounds.push_back(r);
  const Json j = s.ToJson();
  const Json* insert = j.Find("loops")->Find("insert");
  ASSERT_NE(insert, nullptr);
  EXPECT_TRUE(insert->Find("flushes_per_op")->is_null());
  EXPECT_TRUE(insert->Find("pm_bytes_written_per_op")->is_null());

  config.count_stats = true;
  ASSERT_TRUE(MeasureFloor(config, BenchEnv{}, 1, &r).ok());
  EXPECT_TRUE(r.counted);
  s.rounds = {r};
  EXPECT_EQ(s.ToJson().Find("loops")->Find("insert")->Find("flushes_per_op")->number(), 1.0);
}

TEST(Floor, FilePoolIsOfTheRunsKindAndRemoved) {
  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                          "/pmhash-floor-test-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  BenchConfig config = TinyConfig();
  config.pool = dir;
  FloorResult r;
  ASSERT_TRUE(MeasureFloor(config, BenchEnv{}, 1, &r).ok());
  EXPECT_EQ(r.mapping, "shared");
  EXPECT_GT(r.table_bytes, 0u);
  DIR* d = ::opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  int entries = 0;
  while (dirent* e = ::readdir(d)) entries += e->d_name[0] != '.';
  ::closedir(d);
  EXPECT_EQ(entries, 0);
  ::rmdir(dir.c_str());
}

TEST(Floor, EachPhaseIsReadAgainstItsMatchingLoop) {
  PhaseResult row;
  const std::pair<const char*, std::optional<FloorKind>> cases[] = {
      {"load", FloorKind::kInsert},   {"prefill", FloorKind::kInsert},
      {"fill", FloorKind::kInsert},   {"delete", FloorKind::kDelete},
      {"search", FloorKind::kLookup}, {"negative", FloorKind::kLookup},
      {"update", std::nullopt},       {"mixed", std::nullopt}};
  for (const auto& [phase, kind] : cases) {
    row.phase = phase;
    EXPECT_EQ(FloorFor(row), kind) << phase;
  }
  row.batch = 8;
  row.phase = "search";
  EXPECT_EQ(FloorFor(row), FloorKind::kPrefetch);
  row.phase = "negative";
  EXPECT_EQ(FloorFor(row), FloorKind::kPrefetch);
}

}  // namespace
}  // namespace pmhash::bench
