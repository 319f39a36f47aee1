#include "util/cpu.h"

#include <cpuid.h>

#include <cstdint>

namespace pmhash {
namespace {

// XCR0: which register states the OS saves on a context switch (xgetbv, when OSXSAVE).
uint64_t OsSavedStates() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  bool osxsave = false;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f.clflush = (d >> 19) & 1;
    f.sse2 = (d >> 26) & 1;
    osxsave = (c >> 27) & 1;
  }
  // AVX state (xmm+ymm: XCR0 bits 1-2) and AVX-512 state (opmask, zmm: bits 5-7) must be
  // saved by the OS before the instructions are safe to use.
  const uint64_t xcr0 = osxsave ? OsSavedStates() : 0;
  const bool ymm_saved = (xcr0 & 0x6) == 0x6;
  const bool zmm_saved = ymm_saved && (xcr0 & 0xe0) == 0xe0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.clflushopt = (b >> 23) & 1;
    f.clwb = (b >> 24) & 1;
    f.rtm = (b >> 11) & 1;
    f.avx2 = ymm_saved && ((b >> 5) & 1);
    f.avx512bw = zmm_saved && ((b >> 16) & 1) && ((b >> 30) & 1);
  }
  return f;
}

}  // namespace

const CpuFeatures& CpuFeatures::Get() {
  static const CpuFeatures features = Detect();
  return features;
}

}  // namespace pmhash
