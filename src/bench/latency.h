// Sampled operation latencies of one thread in one phase, merged across threads after
// the phase: a thin layer over the shared LatencyHistogram (src/common/histogram.h:
// log-linear buckets, within 0.4%, Record never allocates); and the clock that times
// them (the TSC, fenced, on x86-64).
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "common/histogram.h"
#include "pm/persist.h"

namespace pmhash::bench {

// A timestamp for latency sampling: lfence + rdtsc on x86-64 (the fence keeps earlier
// instructions from drifting past the read), steady_clock nanoseconds elsewhere.
inline uint64_t Ticks() {
#if defined(__x86_64__)
  _mm_lfence();
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

// Milliseconds of wall time since t0 (setup phases: create, populate, recovery).
inline double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
      .count();
}

inline double TicksPerNs() {
#if defined(__x86_64__)
  return pm::TscCyclesPerNs();
#else
  return 1.0;
#endif
}

class Latencies {
 public:
  void Record(uint64_t ns) { hist_.Record(ns); }
  void Merge(const Latencies& other) { hist_.Merge(other.hist_); }
  uint64_t count() const { return hist_.Count(); }
  // The q-quantile, q in [0, 1] (nearest rank); 0 when nothing was recorded.
  double Percentile(double q) const { return static_cast<double>(hist_.Percentile(q * 100)); }
  double Mean() const { return hist_.Mean(); }
  double Max() const { return static_cast<double>(hist_.Max()); }

  // A compact CDF: (quantile, ns) at fixed quantiles from 0.001 to 0.99999, keeping only
  // the quantiles the samples resolve (at least one sample above them), then (1, max).
  // Empty when nothing was recorded.
  std::vector<std::pair<double, double>> Cdf() const {
    static constexpr double kQuantiles[] = {
        0.001, 0.01,  0.05,   0.1,     0.2,    0.25,   0.3,     0.4,    0.5,
        0.6,   0.7,   0.75,   0.8,     0.85,   0.9,    0.925,   0.95,   0.975,
        0.99,  0.995, 0.9975, 0.999,   0.9995, 0.9999, 0.99995, 0.99999};
    std::vector<std::pair<double, double>> out;
    const uint64_t n = count();
    if (n == 0) return out;
    for (double q : kQuantiles) {
      if ((1 - q) * static_cast<double>(n) < 1) break;
      out.emplace_back(q, Percentile(q));
    }
    out.emplace_back(1.0, Max());
    return out;
  }

 private:
  LatencyHistogram hist_;
};

}  // namespace pmhash::bench
