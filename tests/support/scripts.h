// The standard operation scripts the crash suite crashes into (tests/crash) and the
// conformance suite fails allocations in (tests/conformance/alloc_failure_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/harness.h"

namespace pmhash::testing {

struct Script {
  std::string name;
  std::vector<Op> ops;
  uint64_t initial_capacity = 16;  // small, so resizes happen
};

// The scripts of the suite (docs/testing.md: grow, skewed, mixed, churn); `scale`
// multiplies their lengths.
std::vector<Script> StandardScripts(uint64_t seed, double scale);

}  // namespace pmhash::testing
