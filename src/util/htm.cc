#include "util/htm.h"

#include <immintrin.h>

#include "util/cpu.h"

namespace pmhash::htm {
namespace {

[[gnu::target("rtm")]] bool ProbeCommits() {
  // A few tries: an interrupt or a cold line may abort any single one.
  volatile int probe = 0;
  for (int i = 0; i < 64; ++i) {
    if (_xbegin() == _XBEGIN_STARTED) {
      probe = probe + 1;
      _xend();
      return true;
    }
  }
  return false;
}

}  // namespace

bool Usable() {
  static const bool usable = CpuFeatures::Get().rtm && ProbeCommits();
  return usable;
}

[[gnu::target("rtm")]] unsigned Begin() { return _xbegin(); }
[[gnu::target("rtm")]] void End() { _xend(); }
[[gnu::target("rtm")]] void AbortRetry() {
  _xabort(kRetryCode);
}
[[gnu::target("rtm")]] void AbortFallback() {
  _xabort(kFallbackCode);
}
unsigned ExplicitCode(unsigned status) {
  return (status & _XABORT_EXPLICIT) != 0 ? _XABORT_CODE(status) : 0;
}

}  // namespace pmhash::htm
