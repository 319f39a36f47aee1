// Recovery timing, after an engine's phases: drop the index as a crash would and time the
// reopen (--recovery on), then close it cleanly and time a clean reopen (--recovery
// clean). File pools only: a DRAM pool cannot be reopened.
#pragma once

#include <optional>
#include <string>

#include "bench/config.h"
#include "bench/index_setup.h"
#include "bench/runner.h"
#include "pmhash/options.h"

namespace pmhash::bench {

struct RecoveryTimes {
  std::optional<double> recovery_ms;       // the engine's own recovery time (else wall)
  std::optional<double> recovery_open_ms;  // wall time of Open after the unclean close
  std::optional<double> reopen_ms;         // wall time of Open after a clean Close
};

// `opened` holds the index of `options` on the pool file `path` ("" for DRAM: nothing is
// timed). It holds the reopened index afterwards (null if a reopen failed; the failure
// is a warning through env.warn, as is a Count() that changed across a reopen).
RecoveryTimes TimeRecovery(const BenchConfig& config, const BenchEnv& env,
                           const std::string& engine, int threads, const Options& options,
                           const std::string& path, OpenedIndex* opened);

}  // namespace pmhash::bench
