// Runs operation scripts against an engine under the crash simulator and checks every
// crash image it builds (see docs/testing.md). The crash suite (tests/crash) runs it; the
// conformance suite's allocation-failure test runs the same scripts.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pmhash/options.h"
#include "support/harness.h"

namespace pmhash::testing {

struct Script {
  std::string name;
  std::vector<Op> ops;
  uint64_t initial_capacity = 16;  // small, so resizes happen
};

struct RunConfig {
  PersistMode mode = PersistMode::kAdr;
  uint64_t seed = 1;
  double store_rate = 0.02;          // probability of a crash point after a store
  int random_images = 2;             // kRandom images per crash point with pending stores
  double recovery_crash_rate = 0.02; // images whose recovery itself is crashed
  double recovery_store_rate = 0.2;  // ... at its fences and after this share of its stores
  double grow_rate = 1.0 / 32;       // images whose keep-working step makes the index grow
  double reopen_rate = 0.125;        // images then closed cleanly, reopened and checked
  bool crash_points = true;          // false: just run the script (engine counters)
  bool crash_creation = false;       // crash points while the index is created, too
  bool crash_at_op_ends = false;     // crash points at every operation's end too
                                     // (CrashSim::CrashAtOpEnds; eadr also folds there)
  bool crash_close = true;           // ... in Close and the clean reopen after the script
  // Look for stores that bypassed the Persister (CrashSim::FindBypass, a compare of the
  // whole pool) after every n-th acknowledged op, and always after Close, the reopen and
  // the script's last op. A bypass stays in the pool until a logged store covers it, so
  // sampling delays its report by a few ops; PMHASH_CRASH_SOAK > 1 checks after each op.
  int bypass_check_every = 8;
  uint64_t pool_size = 0;            // 0: the engine's TestProfile::crash_pool_size
};

struct RunResult {
  uint64_t images = 0;                  // crash images recovered and checked
  uint64_t close_images = 0;            // ... of them in Close, the clean reopen and after
  uint64_t crashed_recoveries = 0;      // recoveries that were crashed themselves
  uint64_t recovery_crash_points = 0;   // crash points inside those recoveries
  uint64_t durable_inflight = 0;        // ops seen in durable state before they returned
  uint64_t op_end_points = 0;           // crash points at operation ends (crash_at_op_ends)
  std::map<std::string, uint64_t> engine_counters;  // IndexStats after the script
  // Flushes of lines with nothing stored since their last flush, and fences with nothing
  // flushed before them, from creation to the script's end (issue 4: none of either).
  uint64_t redundant_flushes = 0, redundant_fences = 0;
  std::string failure;   // "" if every check passed; else what, where, seed
};

// The scripts of the suite; `scale` multiplies their lengths.
std::vector<Script> StandardScripts(uint64_t seed, double scale);

RunResult RunScript(const EngineSpec& spec, const Script& script, const RunConfig& config);

// Crash images checked per engine in this process (printed at exit by the suite).
void AddImages(const std::string& engine, uint64_t n);
std::map<std::string, uint64_t> ImageCounts();

}  // namespace pmhash::testing
