// The persistence figures every registered engine reports per operation, in adr and eadr
// (docs/architecture.md, "Counting rules"): the engine kit brackets each operation
// (Persister::BeginOp / EndOp), engines report their PM reads by address, and the media
// model counts media writes and reads. Read from the registry; no code per engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pm/stats.h"
#include "engines/engine.h"
#include "support/engine_tests.h"
#include "support/harness.h"

namespace pmhash::testing {
namespace {

// What `fn` cost, between two quiet points (background work finished, the media model
// drained, as the benchmark reads its phases).
template <typename Fn>
PersistCounters Measure(engines::Engine* e, Fn&& fn) {
  auto quiet = [e] {
    e->WaitForBackgroundWork();
    e->persister().DrainMedia();
    return e->persister().Totals();
  };
  const PersistCounters before = quiet();
  fn();
  return pm::CountersMinus(quiet(), before);
}

std::vector<EngineSpec> RegisteredSpecs() {
  std::vector<EngineSpec> out;
  for (const EngineSpec& s : ConformanceEngines()) {
    if (!s.test_only) out.push_back(s);
  }
  return out;
}

struct Param {
  std::string engine;
  PersistMode mode;
};

std::vector<Param> Params() {
  std::vector<Param> out;
  for (const EngineSpec& s : RegisteredSpecs()) {
    for (PersistMode m : {PersistMode::kAdr, PersistMode::kEadr}) out.push_back({s.name, m});
  }
  return out;
}

class Figures : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    spec_ = FindSpec(GetParam().engine);
    const std::vector<PersistMode>& modes = spec_.info->capabilities.persist_modes;
    if (std::find(modes.begin(), modes.end(), GetParam().mode) == modes.end()) {
      GTEST_SKIP() << spec_.name << " does not support " << PersistModeName(GetParam().mode);
    }
  }
  // A fresh DRAM index of the engine, with `observer` (may be null).
  std::unique_ptr<engines::Engine> Open(const Options& base, pm::PersistObserver* observer) {
    Options o = base;
    o.engine = spec_.name;
    o.persist = GetParam().mode;
    std::unique_ptr<pm::Pool> pool;
    Status s = NewDramPool(spec_, o.pool_size, &pool);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return nullptr;
    std::unique_ptr<engines::Engine> e;
    s = engines::OpenEngine(spec_.make(), std::move(pool), true, o, observer, &e);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return e;
  }
  EngineSpec spec_;
};

// Inserts, lookups (Get and the pipelined MultiGet) and deletes of 8-byte keys and values:
// each call is one operation with its user bytes; every one reads PM and reports it, each
// media line it touches counted once (so at most as many media reads as lines read);
// writes reach the media model in both modes (eadr: through the cache model, drained);
// lookups write nothing.
TEST_P(Figures, EveryOperationReportsItsReadsAndWrites) {
  constexpr uint64_t kKeys = 512;
  Options o;
  o.count_stats = true;  // the figures are the counters (off by default)
  o.pool_size = spec_.test.conformance_pool_size;
  o.initial_capacity = 4 * kKeys;
  std::unique_ptr<engines::Engine> e = Open(o, nullptr);
  ASSERT_NE(e, nullptr);
  const std::string mode = PersistModeName(GetParam().mode);

  const PersistCounters ins = Measure(e.get(), [&] {
    for (uint64_t i = 0; i < kKeys; ++i) ASSERT_TRUE(e->Insert(Key8(i), Key8(i + 7)).ok());
  });
  EXPECT_EQ(ins.ops, kKeys);
  EXPECT_EQ(ins.user_bytes, 16 * kKeys);
  EXPECT_GE(ins.lines_read, kKeys) << "an insert reads at least its home line";
  EXPECT_GE(ins.media_reads, kKeys);
  EXPECT_LE(ins.media_reads, ins.lines_read);
  EXPECT_GT(ins.lines_written, 0u) << mode;
  EXPECT_GT(ins.media_writes, 0u) << mode;
  if (GetParam().mode == PersistMode::kEadr) {
    EXPECT_EQ(ins.flushes, 0u);
  }

  std::string value;
  const PersistCounters get = Measure(e.get(), [&] {
    for (uint64_t i = 0; i < kKeys; ++i) ASSERT_TRUE(e->Get(Key8(i), &value).ok());
  });
  EXPECT_EQ(get.ops, kKeys);
  EXPECT_EQ(get.user_bytes, 0u);
  EXPECT_GE(get.lines_read, kKeys);
  EXPECT_GE(get.media_reads, kKeys);
  EXPECT_LE(get.media_reads, get.lines_read);
  EXPECT_EQ(get.bytes_stored, 0u);
  EXPECT_EQ(get.media_writes, 0u);

  // MultiGet: each key an operation with a read set of its own, so the figures are the
  // Gets' exactly (one set for the batch would count a line two keys share once).
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < kKeys; ++i) keys.push_back(Key8(i));
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<std::string> values(kKeys);
  std::vector<Status> statuses(kKeys);
  const PersistCounters multi = Measure(e.get(), [&] { e->MultiGet(views, values, statuses); });
  for (const Status& s : statuses) ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(multi.ops, kKeys);
  EXPECT_EQ(multi.lines_read, get.lines_read);
  EXPECT_EQ(multi.media_reads, get.media_reads);

  const PersistCounters del = Measure(e.get(), [&] {
    for (uint64_t i = 0; i < kKeys; i += 2) ASSERT_TRUE(e->Delete(Key8(i)).ok());
  });
  EXPECT_EQ(del.ops, kKeys / 2);
  EXPECT_EQ(del.user_bytes, 8 * (kKeys / 2));
  EXPECT_GE(del.lines_read, kKeys / 2);
  EXPECT_GT(del.media_writes, 0u) << mode;
  ASSERT_EQ(CheckInvariantsOf(e.get()), "");
}

// Records every store of one thread: inside an operation (between OnOpBegin and OnOpEnd,
// its bytes added to that operation's) or outside any.
class OpStoreRecorder : public pm::PersistObserver {
 public:
  void Arm() {
    thread_ = std::this_thread::get_id();
    armed_ = true;
  }
  void OnStore(const void*, size_t len) override {
    if (!armed_ || std::this_thread::get_id() != thread_) return;  // background threads
    if (depth_ == 0) {
      outside_ += len;
    } else {
      current_ += len;
    }
  }
  void OnFlush(const void*, size_t) override {}
  void OnFence() override {}
  void OnOpBegin() override {
    if (!armed_ || std::this_thread::get_id() != thread_) return;
    if (depth_++ == 0) current_ = 0;
  }
  void OnOpEnd() override {
    if (!armed_ || std::this_thread::get_id() != thread_) return;
    if (--depth_ == 0) ops_.push_back(current_);
  }
  const std::vector<uint64_t>& op_bytes() const { return ops_; }
  uint64_t outside() const { return outside_; }
  int depth() const { return depth_; }

 private:
  std::thread::id thread_;
  bool armed_ = false;
  int depth_ = 0;
  uint64_t current_ = 0, outside_ = 0;
  std::vector<uint64_t> ops_;
};

// The counting rule for growth: the stores of a split, doubling or resize happen inside
// the operation that triggered it (so its per-operation figures include them, and a crash
// point at its end comes after them). The growth counters of the engine's test profile
// that grow synchronously ("resizes", "grows", "splits", "doublings"; refills and filter
// rebuilds run on threads of their own).
TEST_P(Figures, GrowthCountsAgainstTheOperationThatTriggeredIt) {
  if (!spec_.info->capabilities.resizes) GTEST_SKIP() << spec_.name << " never grows";
  static const std::set<std::string> kSynchronous = {"resizes", "grows", "splits",
                                                     "doublings"};
  std::string counter;
  for (const std::string& c : spec_.test.growth_counters) {
    if (kSynchronous.count(c)) counter = c;
  }
  ASSERT_NE(counter, "") << "no synchronous growth counter in " << spec_.name
                         << "'s TestProfile::growth_counters";
  Options o;
  o.pool_size = spec_.test.crash_pool_size;
  o.initial_capacity = 16;
  o.engine_options = spec_.test.crash_options;
  OpStoreRecorder recorder;
  std::unique_ptr<engines::Engine> e = Open(o, &recorder);
  ASSERT_NE(e, nullptr);
  e->WaitForBackgroundWork();
  recorder.Arm();
  const uint64_t start = e->Stats().engine_counters.at(counter);
  std::vector<size_t> growth_ops;  // the inserts during which the counter moved
  uint64_t last = start;
  for (uint64_t i = 0; i < 4000 && growth_ops.size() < 2; ++i) {
    ASSERT_TRUE(e->Insert(Key8(i), Key8(i)).ok());
    const uint64_t now = e->Stats().engine_counters.at(counter);
    if (now != last) growth_ops.push_back(i);
    last = now;
  }
  e->WaitForBackgroundWork();
  ASSERT_FALSE(growth_ops.empty()) << spec_.name << ": " << counter << " never moved";
  EXPECT_EQ(recorder.depth(), 0);
  EXPECT_EQ(recorder.outside(), 0u) << "stores of the inserting thread outside any operation";
  std::vector<uint64_t> bytes = recorder.op_bytes();
  ASSERT_EQ(bytes.size(), growth_ops.back() + 1) << "one operation per insert";
  std::vector<uint64_t> sorted = bytes;
  std::sort(sorted.begin(), sorted.end());
  const uint64_t median = sorted[sorted.size() / 2];
  for (size_t op : growth_ops) {
    EXPECT_GT(bytes[op], 4 * median)
        << spec_.name << ": insert " << op << " grew the table (" << counter
        << ") but stored only " << bytes[op] << " bytes within its operation (median "
        << median << ")";
  }
  ASSERT_EQ(CheckInvariantsOf(e.get()), "");
}

INSTANTIATE_TEST_SUITE_P(Engines, Figures, ::testing::ValuesIn(Params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return GtestName(info.param.engine) + "_" +
                                  PersistModeName(info.param.mode);
                         });

}  // namespace
}  // namespace pmhash::testing
