#include "common/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace pmhash {
namespace {

constexpr uint64_t kSubBuckets = uint64_t{1} << LatencyHistogram::kSubBucketBits;  // 128
// Values below 2 * kSubBuckets get a bucket each; the linear range is where shift == 0.
constexpr uint64_t kLinearLimit = 2 * kSubBuckets;
constexpr int kTopBit = static_cast<int>(std::bit_width(LatencyHistogram::kMaxTrackable)) - 1;
// Two groups of kSubBuckets for the linear range, then one per shift 1 .. kTopBit - 7.
constexpr size_t kNumBuckets = (kTopBit - LatencyHistogram::kSubBucketBits + 2) * kSubBuckets;
static_assert(kNumBuckets == 4352);

static_assert(LatencyHistogram::kMaxRelativeError >= 0.5 / kSubBuckets,
              "the midpoint of a bucket 1/128 wide is within 1/256 of its values");

}  // namespace

LatencyHistogram::LatencyHistogram() : counts_(kNumBuckets, 0) {}

size_t LatencyHistogram::NumBuckets() { return kNumBuckets; }

size_t LatencyHistogram::BucketOf(uint64_t ns) {
  ns = std::min(ns, kMaxTrackable);
  if (ns < kLinearLimit) return ns;
  const int shift = static_cast<int>(std::bit_width(ns)) - 1 - kSubBucketBits;  // >= 1
  return (shift + 1) * kSubBuckets + ((ns >> shift) - kSubBuckets);
}

uint64_t LatencyHistogram::BucketLow(size_t bucket) {
  if (bucket < kLinearLimit) return bucket;
  const int shift = static_cast<int>(bucket / kSubBuckets) - 1;
  return (kSubBuckets + bucket % kSubBuckets) << shift;
}

uint64_t LatencyHistogram::BucketHigh(size_t bucket) {
  if (bucket < kLinearLimit) return bucket;
  const int shift = static_cast<int>(bucket / kSubBuckets) - 1;
  return ((kSubBuckets + bucket % kSubBuckets + 1) << shift) - 1;
}

void LatencyHistogram::RecordMany(uint64_t ns, uint64_t count) {
  if (count == 0) return;
  counts_[BucketOf(ns)] += count;
  count_ += count;
  min_ = std::min(min_, ns);
  max_ = std::max(max_, ns);
  sum_ += static_cast<double>(ns) * static_cast<double>(count);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < kNumBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  sum_ += other.sum_;
}

void LatencyHistogram::Clear() {
  std::fill(counts_.begin(), counts_.end(), 0);
  count_ = 0;
  min_ = UINT64_MAX;
  max_ = 0;
  sum_ = 0;
}

double LatencyHistogram::Mean() const {
  return count_ == 0 ? 0 : sum_ / static_cast<double>(count_);
}

uint64_t LatencyHistogram::Percentile(double p) const {
  if (count_ == 0) return 0;
  if (!(p > 0)) return Min();  // also NaN
  if (p >= 100) return max_;
  // Nearest rank: the ceil(p% of count)-th smallest value, 1-based.
  const double exact = p * static_cast<double>(count_) / 100;
  uint64_t rank = static_cast<uint64_t>(std::ceil(exact));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  if (rank == count_) return max_;
  uint64_t seen = 0;
  for (size_t b = 0; b < kNumBuckets; ++b) {
    seen += counts_[b];
    if (seen >= rank) {
      // The midpoint, but never outside what was recorded.
      const uint64_t mid = BucketLow(b) + (BucketHigh(b) - BucketLow(b)) / 2;
      return std::clamp(mid, Min(), max_);
    }
  }
  return max_;
}

}  // namespace pmhash
