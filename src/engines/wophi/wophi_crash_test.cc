// Crashes inside single operations of `wophi` under the power-failure simulator
// (src/pm/crashsim.h): at every fence and after every store, crash images are recovered
// and must hold exactly the state before or after the operation, with the engine's
// invariants intact. Covers Alg. 1 (a free slot of the chain, and a full chain taking a
// PAB bucket), the PAB refill, Alg. 2, the three kinds of update, and a resize.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engines/wophi/wophi.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

// A recovered image keeps working (a new key may take a PAB bucket).
const OpCrashCheck CheckRecovered = InsertsAfterRecovery;

// One main bucket, so every key shares one chain; PAB blocks of 2 buckets refilled when
// at most 1 is free, so taking a bucket also refills.
Options OneChain(PersistMode mode, bool resize) {
  Options o;
  o.engine = "wophi";
  o.pool_size = 4ull << 20;
  o.persist = mode;
  o.engine_options = {{"buckets", "1"},
                      {"pab_buckets", "2"},
                      {"pab_low", "1"},
                      {"resize", resize ? "on" : "off"},
                      {"max_load_factor", "1"}};
  return o;
}

// n keys in the chain; every third value out of line, key 3 is 16 bytes (record form).
void Fill(Index* index, Model* model, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const std::string k = i == 3 ? "a 16-byte key..." : Key8(i);
    const std::string v = i % 3 == 0 ? "value " + std::to_string(i) : Key8(i * 11);
    ASSERT_TRUE(index->Insert(k, v).ok());
    (*model)[k] = v;
  }
}

class WophiCrashTest : public ::testing::TestWithParam<PersistMode> {};

TEST_P(WophiCrashTest, InsertsDeletesAndUpdatesAreAllOrNothing) {
  const Options o = OneChain(GetParam(), /*resize=*/false);
  // Inserts into the chain's free slot.
  ExpectEachAllOrNothing(o, [](Index* x, Model* m) { Fill(x, m, 6); },
                         SlotEncodingOps({.absent_inline = Key8(1000),
                                          .absent_record = "long key 1000",
                                          .inline_key = Key8(1),
                                          .inline_key2 = Key8(4),
                                          .record_key = "a 16-byte key..."}),
                         2, CheckRecovered);
}

TEST_P(WophiCrashTest, TakingAPreallocatedBucketAndRefillingAreAllOrNothing) {
  // 12 keys fill mb[0] and two chain buckets (the first take refilled the PAB to 3 free
  // buckets, the second left 2): the next insert takes a PAB bucket (Alg. 1 lines 27-33),
  // which leaves one free bucket, so the refill thread links a new PAB block. Its crash
  // points come from that thread, while the insert is still in flight or just done.
  const Options o = OneChain(GetParam(), /*resize=*/false);
  for (const bool record : {false, true}) {
    SCOPED_TRACE(record ? "record" : "inline");
    OpCrashOutcome r = CrashDuringOp(
        o, [](Index* x, Model* m) { Fill(x, m, 12); },
        [record](Index* x) {
          Wophi* w = dynamic_cast<Wophi*>(x);
          const uint64_t refills = w->pab_refills();
          Status s = record ? x->Insert("a key of the new bucket", "v")
                            : x->Insert(Key8(900), Key8(9));
          w->WaitForBackgroundWork();
          EXPECT_EQ(w->expand_bucket_num(), 3u);
          EXPECT_EQ(w->pab_refills(), refills + 1);
          return s;
        },
        CheckRecovered);
    ExpectAllOrNothing(r, 6);  // tmp written, fence, link, fence, block zeroed, switch
  }
}

TEST_P(WophiCrashTest, ResizeIsAllOrNothing) {
  // 8 keys in one main bucket (4 slots) with max_load_factor 1: the insert that takes a
  // chain bucket finds the load factor over 1 and doubles the main buckets.
  ExpectGrowthAllOrNothing(OneChain(GetParam(), /*resize=*/true),
                           [](Index* x, Model* m) { Fill(x, m, 4); }, Key8(5000), "resizes", 11,
                           CheckRecovered);
}

INSTANTIATE_TEST_SUITE_P(Modes, WophiCrashTest, testing::PersistModes(),
                         testing::PersistModeTestName);

}  // namespace
}  // namespace pmhash::engines
