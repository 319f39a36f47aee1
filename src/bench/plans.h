// Per-phase plans: which keys, values and operation kinds every thread of a phase runs,
// generated before the timed part. Seeds depend on --seed, the phase's position and the
// thread, never on the engine, so every engine sees the same operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench/config.h"
#include "bench/keygen.h"
#include "bench/workers.h"

namespace pmhash::bench {

// Live positive keys are the indices [lo, hi).
struct KeyState {
  uint64_t lo = 0, hi = 0;
  uint64_t live() const { return hi - lo; }
};

class Planner {
 public:
  // The three must outlive the planner.
  Planner(const BenchConfig& config, const KeySpace& keys, const ValuePool& values)
      : config_(config), keys_(keys), values_(values) {}

  // Inserts of the new keys [first, first + n), split contiguously across threads.
  std::vector<ThreadPlan> Inserts(uint64_t first, uint64_t n, size_t threads,
                                  size_t phase_pos) const;

  // Deletes of [first, first + n) (distinct keys; order is the key index order, which
  // is random over the keys unless keys are sequential).
  std::vector<ThreadPlan> Deletes(uint64_t first, uint64_t n, size_t threads,
                                  size_t phase_pos) const;

  // Searches, negative searches, updates or a mix (mix != nullptr: kinds drawn by it,
  // inserts of new keys from insert_first, their number in *inserts_total); keys drawn
  // from --dist over `live`.
  std::vector<ThreadPlan> Draws(const KeyState& live, uint64_t n, size_t threads,
                                size_t phase_pos, OpKind kind, const Mix* mix,
                                uint64_t insert_first, uint64_t* inserts_total) const;

 private:
  void Begin(ThreadPlan* plan, uint64_t n, OpKind kind, bool with_values) const;
  void Put(ThreadPlan* plan, uint64_t i, uint64_t index, bool value, uint64_t salt,
           Rng& rng) const;

  const BenchConfig& config_;
  const KeySpace& keys_;
  const ValuePool& values_;
};

}  // namespace pmhash::bench
