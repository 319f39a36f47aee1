// `cceh`: Cacheline-Conscious Extendible Hashing (Nam et al., FAST '19), as paper 001
// (BHT) describes it in Section II-C and builds on it: a directory of segment pointers
// indexed by the top G hash bits, 16 KiB segments of 256 buckets x 4 slots, linear
// probing over 16 slots from the start bucket, in-place splits with lazy deletion and
// directory doubling, per-segment reader/writer locks and a directory lock; plus what
// the original lacks: Delete, duplicate checks on Insert, a persist order that survives a
// crash at any point, and a recovery that never hangs. On-media layout, invariants,
// persist orders and locking: engines/cceh/cceh_core.h (shared with `bht`). Design notes,
// deviations and figures: docs/engines/cceh.md.
//
// The root area: struct CcehRoot (cceh_core.h) alone, magic kCcehRootMagic.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engines/cceh/cceh_core.h"

namespace pmhash::engines {

inline constexpr uint64_t kCcehRootMagic = 0x31544f4f52'4843ull;  // "CHROOT1"
inline constexpr uint32_t kCcehVersion = 1;

class Cceh : public CcehCore {
 public:
  Cceh() = default;

  // The Index contract (include/pmhash/index.h), and: Insert, Update, Put and Delete lock
  // the key's segment; Get takes no lock for inline keys (validated); ForEach walks the
  // hash space in order, one segment at a time under its shared lock, calling fn with no
  // lock held (fn may call any method of this index); a Scan page reads the same steps
  // over its run of directory entries, so splits and doublings go on between its
  // segments (CcehCore::ScanSteps); CheckInvariants checks invariants 1-5 of cceh_core.h
  // by a full scan.
  PMHASH_ENGINE_KIT_OVERRIDES;
  QuickAnswer QuickGet(uint64_t hash, uint64_t key_word) override;
  Optimistic QuickDelete(uint64_t hash, uint64_t key_word) override;
  Status Shutdown() override;  // frees the retired directories
  // The probe window's lines of the key's start bucket.
  void Prefetch(uint64_t hash) const override;

 private:
  bool first_try_ = true;  // Get and Delete try CcehCore::FirstTry / FirstDelete first
};

}  // namespace pmhash::engines
