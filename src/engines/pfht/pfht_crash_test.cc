// Crashes inside single operations of `pfht` and `pfht-log` under the power-failure
// simulator (src/pm/crashsim.h): at every fence and after every store, crash images are
// recovered and must hold exactly the state before or after the operation, with the
// engine's invariants intact (no key twice, none lost). Covers inserts into a free slot,
// deletes, updates (the slot encoding's seven operations), an insert that makes room by a
// displacement (pfht: a crash between the copy and the clear leaves a duplicate that
// recovery clears; pfht-log: the log rolls the displacement back), an insert into the
// stash, and an insert that doubles the table.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "engines/pfht/pfht.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"

namespace pmhash::engines {
namespace {

using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

const OpCrashCheck CheckRecovered = InsertsAfterRecovery;

using Param = std::tuple<std::string, PersistMode>;

Options Small(const Param& p, uint64_t buckets, bool resize) {
  Options o = OptionsFor(std::get<0>(p), {{"buckets", std::to_string(buckets)},
                                          {"resize", resize ? "on" : "off"}},
                         4ull << 20);
  o.persist = std::get<1>(p);
  return o;
}

// The key sequence: support/op_crash.h (CrashKeyAt, CrashValueAt, FillCrashKeys).

class PfhtCrashTest : public ::testing::TestWithParam<Param> {};

TEST_P(PfhtCrashTest, InsertsDeletesAndUpdatesAreAllOrNothing) {
  ExpectEachAllOrNothing(Small(GetParam(), 8, false),
                         [](Index* x, Model* m) { FillCrashKeys(x, m, 6); },
                         SlotEncodingOps({.absent_inline = Key8(1000),
                                          .absent_record = "long key 1000",
                                          .inline_key = Key8(1),
                                          .inline_key2 = Key8(4),
                                          .record_key = "a 16-byte key..."}),
                         2, CheckRecovered);
}

TEST_P(PfhtCrashTest, DisplacementIsAllOrNothing) {
  // Four buckets, resize off: the buckets fill, then an insert moves one resident.
  ExpectInsertMovingAllOrNothing(Small(GetParam(), 4, false), "displacements", 4);
}

TEST_P(PfhtCrashTest, StashInsertAndDeleteAreAllOrNothing) {
  const Options o = Small(GetParam(), 4, false);
  ExpectInsertMovingAllOrNothing(o, "stash_inserts", 2);
  // A delete from the stash: the first stashed key.
  const uint64_t n = KeysBeforeCounterMoves(o, "stash_inserts", 400);
  ASSERT_GT(n, 0u);
  const OpCrashOutcome r = CrashDuringOp(
      o, [n](Index* x, Model* m) { FillCrashKeys(x, m, n + 1); },
      [n](Index* x) { return x->Delete(CrashKeyAt(n)); }, CheckRecovered);
  ExpectAllOrNothing(r, 1);
}

TEST_P(PfhtCrashTest, ResizeIsAllOrNothing) {
  const Options o = Small(GetParam(), 2, true);
  const uint64_t n = KeysBeforeCounterMoves(o, "resizes", 400);
  ASSERT_GT(n, 0u);
  ExpectGrowthAllOrNothing(o, [n](Index* x, Model* m) { FillCrashKeys(x, m, n); },
                           CrashKeyAt(n), "resizes", 3, CheckRecovered);
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  std::string e = std::get<0>(info.param);
  for (char& c : e) c = c == '-' ? '_' : c;
  return e + "_" +
         PersistModeTestName(::testing::TestParamInfo<PersistMode>(std::get<1>(info.param),
                                                                  info.index));
}

INSTANTIATE_TEST_SUITE_P(Variants, PfhtCrashTest,
                         ::testing::Combine(::testing::Values("pfht", "pfht-log"),
                                            ::testing::Values(PersistMode::kAdr,
                                                              PersistMode::kEadr)),
                         Name);

}  // namespace
}  // namespace pmhash::engines
