#include "bench/micro.h"

#include <gtest/gtest.h>

namespace pmhash::bench {
namespace {

TEST(XplineMicro, BadConfigsAreInvalidArgument) {
  struct Case {
    const char* fragment;
    XplineMicroConfig config;
  };
  auto with = [](auto set) {
    XplineMicroConfig c;
    set(c);
    return c;
  };
  const Case bad[] = {
      {"buckets", with([](XplineMicroConfig& c) { c.buckets = 0; })},
      {"buckets", with([](XplineMicroConfig& c) { c.buckets = (1ull << 32) + 1; })},
      {"no bucket sizes", with([](XplineMicroConfig& c) { c.bucket_bytes.clear(); })},
      {"bucket size 8", with([](XplineMicroConfig& c) { c.bucket_bytes = {8}; })},
      {"bucket size 100", with([](XplineMicroConfig& c) { c.bucket_bytes = {64, 100}; })},
      {"bucket size 8192", with([](XplineMicroConfig& c) { c.bucket_bytes = {8192}; })},
      {"latency", with([](XplineMicroConfig& c) { c.write_latency_ns = 100001; })},
      {"16 GiB", with([](XplineMicroConfig& c) {
         c.buckets = 1ull << 32;
         c.bucket_bytes = {4096};
       })},
  };
  for (const Case& c : bad) {
    XplineMicroResult r;
    Status s = MeasureXplineMicro(c.config, &r);
    EXPECT_TRUE(s.IsInvalidArgument()) << c.fragment;
    EXPECT_NE(s.message().find(c.fragment), std::string::npos) << s.ToString();
    EXPECT_TRUE(r.rows.empty());
  }
}

const XplineMicroRow& Row(const XplineMicroResult& r, bool aligned, uint32_t size,
                          bool sequential) {
  for (const XplineMicroRow& row : r.rows) {
    if (row.aligned == aligned && row.bucket_bytes == size && row.sequential == sequential) {
      return row;
    }
  }
  ADD_FAILURE() << "no row " << aligned << " " << size << " " << sequential;
  return r.rows.front();
}

// The model's figures for the BHT Fig. 1 setting, small: sequential fills of buckets that
// own whole media lines cost media lines per bucket (64 B: 4x, 256 B: 1x, 320 B: 512/320);
// packed buckets written sequentially merge into whole media lines (1x); random writes
// into far more media lines than the device buffers hold cost one media write (and one
// read-modify-write) each, close to the paper's 16x.
TEST(XplineMicro, WriteAmplificationMatchesTheLayout) {
  XplineMicroConfig c;
  c.buckets = 8192;
  c.bucket_bytes = {64, 256, 320};
  c.write_latency_ns = 0;
  XplineMicroResult r;
  ASSERT_TRUE(MeasureXplineMicro(c, &r).ok());
  ASSERT_EQ(r.rows.size(), 2u * 3 * 2);
  EXPECT_DOUBLE_EQ(Row(r, true, 64, true).media_write_amp, 4.0);
  EXPECT_DOUBLE_EQ(Row(r, true, 256, true).media_write_amp, 1.0);
  EXPECT_DOUBLE_EQ(Row(r, true, 320, true).media_write_amp, 512.0 / 320);
  EXPECT_DOUBLE_EQ(Row(r, true, 256, true).media_rmw_reads_per_op, 0.0);
  EXPECT_DOUBLE_EQ(Row(r, true, 64, true).media_rmw_reads_per_op, 1.0 / 4) << "1 of 4 lines";
  for (uint32_t size : {64u, 256u, 320u}) {
    SCOPED_TRACE(size);
    EXPECT_DOUBLE_EQ(Row(r, false, size, true).media_write_amp, 1.0);
    EXPECT_GT(Row(r, true, size, false).media_write_amp, 13.0);
    EXPECT_LE(Row(r, true, size, false).media_write_amp, 16.0);
    EXPECT_GT(Row(r, true, size, false).media_rmw_reads_per_op, 0.8);
    EXPECT_EQ(Row(r, true, size, false).writes, c.buckets * size / 16);
    EXPECT_DOUBLE_EQ(Row(r, true, size, false).lines_written_per_op, 1.0) << "one flush each";
  }
}

TEST(PersistMicro, MeasuresEveryConfigurationInBothModes) {
  for (PersistMode mode : {PersistMode::kAdr, PersistMode::kEadr}) {
    SCOPED_TRACE(PersistModeName(mode));
    PersistMicroConfig c;
    c.iterations = 2000;
    c.repetitions = 1;
    c.region_bytes = 8 << 20;
    c.write_latency_ns = 10;
    c.mode = mode;
    PersistMicroResult r;
    ASSERT_TRUE(MeasurePersistMicro(c, &r).ok());
    ASSERT_EQ(r.rows.size(), 5u);
    EXPECT_FALSE(r.rows[0].counters);
    EXPECT_FALSE(r.rows[0].media_model);
    EXPECT_TRUE(r.rows[1].counters);
    EXPECT_FALSE(r.rows[1].media_model);
    EXPECT_TRUE(r.rows[2].media_model);
    EXPECT_EQ(r.rows[0].overhead_ratio, 1.0);
    EXPECT_EQ(r.rows[3].write_latency_ns, 10u);
    EXPECT_FALSE(r.rows[3].counters);
    EXPECT_TRUE(r.rows[3].media_model) << "latency needs the model";
    EXPECT_DOUBLE_EQ(r.rows[2].fences_per_op, 1.0);
    EXPECT_DOUBLE_EQ(r.rows[2].flushes_per_op, mode == PersistMode::kAdr ? 1.0 : 0.0);
    // Random lines of an 8 MiB region: nearly every op a media line of its own.
    EXPECT_GT(r.rows[2].media_writes_per_op, 0.5);
    EXPECT_EQ(r.rows[1].media_writes_per_op, 0.0) << "model off: not measured";
  }
}

}  // namespace
}  // namespace pmhash::bench
