// Large DRAM arrays for the volatile structures engines keep beside PM (Bloom filters,
// fingerprints, write buffers): zeroed, and backed by 2 MiB transparent huge pages where
// the kernel allows it (THP "always" or "madvise"), so that a random access into a
// filter of tens of MiB costs a cache miss and not also a page walk (with 4 KiB pages a
// 17 MiB filter spans 4,352 pages, more than the TLB holds). A buffer under 2 MiB is
// plain anonymous memory.
#pragma once

#include <cstddef>

#include "pmhash/status.h"

namespace pmhash {

class DramBuffer {
 public:
  DramBuffer() = default;
  // `bytes` (> 0) of zeroed memory, 64-byte aligned at least; ResourceExhausted if the
  // system refuses.
  static Result<DramBuffer> Allocate(size_t bytes);

  DramBuffer(DramBuffer&& other) noexcept { *this = std::move(other); }
  DramBuffer& operator=(DramBuffer&& other) noexcept;
  DramBuffer(const DramBuffer&) = delete;
  DramBuffer& operator=(const DramBuffer&) = delete;
  ~DramBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // Whether the kernel was asked for huge pages (MADV_HUGEPAGE); it may still decline.
  bool huge_pages_requested() const { return huge_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes of the mapping at data_ (the size rounded up)
  bool huge_ = false;
};

}  // namespace pmhash
