#include "util/dram_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>

#include "util/errors.h"

namespace pmhash {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t RoundUp(size_t v, size_t multiple) { return (v + multiple - 1) / multiple * multiple; }

}  // namespace

Result<DramBuffer> DramBuffer::Allocate(size_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("DramBuffer of 0 bytes");
  DramBuffer b;
  b.size_ = bytes;
  b.huge_ = bytes >= kHugePage;
  // Huge pages need a 2 MiB-aligned range: map one huge page more, keep the aligned part.
  const size_t align = b.huge_ ? kHugePage : 4096;
  b.mapped_ = RoundUp(bytes, align);
  const size_t reserve = b.mapped_ + (b.huge_ ? kHugePage : 0);
  void* p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ErrnoStatus("cannot map " + std::to_string(bytes) + " bytes of DRAM", errno);
  }
  auto* start = static_cast<char*>(p);
  auto* aligned = reinterpret_cast<char*>(RoundUp(reinterpret_cast<uintptr_t>(start), align));
  if (aligned != start) ::munmap(start, aligned - start);
  char* end = start + reserve;
  if (aligned + b.mapped_ != end) ::munmap(aligned + b.mapped_, end - (aligned + b.mapped_));
  // A hint: where THP is off (or the kernel lacks it) the buffer keeps 4 KiB pages.
  if (b.huge_) (void)::madvise(aligned, b.mapped_, MADV_HUGEPAGE);
  b.data_ = aligned;
  return b;
}

DramBuffer& DramBuffer::operator=(DramBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, mapped_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
    huge_ = std::exchange(other.huge_, false);
  }
  return *this;
}

DramBuffer::~DramBuffer() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
}

}  // namespace pmhash
