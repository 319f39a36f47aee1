// What the driver reports about the run as a whole: the machine and the environment
// header, and the JSON document of the contract (the tables: tables.h).
#pragma once

#include <string>
#include <vector>

#include "bench/config.h"
#include "bench/json.h"
#include "bench/runner.h"
#include "bench/summary.h"

namespace pmhash::bench {

// CPU (model, cores, the features cpuid reports), kernel, compiler, build type (and
// CMake's), the commit built (`git describe --always --dirty` when the build tree was
// configured; "unknown" outside a git checkout), flush instructions available, the load
// average (1, 5, 15 min) now as load_average_start, the timer's cost, the date. The
// driver adds pool_kind and load_average_end after the runs.
Json MachineJson();
// The 1, 5 and 15-minute load averages, or null.
Json LoadAverage();
// True for an optimised build without assertions (no sanitizers).
bool IsReleaseBuild();

// The header printed before a run: machine, build type (with a warning on non-release
// builds), persistence mode, pool, sizes.
std::string HeaderText(const Json& machine, const BenchConfig& config);

// {"config": ..., "machine": ..., "results": [...], "floor": [...], "rounds": [...],
// "setup": [...], "stability": {...}}: every run's rows (summary.h), its floor, the
// order of each round, the setup times and the unstable figures.
Json ResultsJson(const Json& config, const Json& machine, const std::vector<RunSummary>& runs);

}  // namespace pmhash::bench
