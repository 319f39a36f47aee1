// Crashes inside one operation of an engine under the power-failure simulator
// (src/pm/crashsim.h), for the engines' own crash tests (src/engines/*/*_crash_test.cc).
//
// CrashDuringOp opens options.engine on a fresh DRAM pool watched by a pm::CrashSim, runs
// `setup` with no crash point, then `op` with a crash point at every fence and at
// `store_rate` of its stores (1: after every store; the operations are small). At each
// crash point it builds four images (kNone, kAll, and kRandom twice), recovers each with
// OpenEngine and checks it: ForEach returns no key twice and Count and Get agree with it
// (CheckIndex), then the engine's `check`. A good image must hold the state before `op`
// or the state after it (known only once `op` returns). Stores that bypassed the
// Persister are a failed expectation.
//
// Background work: WaitForBackgroundWork runs after `setup` and after `op`, before the
// hook is installed and before it is removed, because an engine's background thread
// (wophi's PAB refill) stores to PM and so must be idle whenever the hook changes. Crash
// points that thread reaches while `op` runs count like the op's own.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "pmhash/index.h"
#include "pmhash/options.h"
#include "support/harness.h"

namespace pmhash::testing {

struct OpCrashOutcome {
  int crash_points = 0;
  int images = 0;    // recovered and checked
  int bad = 0;       // images that failed a check or hold neither state
  std::string first_bad;  // what was wrong with the first bad image
};

// Fills a fresh index and returns its contents in *model.
using OpCrashSetup = std::function<void(Index* index, Model* model)>;
// The operation crashed into; it must return OK.
using OpCrashOp = std::function<Status(Index* index)>;
// The engine's own check of a recovered image: "" or what is wrong. It runs after the
// image's contents were taken, so it may go on using the index (insert, and so on).
using OpCrashCheck = std::function<std::string(Index* recovered)>;

OpCrashOutcome CrashDuringOp(const Options& options, const OpCrashSetup& setup,
                             const OpCrashOp& op, const OpCrashCheck& check,
                             double store_rate = 1.0);

// The persistence modes a crash test runs in, and their test names ("adr", "eadr"):
//   INSTANTIATE_TEST_SUITE_P(Modes, SomeCrashTest, PersistModes(), PersistModeTestName);
inline auto PersistModes() { return ::testing::Values(PersistMode::kAdr, PersistMode::kEadr); }
std::string PersistModeTestName(const ::testing::TestParamInfo<PersistMode>& info);

}  // namespace pmhash::testing
