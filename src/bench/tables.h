// The human output of a run: one table per (thread count, phase occurrence) with the
// engines side by side, the machine's floor, the setup times, and what to trust.
#pragma once

#include <string>
#include <vector>

#include "bench/summary.h"

namespace pmhash::bench {

// One number through a printf format ("%.3f").
std::string Format(const char* fmt, double v);
// "median (min-max)" of a figure over rounds in `fmt`, `unit` after the median; the
// median alone for one round.
std::string Ranged(const char* fmt, const Spread& s, const char* unit = "");
// Rows of cells as aligned text: the first column left-aligned, the others right-aligned.
std::string Grid(const std::vector<std::vector<std::string>>& cells);

// One table per (thread count, phase occurrence, batch) of `run`, engines in `engines`
// order as columns. Each cell is the median over the rounds; with more than one round
// Mops/s shows its (min-max) and a "!" when unstable, and a "ratio" row the per-round
// ratio to the first engine as median (min-max); otherwise Mops/s and the other figures
// show the ratio of medians to the first engine. Under --floor a "% of floor" row.
std::string PhaseTables(const RunSummary& run, const std::vector<std::string>& engines);

// The floor loops' Mops/s, thread counts as columns; "" without --floor.
std::string FloorTable(const RunSummary& run);

// One line: the median ms to create (and populate) each index's pool and the floor's.
std::string SetupLine(const RunSummary& run);

// What the figures of every run can be trusted for: with one round, that no spread was
// measured; else the unstable figures (max/min of Mops/s over the rounds above
// --max-spread; the first 12 by name, then how many more) and the advice to run more
// rounds, or that every figure was stable.
std::string StabilityText(const std::vector<RunSummary>& runs);

}  // namespace pmhash::bench
