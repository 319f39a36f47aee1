// Repeated, interleaved runs (--repeat N): the whole matrix of one run (every engine at
// every thread count, and the machine's floor at every thread count under --floor) runs
// N rounds, in an order that changes each round, so that drift on the machine (another
// program, frequency, the page cache) hits every engine alike. Each cell of each round
// opens fresh indexes exactly as a single run does, with the same keys (--seed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/config.h"
#include "bench/floor.h"
#include "bench/runner.h"

namespace pmhash::bench {

// One cell of the matrix: an engine (or the floor) at a thread count.
struct Cell {
  std::string engine;  // kFloorCell for the floor
  int threads = 1;
  bool operator==(const Cell& o) const { return engine == o.engine && threads == o.threads; }
  std::string Label() const;  // "group t1", "floor t2"
};
inline constexpr const char* kFloorCell = "floor";

// The cells of a run as listed: each engine of --engine at every thread count, then the
// floor at every thread count (--floor).
std::vector<Cell> MatrixCells(const BenchConfig& config);

// The order of each of `rounds` rounds: round 0 runs the cells as listed; each later
// round a shuffle drawn from --seed and the round, never the order of the round before
// (when there are two cells or more: then the reverse of it is taken).
std::vector<std::vector<Cell>> RoundOrders(const std::vector<Cell>& cells, uint64_t seed,
                                           int rounds);

// Creating an index's pool (its fresh Open) and populating it, outside the phases.
struct SetupTime {
  std::string run, engine;
  int threads = 1;
  int round = 0;
  double create_ms = 0;
  std::optional<double> populate_ms;  // --load-factor's untimed fill; the floor's table
};

// Everything the rounds of one run measured.
struct RunOutcome {
  std::vector<PhaseResult> rows;    // every round's rows (round, position set)
  std::vector<FloorResult> floors;  // every round's floors
  std::vector<std::vector<Cell>> orders;  // the order of each round
  std::vector<SetupTime> setups;
  int failures = 0;  // cells that failed (reported through env.err)
};

// Runs config.repeat rounds of config's matrix. A cell that fails is reported through
// env.err as one line and counted; the other cells go on.
RunOutcome RunRounds(const BenchConfig& config, const BenchEnv& env);

}  // namespace pmhash::bench
