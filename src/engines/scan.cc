// Scan pages: the part every engine shares (scan.h).
#include "engines/scan.h"

#include <utility>

namespace pmhash::engines {

void AddScanEntry(std::vector<ScanEntry>* out, uint64_t hash, std::string_view key,
                  std::string_view value) {
  out->push_back({hash, std::string(key), std::string(value)});
}

uint64_t ScanPage::ResumeAt(uint64_t hash) const {
  const unsigned __int128 start = HomeStart(Reduce(hash, homes_), homes_);
  return start > from_ ? static_cast<uint64_t>(start) : from_;
}

bool ScanPage::TakeHomes(uint64_t first, uint64_t last, std::vector<ScanEntry>* run) {
  std::erase_if(*run, [&](const ScanEntry& e) {
    const uint64_t home = Reduce(e.hash, homes_);
    return home < first || home >= last || e.hash < from_;
  });
  std::sort(run->begin(), run->end(),
            [](const ScanEntry& a, const ScanEntry& b) { return a.hash < b.hash; });
  size_t i = 0;
  for (uint64_t home = first; home < last; ++home) {
    for (; i < run->size() && Reduce((*run)[i].hash, homes_) == home; ++i) {
      entries_.push_back(std::move((*run)[i]));
    }
    if (entries_.size() < max_keys_ || home + 1 == homes_) continue;
    // A boundary at or before `from` (homes narrower than a cursor's resolution) would
    // make no progress: the page goes on to the next one.
    const unsigned __int128 boundary = HomeStart(home + 1, homes_);
    if (boundary > from_) {
      next_ = static_cast<uint64_t>(boundary);
      return true;
    }
  }
  return false;
}

}  // namespace pmhash::engines
