// Crashes inside single operations of `path` and `path-log` under the power-failure
// simulator (src/pm/crashsim.h): at every fence and after every store, crash images are
// recovered and must hold exactly the state before or after the operation, with the
// engine's invariants intact. Covers the seven operations of the slot encoding (inserts,
// deletes, the three updates) and a doubling that copies the old levels up and re-places
// the old top level's keys.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engines/path/path.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"

namespace pmhash::engines {
namespace {

using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

struct CrashParam {
  const char* engine;
  PersistMode mode;
};

Options Small(const CrashParam& p, const char* leaves, const char* reserved) {
  Options o = OptionsFor(p.engine, {{"leaves", leaves}, {"reserved_levels", reserved}},
                         4ull << 20);
  o.persist = p.mode;
  return o;
}

class PathCrashTest : public ::testing::TestWithParam<CrashParam> {};

TEST_P(PathCrashTest, InsertsDeletesAndUpdatesAreAllOrNothing) {
  // 8 leaves, 3 levels: 14 cells, 5 keys in them.
  const Options o = Small(GetParam(), "8", "3");
  const auto fill = [](Index* x, Model* m) {
    const std::vector<std::pair<std::string, std::string>> kv = {
        {Key8(1), Key8(11)},
        {Key8(2), Key8(12)},
        {"a 16-byte key...", "a record value"},
        {Key8(4), "long value 4"},
        {Key8(5), Key8(15)}};
    for (const auto& [k, v] : kv) {
      ASSERT_TRUE(x->Insert(k, v).ok()) << k;
      (*m)[k] = v;
    }
  };
  ExpectEachAllOrNothing(o, fill,
                         SlotEncodingOps({.absent_inline = Key8(1000),
                                          .absent_record = "long key 1000",
                                          .inline_key = Key8(1),
                                          .inline_key2 = Key8(2),
                                          .record_key = "a 16-byte key..."}),
                         1);
}

TEST_P(PathCrashTest, DoublingIsAllOrNothing) {
  // 4 leaves and 2 kept levels (6 cells): the tree keeps all it may already, so the
  // doubling copies level 0 up and re-places the keys of the old top level. The keys
  // before the first doubling and the key that causes it, found on a scratch index.
  const Options o = Small(GetParam(), "4", "2");
  std::vector<std::string> before;
  std::string grower;
  {
    auto scratch = OpenOrDie(o);
    ASSERT_NE(scratch, nullptr);
    for (uint64_t i = 0; grower.empty(); ++i) {
      const std::string k = i % 3 == 2 ? "long key " + std::to_string(i) : Key8(i);
      ASSERT_TRUE(scratch->Insert(k, Key8(i)).ok());
      if (Counter(scratch.get(), "resizes") > 0) {
        grower = k;
      } else {
        before.push_back(k);
      }
    }
  }
  ASSERT_GE(before.size(), 3u);
  const auto fill = [&](Index* x, Model* m) {
    for (size_t i = 0; i < before.size(); ++i) {
      // The same values as on the scratch index (the key's number).
      const std::string& k = before[i];
      ASSERT_TRUE(x->Insert(k, Key8(i)).ok());
      (*m)[k] = Key8(i);
    }
  };
  // The scratch index used the loop's counter as the value; the placement depends on the
  // keys only, so other values fill the tree the same way.
  ExpectGrowthAllOrNothing(o, fill, grower, "resizes", 3);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, PathCrashTest,
    ::testing::Values(CrashParam{"path", PersistMode::kAdr}, CrashParam{"path", PersistMode::kEadr},
                      CrashParam{"path-log", PersistMode::kAdr},
                      CrashParam{"path-log", PersistMode::kEadr}),
    [](const ::testing::TestParamInfo<CrashParam>& info) {
      return std::string(info.param.engine[4] == '-' ? "PathLog" : "Path") +
             (info.param.mode == PersistMode::kAdr ? "Adr" : "Eadr");
    });

}  // namespace
}  // namespace pmhash::engines
