// The `fill` phase: how full an engine's table gets before it first refuses an insert.
#pragma once

#include <cstddef>
#include <string>

#include "bench/config.h"
#include "bench/keygen.h"
#include "bench/runner.h"

namespace pmhash::bench {

// `fill`: a fresh index sized for --records keys, resizing off where the engine accepts
// it, filled until the first refused insert. Every figure of the row (ops, time, latency,
// persistence, load factor) comes from one span of inserts:
//  * step 1 inserts --records keys;
//  * if the engine's key slots grew during step 1 although resize=off, it allocates
//    slots on demand (chained: wophi's PAB, smartht's chain buckets) and never refuses
//    for want of slots: the row is step 1 (the load factor after --records keys, as
//    DESIGN.md says for chained engines), with a note;
//  * otherwise step 2 inserts up to (free key slots + 1024) more keys, which a table of
//    fixed size must refuse within; refused: the row is steps 1 + 2, at the refusal;
//    not refused (the slots grew after all): the row is step 1 again, with a note.
Status RunFill(const BenchConfig& config, const BenchEnv& env, const std::string& engine,
               int threads, size_t phase_pos, const KeySpace& keys, const ValuePool& values,
               PhaseResult* r);

}  // namespace pmhash::bench
