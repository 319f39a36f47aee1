// What the driver prints: the environment header and one table per phase with engines
// side by side and ratios to the first engine; and the JSON document of the contract.
#pragma once

#include <string>
#include <vector>

#include "bench/config.h"
#include "bench/json.h"
#include "bench/runner.h"

namespace pmhash::bench {

// CPU, cores, kernel, compiler, build type, flush instructions available.
Json MachineJson();
// True for an optimised build without assertions (no sanitizers).
bool IsReleaseBuild();

// The header printed before a run: machine, build type (with a warning on non-release
// builds), persistence mode, pool, sizes.
std::string HeaderText(const Json& machine, const BenchConfig& config);

// One table per (thread count, phase) of `results` (one run), engines in `engines`
// order as columns, ratios to the first engine.
std::string PhaseTables(const std::vector<PhaseResult>& results,
                        const std::vector<std::string>& engines);

// {"config": ..., "machine": ..., "results": [...]}.
Json ResultsJson(const Json& config, const Json& machine,
                 const std::vector<PhaseResult>& results);

}  // namespace pmhash::bench
