// `pmhash bench ab`: two configurations measured in one run, slice by slice, so that a
// machine whose speed drifts by 2x within a minute (a shared host) still gives a ratio
// with a narrow spread.
//
//   pmhash bench ab --engine E --a OPTS --b OPTS [--opt K=V ...] [--records N]
//                   [--ops N] [--slice N] [--phases insert,search,negative,delete]
//                   [--a-engine E] [--b-engine E] [--a-server PATH] [--b-server PATH]
//                   [--threads N] [--lookups u64|get] [--initial-capacity N]
//                   [--counters on|off] [--pool shm|dram]
//                   [--orders 1|2] [--seed N] [--json FILE]
//
// Two indexes are opened (A of --a-engine, else --engine, with --a's engine options, B
// likewise, both with the --opt ones and one hash seed), each in this process or, with
// --a-server / --b-server, in a pmhash-slices process of that path (src/tools/slices: the
// same slice loop built against another commit's library, scripts/slices-at.sh), then
// each phase runs in slices of --slice operations, A's slice and B's slice back to back
// with the same keys (bench/ab_slices.h), the first of the two alternating; a slice's
// ratio is A's time over B's (above 1: B faster). The two indexes live at different
// addresses, which alone can favour one by several percent (an A/A run shows it); with
// --orders 2 (the default) the whole run is repeated with the two sides' places swapped
// and the ratio reported is the geometric mean of the two orders' medians, which cancels
// that bias. Phases: insert (the --records keys, the load of both indexes), search (--ops
// keys present), negative (--ops keys never inserted) and delete (--ops keys, each once;
// at most --records). Keys and values are 8 bytes. Every result is checked (a search that
// misses or a delete that finds nothing fails the run). Time is wall time, a slice's
// threads included.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/runner.h"
#include "pmhash/status.h"

namespace pmhash::bench {

struct AbConfig {
  std::string engine;            // both sides' engine unless a side names its own
  std::string a_engine, b_engine;
  std::map<std::string, std::string> a_options, b_options, common_options;
  std::string a_server, b_server;  // a pmhash-slices binary; empty: in this process
  int threads = 1;               // per slice, per side
  std::string lookups = "u64";   // Index::GetU64, or "get": Index::Get (pmhash bench's default)
  uint64_t initial_capacity = 0;  // Options::initial_capacity (pmhash bench: --records)
  bool counters = false;         // Options::count_stats
  int reply_seconds = 600;       // a server silent this long is hung: killed, the run fails
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

// InvalidArgument for a config out of range (no engine for a side, zero records or slice,
// a phase other than insert / search / negative / delete, insert not first, orders not 1
// or 2, threads outside 1-64, lookups other than u64 or get).
Status ValidateAb(const AbConfig& config);
// Runs it (validating first); errors of an open or of a checked operation as they come.
Status MeasureAb(const AbConfig& config, const BenchEnv& env, AbResult* result);
// Command line (args after `ab`); prints the table (and --json). Exit code 0, 1 (the run
// failed) or 2 (bad arguments).
int RunAbArgs(const std::vector<std::string>& args, const BenchEnv& env);

}  // namespace pmhash::bench
