// The `cceh` engine: the CCEH core (cceh_core.h) with every write in place.
#include "engines/cceh/cceh.h"

#include <cstring>
#include <string>
#include <unordered_set>
#include <utility>

namespace pmhash::engines {
namespace {

constexpr RootLayout kRootLayout{kCcehRootMagic, kCcehVersion, sizeof(CcehRoot),
                                 sizeof(CcehRoot) - sizeof(EngineRoot)};

}  // namespace

Status Cceh::Configure(EngineOptions& options, const Options& /*index_options*/) {
  first_try_ = options.Bool("first_try");
  SetQuickGet(first_try_);
  SetQuickDelete(first_try_);
  return ConfigureCore(options, kRootLayout);
}

Status Cceh::Create() { return CreateCore(kRootLayout); }

Status Cceh::Recover(bool clean) {
  uint64_t count = 0;
  return RecoverCore(kRootLayout, clean, &count);
}

Status Cceh::Shutdown() {
  FreeRetiredDirectories();
  return Status::OK();
}

Status Cceh::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  return EnumerateCore(kRootLayout, visit);
}

QuickAnswer Cceh::QuickGet(uint64_t hash, uint64_t key_word) {
  // With the tests' hook set, DoGet runs the first try (FirstTryHooked).
  if (first_try_hooked()) [[unlikely]] return {0, Optimistic::kRetry};
  return FirstTry(key_word, hash);
}

Status Cceh::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  if (first_try_ && reads_unnoted() && key.size() == sizeof(uint64_t)) {
    uint64_t k = 0;
    std::memcpy(&k, key.data(), sizeof(k));
    const QuickAnswer a = first_try_hooked() ? FirstTryHooked(k, hash) : FirstTry(k, hash);
    if (a.answer == Optimistic::kFound) {
      AssignWord(value, a.value_word);
      return Status::OK();
    }
    if (a.answer == Optimistic::kAbsent) return Status::NotFound();
  }
  return GetFromSegments(key, hash, value);
}

Status Cceh::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                     WriteMode mode) {
  bool diverted = false;  // never: no cceh segment has an attachment
  return WriteInPlace(key, value, hash, mode, &diverted);
}

Optimistic Cceh::QuickDelete(uint64_t hash, uint64_t key_word) {
  // With the tests' hook set, DoDelete runs the first try (FirstDeleteHooked).
  if (first_try_hooked()) [[unlikely]] return Optimistic::kRetry;
  return FirstDelete(key_word, hash);
}

Status Cceh::DoDelete(std::string_view key, uint64_t hash) {
  if (first_try_ && key.size() == sizeof(uint64_t)) [[likely]] {
    uint64_t k = 0;
    std::memcpy(&k, key.data(), sizeof(k));
    const Optimistic a = first_try_hooked() ? FirstDeleteHooked(k, hash) : FirstDelete(k, hash);
    if (a == Optimistic::kFound) return Status::OK();
    if (a == Optimistic::kAbsent) return Status::NotFound();
  }
  bool diverted = false;  // never: no cceh segment has an attachment
  return DeleteInPlace(key, hash, &diverted);
}

void Cceh::Prefetch(uint64_t hash) const {
  // With no lock, as FindOptimistic reads them: a stale segment is a harmless prefetch.
  PrefetchKey(hash);
}

uint64_t Cceh::Count() const { return SegmentKeys(); }

Status Cceh::ForEach(const Visitor& fn) const {
  return Iterate(fn, [this](uint64_t* cursor, bool* done, std::vector<ScanEntry>* batch) {
    CollectStep(cursor, done, batch);
  });
}

Status Cceh::DoScan(ScanPage* page) const {
  return ScanSteps(page, [this](uint64_t* cursor, bool* done, std::vector<ScanEntry>* batch) {
    CollectStep(cursor, done, batch);
  });
}

Status Cceh::CheckInvariants() const {
  std::unordered_set<std::string> keys;
  uint64_t live = 0;
  PMHASH_RETURN_IF_ERROR(CheckCore(kRootLayout, &keys, &live));
  if (live != Count()) {
    return Status::Corruption("cceh: Count() is " + std::to_string(Count()) + " but " +
                              std::to_string(live) + " slots are live");
  }
  return Status::OK();
}

void Cceh::FillStats(IndexStats* stats) const {
  FillCoreStats(stats);
  stats->count = Count();
}

void Cceh::DescribeEngineLayout(const pm::RegionVisitor& mark) const { DescribeCore(mark); }

void RegisterEngines_cceh(EngineRegistry& registry) {
  EngineInfo info;
  info.options = CcehCore::CcehOptions();
  info.options.push_back(OptionSpec::Bool(
      "first_try", true,
      "searches and deletes of 8-byte keys try a short path first, with no call (an inline "
      "key in the probe window; not in the paper); off: the general paths only, to compare "
      "within a run"));
  info.capabilities = {.resize_switch = true,
                       .resize_when = "a segment splits (and the directory doubles) when a "
                                      "probe window is full",
                       .refuses_when_full = true,
                       .refuses_full_collisions = true,
                       .pipelined_multiget = true};
  // 1 KiB segments (16 buckets): splits and doublings within a few dozen keys. Threads
  // start from 16 segments, so that they seldom wait on one segment's lock.
  info.test = {.crash_options = {{"segment_bytes", "1024"}},
               .thread_crash_options = {{"segments", "16"}},
               .growth_counters = {"splits", "doublings"}};
  info.description = {"cceh",
                      "CCEH: directory by MSB, 16 KiB segments of 4-slot buckets, 16-slot "
                      "linear probing, in-place splits with lazy deletion, directory doubling",
                      "001 (CCEH, Section II-C)", /*crash_consistent=*/true};
  registry.Add<Cceh>(std::move(info));
}

}  // namespace pmhash::engines
