// Opening the indexes a run measures.
#pragma once

#include <memory>
#include <string>

#include "bench/config.h"
#include "bench/runner.h"
#include "engines/engine.h"
#include "pm/crashsim.h"
#include "pmhash/index.h"

namespace pmhash::bench {

// A quiet point around each phase, outside the timed part, before the counters are
// read: the background work an operation started (wophi's PAB refill, smartht's filter
// rebuild) finishes, then the media model is drained (Persister::DrainMedia): in eadr
// the cache model's dirty lines go to the device, and the device buffers empty, counting
// their read-modify-writes. So each phase starts with an empty cache and buffers and is
// charged every media write its stores cause, including those a real cache would still
// hold when the phase ends (the counting rule of bench/README.md).
void Quiesce(engines::Engine* index);

// The Options every index of the run gets for the --engine column `column` (an engine,
// or engine@label): persistence from the config, counters on, sized for --records,
// --opt applied ("engine:name=value" to that engine's columns, "engine@label:name=value"
// to that column), the hash seed of --hash-seed (else --seed's value). Creates a fresh
// pool (error_if_exists); the caller sets path and pool_size.
Options BaseOptions(const BenchConfig& config, const std::string& column);

// An index, and under --redundancy the crash simulator observing its pool. The simulator
// must outlive the index (the index's persister calls it until the index is gone).
struct OpenedIndex {
  std::unique_ptr<pm::CrashSim> sim;
  std::unique_ptr<engines::Engine> index;

  OpenedIndex() = default;
  OpenedIndex(const OpenedIndex&) = delete;
  OpenedIndex& operator=(const OpenedIndex&) = delete;
  ~OpenedIndex() { index.reset(); }
  engines::Engine* get() const { return index.get(); }
};

// Opens a fresh index with options `o` (o.path set, or empty for DRAM). Under
// --redundancy: a DRAM pool with a CrashSim attached that reports redundant flushes and
// fences to the engine's counters (no crash hook).
Status OpenFresh(const BenchConfig& config, const BenchEnv& env, const Options& o,
                 OpenedIndex* out);

}  // namespace pmhash::bench
