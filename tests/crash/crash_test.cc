// The crash suite over every crash-consistent engine (docs/testing.md).
#include <gtest/gtest.h>

#include <cstdio>

#include "crash/crash_sim_runner.h"

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

// Every standard script in adr mode: a crash at every fence, after sampled stores and
// after every acknowledged op; none / all / random-prefix images; recovery checked
// against the model; 2% of the recoveries crashed themselves.
TEST_P(CrashSuite, ScriptsSurviveCrashesAtEveryFence) {
  const EngineSpec spec = Spec();
  const double soak = SoakFactor();
  uint64_t images = 0;
  for (const Script& script : StandardScripts(/*seed=*/42, soak)) {
    RunConfig config;
    config.seed = 1000 + images;
    config.random_images = static_cast<int>(2 * soak);
    RunResult r = RunScript(spec, script, config);
    images += r.images;
    EXPECT_EQ(r.failure, "");
  }
  // The floor: at least 10,000 crash images per engine per run.
  EXPECT_GE(images, 10000u) << "too few crash images for " << spec.name;
}

// eadr: a crash image is any prefix of the store sequence.
TEST_P(CrashSuite, ScriptsSurviveCrashesInEadrMode) {
  const EngineSpec spec = Spec();
  RunConfig config;
  config.mode = PersistMode::kEadr;
  config.seed = 7;
  for (const Script& script : StandardScripts(/*seed=*/43, 0.4 * SoakFactor())) {
    RunResult r = RunScript(spec, script, config);
    EXPECT_EQ(r.failure, "");
  }
}

// Crashing recovery itself, on every image (not just 2%).
TEST_P(CrashSuite, CrashDuringRecoveryRecovers) {
  const EngineSpec spec = Spec();
  RunConfig config;
  config.recovery_crash_rate = 1.0;
  config.random_images = 1;
  config.store_rate = 0;
  config.seed = 99;
  Script script = StandardScripts(/*seed=*/44, 0.15 * SoakFactor())[2];  // mixed
  RunResult r = RunScript(spec, script, config);
  EXPECT_EQ(r.failure, "");
}

std::vector<std::string> CrashEngineNames() { return Names(CrashConsistentEngines()); }

INSTANTIATE_TEST_SUITE_P(Engines, CrashSuite, ::testing::ValuesIn(CrashEngineNames()),
                         [](const auto& info) { return GtestName(info.param); });

// The proof that the suite can fail: two deliberately broken engines must be caught.
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
