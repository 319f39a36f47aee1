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

// Key i of the sequences below; every third value is a record.
std::string KeyAt(uint64_t i) { return i == 3 ? "a 16-byte key..." : Key8(i); }
std::string ValueAt(uint64_t i) { return i % 3 == 0 ? "value " + std::to_string(i) : Key8(i * 11); }

void Fill(Index* index, Model* model, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const Status s = index->Insert(KeyAt(i), ValueAt(i));
    if (s.IsTableFull()) continue;
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (model != nullptr) (*model)[KeyAt(i)] = ValueAt(i);
  }
}

// The number of keys inserted (Fill's sequence) before the insert that moves `counter`
// (deterministic under the tests' fixed hash seed); 0 with a failed expectation if none.
uint64_t KeysBefore(const Options& o, const std::string& counter) {
  auto index = OpenOrDie(o);
  if (index == nullptr) return 0;
  for (uint64_t i = 0; i < 400; ++i) {
    const uint64_t before = Counter(index.get(), counter);
    const Status s = index->Insert(KeyAt(i), ValueAt(i));
    if (!s.ok() && !s.IsTableFull()) break;
    if (Counter(index.get(), counter) != before) return i;
  }
  ADD_FAILURE() << "none of the first 400 inserts moved " << counter;
  return 0;
}

void ExpectInsertMovingAllOrNothing(const Options& o, const std::string& counter, int points) {
  const uint64_t n = KeysBefore(o, counter);
  ASSERT_GT(n, 0u);
  const OpCrashOutcome r = CrashDuringOp(
      o, [n](Index* x, Model* m) { Fill(x, m, n); },
      [n, counter](Index* x) {
        const uint64_t before = Counter(x, counter);
        const Status s = x->Insert(KeyAt(n), ValueAt(n));
        EXPECT_EQ(Counter(x, counter), before + 1) << "the insert did not move " << counter;
        return s;
      },
      CheckRecovered);
  ExpectAllOrNothing(r, points);
}

class PfhtCrashTest : public ::testing::TestWithParam<Param> {};

TEST_P(PfhtCrashTest, InsertsDeletesAndUpdatesAreAllOrNothing) {
  ExpectEachAllOrNothing(Small(GetParam(), 8, false), [](Index* x, Model* m) { Fill(x, m, 6); },
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
  const uint64_t n = KeysBefore(o, "stash_inserts");
  ASSERT_GT(n, 0u);
  const OpCrashOutcome r = CrashDuringOp(
      o, [n](Index* x, Model* m) { Fill(x, m, n + 1); },
      [n](Index* x) { return x->Delete(KeyAt(n)); }, CheckRecovered);
  ExpectAllOrNothing(r, 1);
}

TEST_P(PfhtCrashTest, ResizeIsAllOrNothing) {
  const Options o = Small(GetParam(), 2, true);
  const uint64_t n = KeysBefore(o, "resizes");
  ASSERT_GT(n, 0u);
  ExpectGrowthAllOrNothing(o, [n](Index* x, Model* m) { Fill(x, m, n); }, KeyAt(n), "resizes",
                           3, CheckRecovered);
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
