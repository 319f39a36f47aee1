// Threads that start together: the start barrier of every timed part of the driver (a
// phase's workers, the floor's loops), optionally each pinned to a CPU (--pin).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace pmhash::bench {

// The CPUs `n` threads are pinned to under --pin: the CPUs this process may run on
// (sched_getaffinity), in turn (thread i on the (i mod count)-th). Empty when `pin` is
// false or the affinity cannot be read.
std::vector<int> PinCpus(bool pin, size_t n);

struct TogetherRun {
  double seconds = 0;        // from the release to the last body's return
  std::vector<int> pinned;   // the CPU of each thread; empty when not pinned
  std::string pin_error;     // why pinning failed (the threads then ran unpinned)
};

// Runs body(i) for i in [0, n) on n new threads, released together once all are ready.
// `cpus`: empty, or one CPU per thread to pin it to before the release. `poll`, if set,
// is called on the calling thread about every 50 ms while the bodies run, until it
// returns false (progress reporting).
TogetherRun RunTogether(size_t n, const std::vector<int>& cpus,
                        const std::function<void(size_t)>& body,
                        const std::function<bool()>& poll);

}  // namespace pmhash::bench
