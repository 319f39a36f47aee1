// The machine's floor: what plain loops over a table of 64-byte buckets reach on the
// run's pool kind and persistence mode, so that each engine's throughput can be read as
// a share of what this machine allows (a percentage travels between machines better
// than Mops/s do).
//
// The table fills a pool of the size and kind the run's main index gets (PoolSizeFor;
// DRAM, a file on tmpfs, or a DAX file: --pool), written through a Persister made as the
// engines' are (--persist, --flush, --write-latency-ns, counters on). Creating the pool
// and writing every bucket's first word (populate) are untimed and reported. Then five
// loops of --ops operations each, split over the thread count; each thread works on a
// slice of its own of the table, at random buckets (seeded, drawn before the timing):
//
//   insert     read the bucket's first word, write 16 bytes into the bucket, persist them
//   delete     read the bucket's first word, clear 8 bytes of it, persist them
//   lookup     read the bucket's first word; lookups independent of each other (the CPU
//              overlaps their cache misses, as it may across an engine's Gets)
//   prefetch   the same, prefetching the bucket `--floor-prefetch` lookups ahead (what a
//              pipelined MultiGet could reach)
//   dependent  each bucket chosen from the word read in the previous one (one miss at a
//              time, as a chain of pointers)
//   api        lookups through the API: Index::Get of random keys on the `floor-api` test
//              engine (floor_engine.h), whose DoGet reads one random line of a table as
//              large as the pool (a second pool of the same kind and size, created after
//              the first is gone), run by the benchmark's own loop (workers.h) as a
//              search phase is: what the loop, the kit and the engine's call add to the
//              lookup loop, before any engine's probe
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/config.h"
#include "bench/runner.h"
#include "bench/workers.h"
#include "pmhash/index.h"
#include "pmhash/status.h"

namespace pmhash::bench {

enum class FloorKind { kInsert, kDelete, kLookup, kPrefetch, kDependent, kApi };
inline constexpr size_t kFloorKinds = 6;
inline constexpr FloorKind kAllFloorKinds[kFloorKinds] = {
    FloorKind::kInsert,   FloorKind::kDelete,    FloorKind::kLookup,
    FloorKind::kPrefetch, FloorKind::kDependent, FloorKind::kApi};
// "insert", "delete", "lookup", "prefetch", "dependent", "api".
const char* FloorKindName(FloorKind kind);

struct FloorResult {
  std::string run;
  int threads = 1;
  int round = 0, position = 0;  // --repeat (rounds.h)
  uint64_t ops = 0;           // per loop
  uint64_t table_bytes = 0;   // the buckets (the pool's heap)
  uint32_t prefetch_distance = 0;
  std::string mapping;        // dax / shared / dram
  std::string pool_kind;      // PoolKind (pool_files.h): DRAM, tmpfs file, DAX file, ...
  double create_ms = 0, populate_ms = 0;
  std::array<double, kFloorKinds> seconds{};
  std::array<PersistCounters, kFloorKinds> persist{};  // counters over each loop
  bool counted = false;  // --counters on: `persist` was measured (else all zero, unknown)
  std::vector<int> pinned_cpus;
  uint64_t checksum = 0;      // of the words read (no loop can be optimised away)
  uint64_t api_checksum = 0;  // of the values the api row's Gets returned (its part of it)

  double mops(FloorKind kind) const;
};

// Measures the floor for `threads` threads. Errors: the pool cannot be created, the
// Persister refuses the configuration (a flush instruction the CPU lacks), or a lookup
// through the API did not return its line's word (Corruption: a broken path).
Status MeasureFloor(const BenchConfig& config, const BenchEnv& env, int threads,
                    FloorResult* out);

// The api row's operations (the same count as each loop's, split over the threads):
// searches of random keys of the run's key size, seeded from --seed.
std::vector<ThreadPlan> FloorApiPlans(const BenchConfig& config, int threads);

// The floor a row is read against: insert for load, prefill and fill; delete for delete;
// lookup for search and negative; prefetch for their batched rows (--batch); none for
// update and mixed.
std::optional<FloorKind> FloorFor(const PhaseResult& row);

}  // namespace pmhash::bench
