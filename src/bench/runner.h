// Runs one engine at one thread count through the configured phases and measures each.
//
// Per phase: every thread's keys, values and operation kinds are generated first
// (untimed); the threads then start together at a barrier, and the phase lasts from the
// start signal to the last thread's finish. Latency is sampled with the TSC (every
// operation up to 2^16 per thread, then every 2^k-th), persistence figures are deltas of
// IndexStats::persist over the phase, and the values read are summed into a checksum
// so that no lookup can be optimised away.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/config.h"
#include "bench/json.h"
#include "pmhash/index.h"

namespace pmhash::bench {

struct PhaseResult {
  std::string run;     // scenario run label
  std::string engine;
  int threads = 1;
  std::string phase;
  uint64_t ops = 0;
  double seconds = 0;
  uint64_t samples = 0;  // latency samples taken
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, p9999 = 0, mean = 0, max = 0;
  PersistCounters delta;   // over the phase
  bool lines_read_known = false;  // the engine reports PM reads (lines_read ever > 0)
  bool load_factor_known = false;
  double load_factor = 0;
  uint64_t count = 0, key_slots = 0, pm_bytes = 0, dram_bytes = 0;
  std::optional<double> recovery_ms;
  uint64_t errors = 0;      // operations with an unexpected status
  std::string first_error;
  uint64_t checksum = 0;    // of the values read
  std::string mapping;      // dax / shared / dram
  std::string note;

  double mops() const { return seconds > 0 ? ops / seconds / 1e6 : 0; }
  // Persistence figures per operation; media_write_amp is null without bytes stored.
  Json ToJson() const;
};

// How the runner opens indexes (tests substitute a test-only engine).
struct BenchEnv {
  std::function<Status(const Options&, std::unique_ptr<Index>*)> open;
  // Live progress (may be empty): called from the runner's thread while a phase runs.
  std::function<void(const std::string& what, uint64_t done, uint64_t total)> progress;
  // Warnings (e.g. a recovered index lost keys): one line each.
  std::function<void(const std::string&)> warn;
  // The engines `--engine all` means (default: every registered engine).
  std::function<std::vector<std::string>()> engines;
  // Where the driver prints tables (stdout) and one-line errors (stderr).
  std::function<void(const std::string&)> out;
  std::function<void(const std::string&)> err;
};
BenchEnv DefaultEnv();

// Checks what can be checked before any index is opened (phase order, delete counts).
Status ValidateConfig(const BenchConfig& config);

// Runs every phase of `config` for one engine and thread count; appends one result per
// phase. A failed operation is counted in the result; a setup failure (open, pool) is a
// Status.
Status RunEngine(const BenchConfig& config, const BenchEnv& env, const std::string& engine,
                 int threads, std::vector<PhaseResult>* results);

// The pool size the driver creates for `keys` keys of this configuration.
uint64_t EstimatePoolSize(const BenchConfig& config, uint64_t keys);

// Pool files currently in use, removed by the SIGINT/SIGTERM handler.
void InstallCleanupHandler();

}  // namespace pmhash::bench
