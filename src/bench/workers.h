// Phase execution: the worker threads that run a phase's planned operations from a
// common start, time a sample of them (runner.h, "Latency sampling") and merge what each
// thread measured.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/config.h"
#include "bench/keygen.h"
#include "bench/latency.h"
#include "bench/runner.h"
#include "pmhash/index.h"

namespace pmhash::bench {

enum class OpKind : uint8_t { kInsert, kSearch, kNegative, kUpdate, kDelete };

// One thread's operations, generated before the timed part (plans.h).
struct ThreadPlan {
  uint64_t n = 0;
  std::vector<char> keys;          // n * key_size
  std::vector<uint32_t> voff;      // value offsets into the ValuePool (inserts, updates)
  std::vector<uint32_t> vsize;     // value sizes when they vary
  std::vector<uint8_t> kinds;      // per operation (mixed) or empty
  OpKind kind = OpKind::kSearch;
  // > 1: a search or negative plan issued through Index::MultiGet, or an insert, update
  // or delete plan through Index::Write, this many keys (ops) a call.
  uint32_t batch = 1;
  uint32_t sample_offset = 0;      // the first timed operation (RunWorkers sets it)
};

// What the threads of one phase measured, merged.
struct Measured {
  uint64_t ops = 0;
  double seconds = 0;
  uint32_t sample_every = 1;
  Latencies lat;
  uint64_t errors = 0, checksum = 0;
  std::string first_error;
  bool refused = false;   // an insert was refused (stop_on_refusal)
  bool refused_by_pool = false;  // ... because the pool, not the table, was full (PoolFull)
  std::string refusal;    // its status
  std::vector<int> pinned;  // --pin: the CPU of each thread (empty: unpinned)
};

// Runs the plans on plans.size() threads from a common start (pinned under --pin; a
// failure to pin is a warning through env.warn); returns the merged figures.
// stop_on_refusal: the first ResourceExhausted insert stops every thread (fill).
// `every`: the sampling rate; 0 = SampleEvery(config, operations in the plans).
Measured RunWorkers(Index* index, const ValuePool& values, const BenchConfig& config,
                    std::vector<ThreadPlan>& plans, bool stop_on_refusal,
                    const BenchEnv& env, const std::string& label, uint32_t every = 0);

// Merges a second run of the same phase into the first (fill: refused in step 2).
void Accumulate(const Measured& more, Measured* m);

// The progress label of a phase: "engine tN what".
std::string Describe(const std::string& engine, int threads, const char* what);

}  // namespace pmhash::bench
