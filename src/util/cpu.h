// What the CPU offers, read once by cpuid: the flush instructions the persistence handle
// picks from (src/pm/persist.h) and the SIMD widths the tag matcher picks from
// (src/common/match.h). Everything is chosen at run time; nothing is built with
// -march=native.
#pragma once

namespace pmhash {

struct CpuFeatures {
  bool clflush = false, clflushopt = false, clwb = false;
  bool sse2 = false, avx2 = false;
  bool avx512bw = false;  // avx512f and avx512bw, with the OS saving the zmm state
  bool rtm = false;       // Intel TSX restricted transactional memory (util/htm.h)
  // This machine's features (cached after the first call).
  static const CpuFeatures& Get();
};

}  // namespace pmhash
