// Large DRAM arrays for the volatile structures engines keep beside PM (Bloom filters,
// fingerprints, write buffers): zeroed, and backed by 2 MiB transparent huge pages where
// the kernel allows it (THP "always" or "madvise"), so that a random access into a
// filter of tens of MiB costs a cache miss and not also a page walk (with 4 KiB pages a
// 17 MiB filter spans 4,352 pages, more than the TLB holds). A buffer under 2 MiB is
// plain anonymous memory.
#pragma once

#include <cstddef>
#include <new>
#include <utility>

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

// n objects of T in a DramBuffer, each constructed in place (T's default constructor) and
// destroyed with the array: a side table that searches index at random (a segment's lock
// and state, per segment slot of the pool) then costs a cache miss, not also a page walk.
template <typename T>
class DramArray {
  static_assert(alignof(T) <= 64, "a DramBuffer is 64-byte aligned at least");

 public:
  DramArray() = default;
  // n > 0 objects; ResourceExhausted (or InvalidArgument for n == 0) if refused.
  static Result<DramArray> Allocate(size_t n) {
    if (n > ~size_t{0} / sizeof(T)) return Status::InvalidArgument("DramArray too large");
    Result<DramBuffer> memory = DramBuffer::Allocate(n * sizeof(T));
    if (!memory.ok()) return memory.status();
    DramArray a;
    a.memory_ = std::move(*memory);
    a.data_ = static_cast<T*>(a.memory_.data());
    for (size_t i = 0; i < n; ++i) new (&a.data_[i]) T();
    a.size_ = n;
    return a;
  }

  DramArray(DramArray&& other) noexcept { *this = std::move(other); }
  DramArray& operator=(DramArray&& other) noexcept {
    if (this != &other) {
      Destroy();
      memory_ = std::move(other.memory_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  DramArray(const DramArray&) = delete;
  DramArray& operator=(const DramArray&) = delete;
  ~DramArray() { Destroy(); }

  T& operator[](size_t i) const { return data_[i]; }
  size_t size() const { return size_; }

 private:
  void Destroy() {
    for (size_t i = 0; i < size_; ++i) data_[i].~T();
    size_ = 0;
    data_ = nullptr;
  }

  DramBuffer memory_;
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pmhash
