// The crash suite over every crash-consistent engine (docs/testing.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "support/crash_sim_runner.h"
#include "support/engine_tests.h"
#include "support/op_crash.h"

namespace pmhash::testing {
namespace {

// Prints `crash images checked: <engine> <N>` per engine when the suite ends: scripts
// outside the project read these lines.
class ImageCountReport : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [engine, n] : ImageCounts()) {
      if (engine.rfind("test-", 0) == 0 && engine != "test-tiny") continue;  // broken ones
      std::printf("crash images checked: %s %llu\n", engine.c_str(),
                  static_cast<unsigned long long>(n));
    }
    std::fflush(stdout);
  }
};
const auto* const kReport = ::testing::AddGlobalTestEnvironment(new ImageCountReport);

class CrashSuite : public ::testing::TestWithParam<std::string> {
 protected:
  EngineSpec Spec() const { return FindSpec(GetParam()); }
};

// The growth counters of `spec` that stayed zero in `counters`; "" if all grew. An
// engine without a list must report some "resizes", "grows", "splits" or "doublings".
std::string GrowthMissing(const EngineSpec& spec, const std::map<std::string, uint64_t>& counters) {
  std::vector<std::string> names = spec.test.growth_counters;
  if (names.empty()) {
    for (const char* n : {"resizes", "grows", "splits", "doublings"}) {
      if (counters.count(n)) names.push_back(n);
    }
    if (names.empty()) {
      return "the engine reports no growth counter: list it in its registration's "
             "TestProfile::growth_counters";
    }
    for (const std::string& n : names) {
      if (counters.at(n) > 0) return "";
    }
    return "none of its growth counters moved";
  }
  std::string missing;
  for (const std::string& n : names) {
    auto it = counters.find(n);
    if (it == counters.end() || it->second == 0) missing += (missing.empty() ? "" : ", ") + n;
  }
  return missing.empty() ? "" : "engine counters still zero: " + missing;
}

// Every standard script in adr mode: a crash at every fence, after sampled stores and
// after every acknowledged op, then in and after Close and the clean reopen; none / all /
// random-prefix images; recovery checked against the model; 2% of the recoveries
// crashed themselves.
TEST_P(CrashSuite, ScriptsSurviveCrashesAtEveryFence) {
  const EngineSpec spec = Spec();
  const double soak = SoakFactor() * spec.test.crash_script_scale;
  for (uint64_t seed : TestSeeds({42})) {
    SCOPED_TRACE(SeedNote(seed));
    uint64_t images = 0, close_images = 0, crashed_recoveries = 0, recovery_points = 0,
             durable_inflight = 0;
    std::map<std::string, uint64_t> counters;
    const std::vector<Script> scripts = StandardScripts(seed, soak);
    for (size_t i = 0; i < scripts.size(); ++i) {
      RunConfig config;
      config.seed = seed * 1000 + i;
      config.random_images = static_cast<int>(2 * SoakFactor());
      RunResult r = RunScript(spec, scripts[i], config);
      images += r.images;
      close_images += r.close_images;
      crashed_recoveries += r.crashed_recoveries;
      recovery_points += r.recovery_crash_points;
      durable_inflight += r.durable_inflight;
      for (const auto& [name, n] : r.engine_counters) counters[name] += n;
      EXPECT_EQ(r.failure, "");
    }
    std::printf("%s: %llu images (%llu in Close and the clean reopen), %llu recoveries "
                "crashed at %llu points, %llu ops durable before they returned\n",
                spec.name.c_str(), static_cast<unsigned long long>(images),
                static_cast<unsigned long long>(close_images),
                static_cast<unsigned long long>(crashed_recoveries),
                static_cast<unsigned long long>(recovery_points),
                static_cast<unsigned long long>(durable_inflight));
    // The floor: at least 10,000 crash images per engine per run.
    EXPECT_GE(images, 10000u) << "too few crash images for " << spec.name;
    // Every script closes twice and reopens once under crash points.
    EXPECT_GE(close_images, 3 * scripts.size()) << "too few crash points in Close and reopen";
    EXPECT_GT(recovery_points, crashed_recoveries)
        << "crashed recoveries reached too few crash points";
    EXPECT_EQ(GrowthMissing(spec, counters), "") << spec.name;
  }
}

// The crash-run options make every engine grow inside the scripts (resizes, PAB
// refills, filter rebuilds): the scripts alone, without crash points, engine counters
// printed per script. And no persist is wasted (issue 4): no line flushed with nothing
// stored since its last flush, no fence with nothing flushed before it, from creation
// through every kind of operation and growth.
TEST_P(CrashSuite, ScriptsExerciseGrowthAndPersistNothingTwice) {
  const EngineSpec spec = Spec();
  std::map<std::string, uint64_t> total;
  for (const Script& script : StandardScripts(/*seed=*/42, 1)) {
    RunConfig config;
    config.crash_points = false;
    RunResult r = RunScript(spec, script, config);
    ASSERT_EQ(r.failure, "");
    std::string line;
    for (const auto& [name, n] : r.engine_counters) {
      total[name] += n;
      line += " " + name + "=" + std::to_string(n);
    }
    std::printf("%s %s:%s redundant_flushes=%llu redundant_fences=%llu\n", spec.name.c_str(),
                script.name.c_str(), line.c_str(),
                static_cast<unsigned long long>(r.redundant_flushes),
                static_cast<unsigned long long>(r.redundant_fences));
    // Test-only engines are toys; a registered one with a known waste says so.
    if (spec.test_only || !spec.test.redundant_persists_known.empty()) continue;
    EXPECT_EQ(r.redundant_flushes, 0u) << spec.name << ", script " << script.name;
    EXPECT_EQ(r.redundant_fences, 0u) << spec.name << ", script " << script.name;
  }
  if (!spec.test.redundant_persists_known.empty()) {
    std::printf("%s: redundant persists not checked: %s\n", spec.name.c_str(),
                spec.test.redundant_persists_known.c_str());
  }
  EXPECT_EQ(GrowthMissing(spec, total), "") << spec.name;
}

// eadr: a crash image is any prefix of the store sequence.
TEST_P(CrashSuite, ScriptsSurviveCrashesInEadrMode) {
  const EngineSpec spec = Spec();
  for (uint64_t seed : TestSeeds({43})) {
    SCOPED_TRACE(SeedNote(seed));
    RunConfig config;
    config.mode = PersistMode::kEadr;
    config.seed = seed;
    for (const Script& script :
         StandardScripts(seed, 0.25 * SoakFactor() * spec.test.crash_script_scale)) {
      RunResult r = RunScript(spec, script, config);
      EXPECT_EQ(r.failure, "");
    }
  }
}

// eadr with crash points at every operation's end as well (CrashSim::CrashAtOpEnds):
// where an engine that never fences is crashed into, and where the log folds. For every
// engine whose registry lists eadr.
TEST_P(CrashSuite, ScriptsSurviveCrashesAtOperationEndsInEadrMode) {
  const EngineSpec spec = Spec();
  if (spec.info != nullptr) {
    const std::vector<PersistMode>& modes = spec.info->capabilities.persist_modes;
    if (std::find(modes.begin(), modes.end(), PersistMode::kEadr) == modes.end()) {
      GTEST_SKIP() << spec.name << " does not support eadr";
    }
  }
  RunConfig config;
  config.mode = PersistMode::kEadr;
  config.crash_at_op_ends = true;
  config.store_rate = 0.01;
  config.random_images = 1;
  config.seed = 17;
  uint64_t op_ends = 0;
  for (const Script& script : StandardScripts(/*seed=*/45, 0.12 * SoakFactor())) {
    RunResult r = RunScript(spec, script, config);
    EXPECT_EQ(r.failure, "");
    op_ends += r.op_end_points;
  }
  EXPECT_GT(op_ends, 0u) << "no crash point at an operation's end";
}

// Crashing recovery itself, on every image (not just 2%): at its fences, after half of
// its stores and right after Open returns; those images recovered and checked too.
TEST_P(CrashSuite, CrashDuringRecoveryRecovers) {
  const EngineSpec spec = Spec();
  for (uint64_t seed : TestSeeds({44})) {
    SCOPED_TRACE(SeedNote(seed));
    RunConfig config;
    config.recovery_crash_rate = 1.0;
    config.recovery_store_rate = 0.5;
    config.random_images = 1;
    config.store_rate = 0;
    config.crash_close = false;  // ScriptsSurviveCrashesAtEveryFence crashes Close
    config.seed = seed;
    Script script = StandardScripts(seed, 0.1 * SoakFactor())[2];  // mixed
    RunResult r = RunScript(spec, script, config);
    EXPECT_EQ(r.failure, "");
    std::printf("%s: %llu recoveries crashed at %llu points\n", spec.name.c_str(),
                static_cast<unsigned long long>(r.crashed_recoveries),
                static_cast<unsigned long long>(r.recovery_crash_points));
    EXPECT_GT(r.crashed_recoveries, 0u);
    // At least the point after Open returns, and some inside recovery.
    EXPECT_GT(r.recovery_crash_points, r.crashed_recoveries)
        << "crashed recoveries reached no crash point inside recovery";
  }
}

// Creating the index: a crash at every fence and after a third of the stores of
// OpenOnPool(fresh) and right after it returns; every image must open (not fresh) to an
// empty index that keeps working. A pool whose creation crashed is created again.
TEST_P(CrashSuite, CreationSurvivesCrashes) {
  const EngineSpec spec = Spec();
  RunConfig config;
  config.crash_creation = true;
  config.store_rate = 0.34;
  config.random_images = static_cast<int>(2 * SoakFactor());
  config.reopen_rate = 1;
  config.seed = 31;
  for (uint64_t capacity : {16, 1000}) {
    Script script{"create", {}, capacity};
    RunResult r = RunScript(spec, script, config);
    EXPECT_EQ(r.failure, "");
    EXPECT_GT(r.images, 3u) << "too few crash points while creating " << spec.name;
  }
}

// A write batch (Index::Write) crashed at every fence and after every store, in adr and
// eadr: each image holds the state after a prefix of the batch, every op whole or not
// at all (a pipelined Write prefetches ahead but commits in order). The batch mixes
// inserts, puts, updates and deletes of inline and record entries, with a key written
// twice and ops that answer NotFound and AlreadyExists.
TEST_P(CrashSuite, WriteBatchLeavesAPrefixOfItsOps) {
  const EngineSpec spec = Spec();
  std::vector<std::string> keys, values;
  for (uint64_t i = 0; i < 12; ++i) {
    keys.push_back(i % 2 ? Key8(i * 31) : "batch key " + std::to_string(i));
    values.push_back(i % 3 ? Key8(i) : "a value of a record " + std::to_string(i));
  }
  std::vector<WriteOp> ops;
  const auto add = [&](WriteOp::Kind kind, size_t k, size_t v) {
    ops.push_back({kind, keys[k], values[v]});
  };
  add(WriteOp::Kind::kInsert, 4, 0);  // absent
  add(WriteOp::Kind::kUpdate, 0, 1);  // present (setup)
  add(WriteOp::Kind::kDelete, 1, 0);  // present
  add(WriteOp::Kind::kPut, 5, 2);     // absent
  add(WriteOp::Kind::kInsert, 2, 3);  // present: AlreadyExists
  add(WriteOp::Kind::kUpdate, 6, 4);  // absent: NotFound
  add(WriteOp::Kind::kPut, 4, 5);     // written twice in the batch
  add(WriteOp::Kind::kDelete, 3, 0);
  add(WriteOp::Kind::kInsert, 7, 6);
  add(WriteOp::Kind::kPut, 2, 7);
  for (const PersistMode mode : {PersistMode::kAdr, PersistMode::kEadr}) {
    SCOPED_TRACE(PersistModeName(mode));
    Options o;
    o.engine = spec.name;
    o.pool_size = spec.test.crash_pool_size;
    o.persist = mode;
    o.initial_capacity = 16;
    o.engine_options = spec.test.crash_options;
    const OpCrashOutcome r = CrashDuringBatch(
        o,
        [&](Index* x, Model* m) {
          for (size_t i = 0; i < 4; ++i) {
            ASSERT_TRUE(x->Insert(keys[i], values[i]).ok());
            (*m)[keys[i]] = values[i];
          }
        },
        ops);
    ExpectAllOrNothing(r, 8);
  }
}

std::vector<std::string> CrashEngineNames() { return Names(CrashConsistentEngines()); }

INSTANTIATE_TEST_SUITE_P(Engines, CrashSuite, ::testing::ValuesIn(CrashEngineNames()),
                         [](const auto& info) { return GtestName(info.param); });

// The proof that the suite can fail: deliberately broken engines must be caught.
TEST(CrashSuiteCatchesBugs, CommitFlagBeforeDataIsDurable) {
  bool caught = false;
  for (const Script& script : StandardScripts(/*seed=*/5, 0.3)) {
    RunConfig config;
    config.seed = 3;
    RunResult r = RunScript(CommitEarlyEngine(), script, config);
    if (!r.failure.empty()) {
      caught = true;
      std::printf("caught as expected: %s\n", r.failure.c_str());
      break;
    }
  }
  EXPECT_TRUE(caught) << "the crash suite missed a commit store made before its data was durable";
}

TEST(CrashSuiteCatchesBugs, MissingFence) {
  RunConfig config;
  config.seed = 4;
  RunResult r = RunScript(NoFenceEngine(), StandardScripts(/*seed=*/6, 0.3)[0], config);
  ASSERT_NE(r.failure, "") << "the crash suite missed an acknowledged op that was not durable";
  std::printf("caught as expected: %s\n", r.failure.c_str());
  EXPECT_NE(r.failure.find("after the op returned"), std::string::npos) << r.failure;
}

// An engine whose recovery rebuilds the allocator without its records: the allocator
// hands live records out again. The keep-working step after each recovery must report
// it as a failure (in a child process, so that a crash of the run shows as one).
TEST(CrashSuiteCatchesBugs, ForgottenBlocksInRecovery) {
  std::string how;
  const std::string failure = InChildProcess(
      [] {
        RunConfig config;
        config.seed = 8;
        RunResult r = RunScript(NoEnumerateEngine(), StandardScripts(/*seed=*/9, 0.3)[0], config);
        return r.failure.empty() ? std::string("(not caught)") : r.failure;
      },
      120, &how);
  EXPECT_EQ(how, "") << "the run of test-no-enumerate did not end cleanly: " << failure;
  ASSERT_NE(failure, "(not caught)")
      << "the crash suite missed live blocks that recovery gave back to the allocator";
  std::printf("caught as expected: %s\n", failure.c_str());
  // Caught by the writes after recovery (a live record handed out again) or the check
  // after them, not by recovery itself.
  EXPECT_TRUE(failure.find("after recovery, ") != std::string::npos ||
              failure.find("after more writes post recovery") != std::string::npos)
      << failure;
}

// An update whose undo record is written after its commit is durable, and rolled back
// by recovery: all-or-nothing at each crash point, but durable state shows the update
// and a later crash point in the same op loses it again.
TEST(CrashSuiteCatchesBugs, DurableOpUndoneLater) {
  RunConfig config;
  config.seed = 10;
  RunResult r = RunScript(LogAfterCommitEngine(), StandardScripts(/*seed=*/11, 0.3)[0], config);
  ASSERT_NE(r.failure, "") << "the crash suite missed an op undone after it was durable";
  std::printf("caught as expected: %s\n", r.failure.c_str());
  EXPECT_NE(r.failure.find("had already shown in durable state"), std::string::npos) << r.failure;
}

// The correct twin of the broken engines passes the same runs (so the catches above are
// the bugs, not the harness).
TEST(CrashSuiteCatchesBugs, CorrectTwinPasses) {
  RunConfig config;
  config.seed = 3;
  for (const Script& script : StandardScripts(/*seed=*/5, 0.3)) {
    EXPECT_EQ(RunScript(TinyEngine(), script, config).failure, "");
  }
}

}  // namespace
}  // namespace pmhash::testing
