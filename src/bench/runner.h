// Runs one engine at one thread count through the configured phases and measures each.
// The parts: plans.h (what each thread runs), workers.h and threads.h (running and
// timing it), phase_stats.h (a row's figures), fill.h, recovery.h, index_setup.h,
// pool_files.h. Around it: rounds.h repeats the whole matrix (--repeat), floor.h times
// the machine's floor, summary.h and tables.h summarise and print.
//
// Per phase: every thread's keys, values and operation kinds are generated first
// (untimed); the threads then start together at a barrier, and the phase lasts from the
// start signal to the last thread's finish. The runner then waits for the engine's
// background work (Engine::WaitForBackgroundWork: PAB refills, filter rebuilds) outside
// the timed part, so that the stores and flushes an operation caused land in the phase
// that caused them; persistence figures are deltas of IndexStats::persist over the phase.
// The values read are summed into a checksum so that no lookup can be optimised away.
//
// Latency sampling (the rule; --latency-sample overrides it):
//  * a phase of at most kTimeEveryOpUpTo operations (all threads together) times every
//    operation: the papers' latency method (e.g. 1000 operations at a load factor);
//  * a longer phase times 1 operation in kSampleStride, from a random offset per thread
//    (seeded), so that sampling costs well under 1% of the throughput: one timed region
//    costs about 2 x `machine.timer_overhead_ns` plus a histogram update, spread over
//    kSampleStride operations. Percentiles come from those samples (p99.99 needs at
//    least 10^4 of them: 640,000 operations; `latency_ns.samples` says how many).
//  * a batched row (--batch N: lookups through MultiGet, N keys a call) times whole
//    calls: a call is timed when it holds an operation the rule above would time, and
//    its time / N is recorded once, as one sample of the per-operation latency. Such a
//    row's percentiles are of per-call averages, and `samples` counts timed calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/config.h"
#include "bench/json.h"
#include "pmhash/index.h"

namespace pmhash::engines {
class Engine;
struct EngineInfo;
}  // namespace pmhash::engines

namespace pmhash::pm {
class Pool;
class PersistObserver;
}  // namespace pmhash::pm

namespace pmhash::bench {

inline constexpr uint64_t kTimeEveryOpUpTo = 4096;
inline constexpr uint32_t kSampleStride = 64;

// The 1-in-N latency sampling rate a phase of `total_ops` operations uses.
uint32_t SampleEvery(const BenchConfig& config, uint64_t total_ops);

// The cost of one empty timed region (two Ticks() and the subtraction), median of many,
// in ns: MachineJson reports it as machine.timer_overhead_ns.
double MeasureTimerOverheadNs();

struct PhaseResult {
  std::string run;     // scenario run label
  std::string engine;
  int threads = 1;
  std::string phase;
  int phase_index = 0;   // position in --phases (a phase may repeat)
  int round = 0;         // --repeat: the round (from 0) and the cell's position in it
  int position = 0;
  uint32_t batch = 1;    // > 1: lookups through MultiGet, this many keys a call (--batch)
  uint64_t ops = 0;
  double seconds = 0;
  uint64_t samples = 0;  // latency samples taken
  uint32_t sample_every = 1;  // 1 operation in this many was timed
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, p9999 = 0, mean = 0, max = 0;
  std::vector<std::pair<double, double>> cdf;  // (quantile, ns), Latencies::Cdf
  PersistCounters delta;   // over the phase
  bool counters_known = true;     // counting was on (--counters on)
  bool media_known = true;        // the media model ran (adr or eadr, --media-model on)
  bool redundancy_known = false;  // measured under the crash simulator (--redundancy)
  bool lines_read_known = false;  // the engine reports PM reads (lines_read ever > 0)
  uint32_t write_latency_ns = 0, read_latency_ns = 0;  // emulated (the waits' figures)
  bool load_factor_known = false;
  double load_factor = 0;
  uint64_t count = 0, key_slots = 0, pm_bytes = 0, dram_bytes = 0;
  std::optional<double> recovery_ms;
  // Wall time of Open: after the unclean close (recovery_ms is the engine's own recovery
  // time within it), and after a clean Close (--recovery clean|both).
  std::optional<double> recovery_open_ms;
  std::optional<double> reopen_ms;
  std::map<std::string, uint64_t> engine_counters;  // IndexStats::engine_counters after
  std::optional<double> false_positive_rate;  // negative phase of a filtered engine
  uint64_t errors = 0;      // operations with an unexpected status
  std::string first_error;
  uint64_t checksum = 0;    // of the values read
  std::string mapping;      // dax / shared / dram
  std::vector<int> pinned_cpus;  // --pin: the CPU each thread ran on (empty: unpinned)
  std::string note;

  double mops() const { return seconds > 0 ? ops / seconds / 1e6 : 0; }
  // Media write amplification: media bytes written / the key + value bytes the phase's
  // operations wrote (user bytes); and / the bytes stored to PM (log, metadata and all).
  // Unknown (nullopt) without the media model or without such bytes.
  std::optional<double> MediaWriteAmp() const;
  std::optional<double> MediaWriteAmpStored() const;
  // Persistence figures per operation; a figure not measured is null.
  Json ToJson() const;
};

// How the runner opens indexes (tests substitute a test-only engine). The runner holds
// engines (engines/engine.h), not only Indexes: it waits for their background work,
// abandons them to time recovery, and reads what they can do from their registry data.
struct BenchEnv {
  std::function<Status(const Options&, std::unique_ptr<engines::Engine>*)> open;
  // Opens a fresh index of options.engine on a mapped (DRAM) pool with an observer
  // (--redundancy: the crash simulator).
  std::function<Status(const Options&, std::unique_ptr<pm::Pool>, pm::PersistObserver*,
                       std::unique_ptr<engines::Engine>*)>
      open_on_pool;
  // The registry data of an engine (capabilities: e.g. whether it accepts resize=off),
  // nullptr if unknown.
  std::function<const engines::EngineInfo*(const std::string& engine)> info;
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

// What an engine's run spent outside its phases, in wall ms: creating its main index
// (the fresh Open: pool file, mapping, the engine's empty table) and, with --load-factor,
// the untimed fill to that load factor (otherwise the load phase populates it).
struct EngineSetup {
  double create_ms = 0;
  std::optional<double> populate_ms;
};

// Runs every phase of `config` for one engine and thread count; appends one result per
// phase (two for a batched lookup phase). A failed operation is counted in the result; a
// setup failure (open, pool) is a Status. `setup`, if given, receives the setup times.
Status RunEngine(const BenchConfig& config, const BenchEnv& env, const std::string& engine,
                 int threads, std::vector<PhaseResult>* results,
                 EngineSetup* setup = nullptr);

// The pool size the driver creates for `keys` keys of this configuration.
uint64_t EstimatePoolSize(const BenchConfig& config, uint64_t keys);

// Pool files currently in use, removed by the SIGINT/SIGTERM handler.
void InstallCleanupHandler();

}  // namespace pmhash::bench
