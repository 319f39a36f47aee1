#include "support/heap_counter.h"

#include <cstdlib>
#include <new>

// Replacing the global operator new is allowed by the standard; it forwards to malloc,
// which the sanitizers still see (GCC cannot tell that delete's free matches).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
thread_local size_t t_allocations = 0;
}  // namespace

// Every form that pairs with the replaced deletes is replaced too: a nothrow new left to
// the sanitizer's runtime would be freed here with free() (std::stable_sort uses one).
void* operator new(size_t size) {
  ++t_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  ++t_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace pmhash::testing {

size_t ThreadHeapAllocations() { return t_allocations; }

size_t HeapAllocationsOf(const std::function<void()>& fn) {
  const size_t before = t_allocations;
  fn();
  return t_allocations - before;
}

}  // namespace pmhash::testing
