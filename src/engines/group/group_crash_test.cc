// Crashes inside single operations of `group` under the power-failure simulator
// (src/pm/crashsim.h): at every fence and at sampled stores, crash images are recovered
// and must hold exactly the state before or after the operation, with the engine's
// invariants intact (Algorithm 4 repairs the rest). Covers the paper's insert (level 1 and
// level 2) and delete, the three kinds of update, and a resize.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "util/hash.h"
#include "engines/group/group.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h, op_crash.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

// Each persistence mode, without and with tags in the form bytes (tags=on).
struct CrashParam {
  PersistMode mode;
  bool tags;
};

// One group of 4 cells per level (8 cells), so collisions reach level 2 at once.
Options OneGroup(const CrashParam& param, bool resize) {
  Options o;
  o.engine = "group";
  o.pool_size = 4ull << 20;
  o.persist = param.mode;
  o.engine_options = {{"group_size", "4"},
                      {"cells", "8"},
                      {"resize", resize ? "on" : "off"},
                      {"tags", param.tags ? "on" : "off"}};
  return o;
}

// Fills the one-group table with keys until every cell is taken (simulating Alg. 1's
// placement to skip keys that would not fit). Every third value is out of line, and one
// key is 16 bytes (record form).
void FillGroup(Index* index, Model* model, size_t limit) {
  std::set<uint64_t> level1;
  size_t level2 = 0;
  for (uint64_t i = 0; model->size() < limit; ++i) {
    const std::string k = i == 3 ? "a 16-byte key..." : Key8(i);
    const uint64_t home = Reduce(HashKey(k, kTestHashSeed), 4);
    const bool in_level1 = level1.count(home) == 0;
    if (!in_level1 && level2 == 4) continue;
    const std::string v = i % 3 == 0 ? "value " + std::to_string(i) : Key8(i * 11);
    const Status st = index->Insert(k, v);
    ASSERT_TRUE(st.ok()) << st.ToString() << " (key " << i << ", home " << home << ")";
    (*model)[k] = v;
    if (in_level1) {
      level1.insert(home);
    } else {
      ++level2;
    }
  }
}

class GroupCrashTest : public ::testing::TestWithParam<CrashParam> {};

TEST_P(GroupCrashTest, InsertsDeletesAndUpdatesAreAllOrNothing) {
  const Options o = OneGroup(GetParam(), /*resize=*/false);
  Model filled;  // the keys FillGroup(6) stores, to pick operands from
  {
    std::unique_ptr<Index> scratch;
    Options dram = o;
    ASSERT_TRUE(Open(dram, &scratch).ok());
    FillGroup(scratch.get(), &filled, 6);
  }
  std::vector<std::string> inline_keys, record_keys;
  for (const auto& [k, v] : filled) {
    (k.size() == 8 && v.size() == 8 ? inline_keys : record_keys).push_back(k);
  }
  ASSERT_GE(inline_keys.size(), 2u);
  ASSERT_GE(record_keys.size(), 1u);
  // At least one store and one fence each.
  ExpectEachAllOrNothing(o, [](Index* x, Model* m) { FillGroup(x, m, 6); },
                         SlotEncodingOps({.absent_inline = Key8(1000),
                                          .absent_record = "long key 1000",
                                          .inline_key = inline_keys[0],
                                          .inline_key2 = inline_keys[1],
                                          .record_key = record_keys[0]}),
                         2);
}

TEST_P(GroupCrashTest, ResizeIsAllOrNothing) {
  // Every cell of the one group is taken, so the next insert doubles the table first:
  // crash points in the zeroing, 8 migrated cells, the switch, the insert.
  ExpectGrowthAllOrNothing(OneGroup(GetParam(), /*resize=*/true),
                           [](Index* x, Model* m) { FillGroup(x, m, 8); }, Key8(5000), "resizes",
                           21);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, GroupCrashTest,
    ::testing::Values(CrashParam{PersistMode::kAdr, false}, CrashParam{PersistMode::kEadr, false},
                      CrashParam{PersistMode::kAdr, true}, CrashParam{PersistMode::kEadr, true}),
    [](const ::testing::TestParamInfo<CrashParam>& info) {
      return testing::PersistModeTestName({info.param.mode, info.index}) +
             (info.param.tags ? "Tags" : "");
    });

}  // namespace
}  // namespace pmhash::engines
