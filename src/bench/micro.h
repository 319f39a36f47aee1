// Micro-benchmarks of the persistence substrate, `pmhash bench --micro NAME`.
//
// `--micro persist [--iterations N] [--repetitions N] [--write-latency-ns N]
// [--persist adr|eadr] [--json FILE]`: what the counters and the media model cost. A flush-heavy loop (8-byte
// Persister::Store, then Persist of that line, at precomputed pseudo-random 64-byte lines
// of a 64 MiB DRAM pool) runs with counting off, counting on without the media model, and
// counting on with it (the benchmark driver's default); repetitions interleave the
// configurations (rotating which goes first) so that frequency or thermal drift hits all
// alike; it reports the median ns/op of each, the overhead ratios against counting off,
// and flushes / fences / bytes / media writes per op. Time is the thread's CPU time, so
// being descheduled on a shared machine does not count. With --write-latency-ns N > 0 it
// also measures counting off and on at that emulated latency (the latency is charged per
// media write, so the model runs in both). BENCHMARKS.md cites it.
//
// `--micro xpline [--buckets N] [--sizes LIST] [--write-latency-ns N] [--persist MODE]
// [--json FILE]`: the BHT paper's Fig. 1 on the media model. 16-byte writes (8-byte key +
// 8-byte value, the value its xxHash), each persisted, fill pre-allocated buckets of each
// size, in random order (keys hashed to buckets, a full bucket passing the key to the next
// one with room, until every bucket is full) or sequentially (one bucket after another);
// with each bucket owning whole 256-byte-aligned media lines (the paper's setting) and,
// for contrast, buckets back to back. Reports media write amplification (media bytes
// written / user bytes) and throughput under the emulated write latency: emulation, not a
// measurement of Optane (whose real cost under load is bandwidth back-pressure).
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
  // kAdr: the flush loop. kEadr: Persist is an sfence alone, and the media model is the
  // cache model in front of the device (what every eadr store costs it).
  PersistMode mode = PersistMode::kAdr;
  FlushInstruction flush = FlushInstruction::kAuto;
  uint64_t seed = 42;
};

// One configuration at one write latency.
struct PersistMicroRow {
  uint32_t write_latency_ns = 0;
  bool counters = true;
  bool media_model = true;        // the device model ran (always, with latency)
  std::vector<double> ns_per_op;  // one per repetition, in run order
  double median_ns_per_op = 0;
  // median / median of counting off at the same latency; 1 for that base row itself.
  double overhead_ratio = 1;
  // From the counters, per op; only when counters are on (otherwise not measurable).
  double flushes_per_op = 0, fences_per_op = 0, bytes_stored_per_op = 0, media_writes_per_op = 0;
};

struct PersistMicroResult {
  std::string flush_instruction;  // the instruction used (auto resolved)
  // Per latency: counting off (the base) first, then the others.
  std::vector<PersistMicroRow> rows;
};

// InvalidArgument for a config out of range (the latency: PersistConfig::Validate).
Status ValidatePersistMicro(const PersistMicroConfig& config);
// Runs the measurement (validating the config first).
Status MeasurePersistMicro(const PersistMicroConfig& config, PersistMicroResult* result);

struct XplineMicroConfig {
  uint64_t buckets = 100'000;  // the paper has 3,000,000 (about 30 times as long)
  std::vector<uint32_t> bucket_bytes = {64, 128, 192, 256, 320, 384, 448, 512};
  uint32_t write_latency_ns = 300;  // emulated, per media write
  PersistMode mode = PersistMode::kAdr;
  FlushInstruction flush = FlushInstruction::kAuto;
  uint64_t seed = 42;
};

struct XplineMicroRow {
  bool aligned = true;     // each bucket owns whole 256-byte media lines
  uint32_t bucket_bytes = 0;
  bool sequential = false;  // else random
  uint64_t writes = 0;
  double seconds = 0;       // thread CPU time of the writes (busy-waits included)
  double mops = 0;
  double media_writes_per_op = 0, media_rmw_reads_per_op = 0, lines_written_per_op = 0;
  double media_write_amp = 0;  // media bytes written / user bytes (16 per write)
};

struct XplineMicroResult {
  std::string flush_instruction;
  std::vector<XplineMicroRow> rows;  // per layout, per size: random, then sequential
};

// InvalidArgument for a config out of range (no buckets, a size that is not a multiple of
// 16 between 16 and 4096, a latency PersistConfig::Validate refuses, a region over 16 GiB).
Status ValidateXplineMicro(const XplineMicroConfig& config);
// Runs the scenario (validating the config first).
Status MeasureXplineMicro(const XplineMicroConfig& config, XplineMicroResult* result);

// Command-line entry: argv[0] is ignored; the rest holds "--micro NAME" and that
// micro-benchmark's flags. Prints a table (and writes --json). Returns the process exit
// code (0 ok, 1 the run failed, 2 bad command line), errors as one line "pmhash: ..." on
// stderr.
int RunMicroBench(int argc, char** argv);

}  // namespace pmhash::bench
