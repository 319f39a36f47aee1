// Counts the calling thread's heap allocations, so a test can show that a path allocates
// nothing (the allocation-free Status, an engine's Get). heap_counter.cc replaces the
// global operator new and delete (every form), forwarding to malloc and free; a binary
// may hold that replacement only once, so CMake adds heap_counter.cc to the test binaries
// that use it (unit_tests, conformance_tests) and to no library.
#pragma once

#include <cstddef>
#include <functional>

namespace pmhash::testing {

// operator new calls (any form) made by this thread so far.
size_t ThreadHeapAllocations();

// The allocations `fn` makes on this thread.
size_t HeapAllocationsOf(const std::function<void()>& fn);

}  // namespace pmhash::testing
