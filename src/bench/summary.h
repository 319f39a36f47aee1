// The figures of a repeated run (--repeat N, rounds.h), summarised: each figure as the
// median over the rounds with its min and max; ratios between engines and percentages
// of the machine's floor taken within each round (same round, same conditions), then
// summarised the same way; and the figures whose spread is too wide to trust.
//
// A row's summary (RowSummary::median) is a PhaseResult whose
//  * Mops/s is the median over the rounds (an even count: the mean of the middle two),
//    and `seconds` is its ops / that median;
//  * latency figures (p50 .. p99.99, mean, max) and the recovery and reopen times are
//    each the median over the rounds that have them;
//  * `errors` is the sum over the rounds, `first_error` the first one;
//  * every other figure (operation counts, persistence counters, load factor, keys,
//    bytes, checksum, the latency CDF, notes) is that of the median round: the round
//    whose Mops/s is the median (an even count: the lower of the middle two). Those are
//    set by the workload, not by the machine's noise; the rounds are kept in full.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "bench/config.h"
#include "bench/floor.h"
#include "bench/json.h"
#include "bench/rounds.h"
#include "bench/runner.h"

namespace pmhash::bench {

// The median of `v` (the mean of the middle two for an even count); 0 when empty.
double Median(std::vector<double> v);

// A figure over the rounds.
struct Spread {
  double median = 0, min = 0, max = 0;
  std::vector<double> samples;  // in round order

  // max / min: 1 for a single sample, infinity when min is 0 and max is not.
  double max_over_min() const;
  // Unstable: two samples or more, and max_over_min() above `limit`.
  bool Unstable(double limit) const;
  // {"median", "min", "max", "max_over_min", "samples": [...]}.
  Json ToJson() const;
};
// Median, min and max of `samples` (at least one).
Spread SpreadOf(const std::vector<double>& samples);

struct RowSummary {
  PhaseResult median;               // see the header comment
  int median_round = 0;
  std::vector<PhaseResult> rounds;  // one per round that produced the row, in round order
  Spread mops;
  bool unstable = false;            // mops.Unstable(config.max_spread)
  // Mops/s over the first engine's in the same round (null for the first engine, or
  // when no round has both).
  std::optional<Spread> ratio;
  std::string ratio_to;
  // 100 x Mops/s over the matching floor loop in the same round (floor.h, FloorFor).
  std::optional<Spread> floor_pct;
  std::optional<FloorKind> floor_kind;

  // The row's JSON: the contract's fields with the figures above, then `rounds`,
  // `median_round`, `mops_range`, `stable`, `ratio_to_first`, `pct_of_floor` and
  // `samples` (each round's row, with its `round` and `position`).
  Json ToJson() const;
};

struct FloorSummary {
  std::string run;
  int threads = 1;
  std::array<Spread, kFloorKinds> mops;
  std::array<bool, kFloorKinds> unstable{};
  // 100 x the api row's Mops/s over the lookup loop's, per round: what the path leaves of
  // the lookup floor.
  Spread api_pct_of_lookup;
  std::vector<FloorResult> rounds;  // in round order

  Json ToJson() const;
};

struct RunSummary {
  std::string run;
  int repeat = 1;
  double max_spread = 0;
  std::vector<RowSummary> rows;      // engines in --engine order, threads, phases
  std::vector<FloorSummary> floors;  // by thread count
  // Setup times: median create / populate ms per cell, in MatrixCells order.
  struct Setup {
    Cell cell;
    double create_ms = 0;
    std::optional<double> populate_ms;
  };
  std::vector<Setup> setups;
  std::vector<std::vector<Cell>> orders;  // of each round
};

RunSummary Summarize(const BenchConfig& config, const RunOutcome& outcome);

// One line per unstable figure of `summary` ("smartht delete t1: max/min 1.84x").
std::vector<std::string> UnstableFigures(const RunSummary& summary);

}  // namespace pmhash::bench
