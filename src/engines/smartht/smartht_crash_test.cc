// Crashes inside single operations of `smartht` under the power-failure simulator
// (src/pm/crashsim.h): at every fence and after every store, crash images are recovered
// and must hold exactly the state before or after the operation, with the engine's
// invariants intact (every stored key in the rebuilt filter). Covers Algorithm 1's two
// insert paths, lazy deletion, the three kinds of update and a growth of the head table.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engines/smartht/smartht.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

// 256 head buckets; keys of head bucket 9 only, so chains form at once.
Options Small(PersistMode mode, const std::string& max_chain) {
  Options o;
  o.engine = "smartht";
  o.pool_size = 4ull << 20;
  o.persist = mode;
  o.engine_options = {{"head_buckets", "256"}, {"max_chain", max_chain}};
  return o;
}

std::vector<std::string> ChainKeys(size_t n, uint64_t from) {
  return testing::KeysWithHome(9, 256, n, from);
}

// n keys into head bucket 9's chain; every third value out of line.
void FillChain(Index* index, Model* model, size_t n) {
  for (const std::string& k : ChainKeys(n, 0)) {
    const std::string v = model->size() % 3 == 0 ? "value " + std::to_string(model->size())
                                                  : Key8(model->size() * 11);
    ASSERT_TRUE(index->Insert(k, v).ok());
    (*model)[k] = v;
  }
}

class SmartHtCrashTest : public ::testing::TestWithParam<PersistMode> {};

TEST_P(SmartHtCrashTest, InsertsDeletesAndUpdatesAreAllOrNothing) {
  const Options o = Small(GetParam(), "1000");
  const std::vector<std::string> keys = ChainKeys(6, 0);  // FillChain(5) uses keys[0..4]
  // Five keys: the head bucket is full, the first chained bucket has one free slot (the
  // inserts take it; the deletes are lazy). keys[0] and keys[3] hold records ("value N");
  // the others inline values.
  ExpectEachAllOrNothing(o, [](Index* x, Model* m) { FillChain(x, m, 5); },
                         SlotEncodingOps({.absent_inline = keys[5],
                                          .absent_record = keys[5],
                                          .inline_key = keys[1],
                                          .inline_key2 = keys[2],
                                          .record_key = keys[3]}),
                         2);
}

TEST_P(SmartHtCrashTest, NewChainedBucketIsAllOrNothing) {
  // Three keys fill the head bucket; the fourth goes into a new bucket behind it.
  // A freed 64-byte record first: the new bucket's block then holds stale bytes, so a
  // bucket linked before it is durable would show garbage after a crash.
  const std::vector<std::string> keys = ChainKeys(4, 0);
  OpCrashOutcome r = CrashDuringOp(
      Small(GetParam(), "1000"),
      [](Index* x, Model* m) {
        ASSERT_TRUE(x->Insert("stale key", std::string(40, 's')).ok());
        ASSERT_TRUE(x->Delete("stale key").ok());
        FillChain(x, m, 3);
      },
      [&](Index* x) { return x->Insert(keys[3], "a record value"); });
  ExpectAllOrNothing(r, 3);
}

TEST_P(SmartHtCrashTest, HeadTableGrowthIsAllOrNothing) {
  // max_chain 0.01 x 256 heads: the third chained bucket makes the table double.
  ExpectGrowthAllOrNothing(Small(GetParam(), "0.01"),
                           [](Index* x, Model* m) { FillChain(x, m, 9); }, ChainKeys(10, 0)[9],
                           "grows", 11);
}

INSTANTIATE_TEST_SUITE_P(Modes, SmartHtCrashTest, testing::PersistModes(),
                         testing::PersistModeTestName);

}  // namespace
}  // namespace pmhash::engines
