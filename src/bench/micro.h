// Persistence micro-benchmark: what the per-thread persistence counters cost.
//
// `pmhash bench --micro persist [--iterations N] [--repetitions N] [--write-latency-ns N]
//  [--json FILE]` runs a flush-heavy loop (8-byte Persister::Store, then Persist of that
// line, at precomputed pseudo-random 64-byte lines of a 64 MiB DRAM pool) with counting
// on and off (PersistConfig::count), repetitions interleaved on/off so that frequency or
// thermal drift hits both alike, and reports the median ns/op of each, the overhead
// ratio, and flushes / fences / bytes per op. Time is the thread's CPU time, so being
// descheduled on a shared machine does not count. With --write-latency-ns N > 0 the pair
// is measured again with that emulated latency. BENCHMARKS.md cites it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash::bench {

struct PersistMicroConfig {
  uint64_t iterations = 2'000'000;      // store+persist pairs per run
  int repetitions = 5;                  // runs per configuration
  uint64_t region_bytes = 64ull << 20;  // DRAM pool the lines are drawn from
  uint32_t write_latency_ns = 0;        // > 0: also measure with this emulated latency
  FlushInstruction flush = FlushInstruction::kAuto;
  uint64_t seed = 42;
};

// One configuration: counters on or off at one write latency.
struct PersistMicroRow {
  uint32_t write_latency_ns = 0;
  bool counters = true;
  std::vector<double> ns_per_op;  // one per repetition, in run order
  double median_ns_per_op = 0;
  // From the counters, per op; only when counters are on (otherwise not measurable).
  double flushes_per_op = 0, fences_per_op = 0, bytes_stored_per_op = 0;
};

struct PersistMicroResult {
  std::string flush_instruction;   // the instruction used (auto resolved)
  std::vector<PersistMicroRow> rows;  // pairs: counters on, counters off, per latency
  // median(on) / median(off) for the pair at this row index / 2.
  std::vector<double> overhead_ratio;
};

// Runs the measurement. InvalidArgument for a config out of range.
Status MeasurePersistMicro(const PersistMicroConfig& config, PersistMicroResult* result);

// Command-line entry: argv[0] is ignored; the rest holds "--micro persist" and the flags
// above. Prints a table (and writes --json). Returns the process exit code (0 ok, 1 the
// run failed, 2 bad command line), errors as one line "pmhash: ..." on stderr.
int RunPersistMicroBench(int argc, char** argv);

}  // namespace pmhash::bench
