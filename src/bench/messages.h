// The bench's command-line entries (micro-benchmarks, trace replay) report an error the
// way the tool does: one line "pmhash: <message>" on stderr, and an exit code.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>

namespace pmhash::bench {

inline int Fail(int code, const std::string& message) {
  std::string one = message;
  std::replace(one.begin(), one.end(), '\n', ' ');
  std::fprintf(stderr, "pmhash: %s\n", one.c_str());
  return code;
}

// Timings from a build with assertions on say so first.
inline void WarnIfDebugBuild() {
#ifndef NDEBUG
  std::fprintf(stderr, "pmhash: warning: this is not a release build; timings are not "
                       "representative\n");
#endif
}

}  // namespace pmhash::bench
