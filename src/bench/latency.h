// Sampled operation latencies of one thread in one phase, merged across threads after
// the phase: a thin layer over the shared LatencyHistogram (src/common/histogram.h:
// log-linear buckets, within 0.4%, Record never allocates).
#pragma once

#include <cstdint>

#include "common/histogram.h"

namespace pmhash::bench {

class Latencies {
 public:
  void Record(uint64_t ns) { hist_.Record(ns); }
  void Merge(const Latencies& other) { hist_.Merge(other.hist_); }
  uint64_t count() const { return hist_.Count(); }
  // The q-quantile, q in [0, 1] (nearest rank); 0 when nothing was recorded.
  double Percentile(double q) const { return static_cast<double>(hist_.Percentile(q * 100)); }
  double Mean() const { return hist_.Mean(); }
  double Max() const { return static_cast<double>(hist_.Max()); }

 private:
  LatencyHistogram hist_;
};

}  // namespace pmhash::bench
