// `pmhash bench ab`: two configurations of one engine measured in one process, slice by
// slice, so that a machine whose speed drifts by 2x within a minute (a shared host) still
// gives a ratio with a narrow spread.
//
//   pmhash bench ab --engine E --a OPTS --b OPTS [--opt K=V ...] [--records N]
//                   [--ops N] [--slice N] [--phases insert,search,negative,delete]
//                   [--pool shm|dram]
//                   [--orders 1|2] [--seed N] [--json FILE]
//
// Two indexes of E are opened (A with --a's engine options, B with --b's, both with the
// --opt ones and one hash seed), then each phase runs in slices of --slice operations,
// A's slice and B's slice back to back with the same keys, the first of the two
// alternating; a slice's ratio is A's time over B's (above 1: B faster). The two indexes
// live at different addresses, which alone can favour one by several percent (an A/A run
// shows it); with --orders 2 (the default) the whole run is repeated with the two
// configurations' places swapped and the ratio reported is the geometric mean of the two
// orders' medians, which cancels that bias. Phases: insert (the --records keys, the load of
// both indexes), search (--ops keys present, Index::GetU64), negative (--ops keys never
// inserted) and delete (--ops keys, each once; at most --records). Keys and values are 8 bytes. Every result is checked (a
// search that misses or a delete that finds nothing fails the run). Time is wall time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/runner.h"
#include "pmhash/status.h"

namespace pmhash::bench {

struct AbConfig {
  std::string engine;
  std::map<std::string, std::string> a_options, b_options, common_options;
  uint64_t records = 1'000'000;
  uint64_t ops = 2'000'000;  // search and delete slices' keys (delete: at most records)
  uint64_t slice = 100'000;
  std::vector<std::string> phases = {"insert", "search", "delete"};
  bool dram_pool = false;  // else files in /dev/shm (tmpfs), removed at the end
  int orders = 2;
  uint64_t seed = 1;
};

struct AbPhase {
  std::string phase;
  // Per order (A in the first index, then in the second): the slices' ratios A time / B
  // time, and each side's Mops/s per slice, in run order.
  std::vector<std::vector<double>> ratios, a_mops, b_mops;
  double ratio = 0;  // the orders' median ratios, their geometric mean
};

struct AbResult {
  std::vector<AbPhase> phases;
};

// InvalidArgument for a config out of range (no engine, zero records or slice, a phase
// other than insert / search / negative / delete, insert not first, orders not 1 or 2).
Status ValidateAb(const AbConfig& config);
// Runs it (validating first); errors of an open or of a checked operation as they come.
Status MeasureAb(const AbConfig& config, const BenchEnv& env, AbResult* result);
// Command line (args after `ab`); prints the table (and --json). Exit code 0, 1 (the run
// failed) or 2 (bad arguments).
int RunAbArgs(const std::vector<std::string>& args, const BenchEnv& env);

}  // namespace pmhash::bench
