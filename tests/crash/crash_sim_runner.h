// Runs operation scripts against an engine under the crash simulator and checks every
// crash image it builds (see docs/testing.md).
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
  uint64_t pool_size = 4ull << 20;
};

struct RunResult {
  uint64_t images = 0;   // crash images recovered and checked
  std::string failure;   // "" if every check passed; else what, where, seed
};

// The scripts of the suite; `scale` multiplies their lengths.
std::vector<Script> StandardScripts(uint64_t seed, double scale);

RunResult RunScript(const EngineSpec& spec, const Script& script, const RunConfig& config);

// Crash images checked per engine in this process (printed at exit by the suite).
void AddImages(const std::string& engine, uint64_t n);
std::map<std::string, uint64_t> ImageCounts();

}  // namespace pmhash::testing
