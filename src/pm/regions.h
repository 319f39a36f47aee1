// What each byte range of a pool holds, as its structures describe themselves
// (Engine::DescribeLayout, with UndoLog's and Allocator's parts): the region map of
// `pmhash pool check`'s flip-fuzz test (tests/crash/flip_fuzz_test.cc), which counts how
// many damaged bytes `check` finds in each region and requires every one in a checked
// range to be found.
#pragma once

#include <cstdint>
#include <functional>

namespace pmhash::pm {

enum class Region : uint8_t {
  kFree,            // described by nothing: free heap, slack after a record, padding,
                    // bytes no structure reads
  kPoolHeader,      // the header page (src/pm/pool.h)
  kUndoLog,         // the undo log's header and lane states (src/pm/undo_log.cc)
  kAllocator,       // the allocator's header, chunk table and saved state (src/pm/alloc.cc)
  kEngineMetadata,  // engine roots, table and block headers, saved filters
  kSlots,           // slot words and per-slot metadata (forms, tokens, next pointers)
  kRecords,         // out-of-line key-value records (src/common/slot.h)
};
inline constexpr int kRegionCount = 7;
const char* RegionName(Region region);  // "pool header", "free space", ...

// Called for each range [offset, offset + len) and what it holds. `checked`: a damaged
// byte there is always found, by opening the pool or by Engine::CheckInvariants (a
// checksum, a sealed word, or bytes that must be zero), so `pmhash pool check` reports it.
using RegionVisitor =
    std::function<void(uint64_t offset, uint64_t len, Region region, bool checked)>;

}  // namespace pmhash::pm
