// A latency histogram for the benchmark driver: nanosecond values with bounded relative
// error, mergeable across threads.
//
// Buckets are log-linear (HDR style): values below 256 have a bucket each (exact); above,
// every power of two [2^e, 2^(e+1)) is split into 128 equal buckets, so a bucket is at
// most 1/128 of its values wide and the reported value (the bucket's midpoint) is within
// 1/256 (0.4%) of every value in it. 4352 buckets (34 KiB) cover 0 .. 2^40 - 1 ns
// (about 18 minutes); larger values are counted in the top bucket (Max stays exact).
//
// Threads: not thread-safe. Give each thread its own histogram and Merge them after the
// threads are joined (Record is a few instructions and never allocates).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pmhash {

class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 7;
  static constexpr uint64_t kMaxTrackable = (uint64_t{1} << 40) - 1;
  // Bound on |reported - true| / true for any value in 1 .. kMaxTrackable.
  static constexpr double kMaxRelativeError = 1.0 / 256;

  LatencyHistogram();

  // Records one latency in nanoseconds (values over kMaxTrackable land in the top bucket).
  void Record(uint64_t ns) { RecordMany(ns, 1); }
  // Records `count` equal latencies (no-op if count is 0).
  void RecordMany(uint64_t ns, uint64_t count);
  // Adds every value recorded in `other`; the result equals recording both into one.
  void Merge(const LatencyHistogram& other);
  void Clear();

  uint64_t Count() const { return count_; }
  // Exact smallest and largest values recorded; 0 when empty.
  uint64_t Min() const { return count_ == 0 ? 0 : min_; }
  uint64_t Max() const { return max_; }
  // Exact mean (up to double rounding); 0 when empty.
  double Mean() const;
  // The value at percentile p (0 .. 100, clamped; NaN is 0) by nearest rank: the smallest
  // recorded value with at least p% of the values at or below it, within kMaxRelativeError
  // (exact below 256 ns, and for p = 0 and p = 100, which give Min and Max). 0 when empty.
  uint64_t Percentile(double p) const;

  // Bucket arithmetic, public for tests and for printing a distribution.
  static size_t NumBuckets();
  static size_t BucketOf(uint64_t ns);
  static uint64_t BucketLow(size_t bucket);
  static uint64_t BucketHigh(size_t bucket);  // inclusive
  uint64_t BucketCount(size_t bucket) const { return counts_[bucket]; }

 private:
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
  double sum_ = 0;
};

}  // namespace pmhash
