// A phase's row from what it measured: the workers' figures (throughput, latency,
// errors, checksum) and the deltas of the index's counters over the phase (persistence,
// filter false positives), with the index's state after it (count, slots, bytes).
#pragma once

#include "bench/config.h"
#include "bench/runner.h"
#include "bench/workers.h"
#include "pmhash/index.h"

namespace pmhash::bench {

void FillFromMeasured(const Measured& m, PhaseResult* r);

// `before` and `after` are the index's Stats() around the phase (after Quiesce). r->phase
// must be set (the negative phase reports the filter's false-positive rate).
void FillFromStats(const BenchConfig& config, const IndexStats& before, const IndexStats& after,
                   PhaseResult* r);

}  // namespace pmhash::bench
