// Options for pmhash::Open. Every field is validated at Open; a bad value is an
// InvalidArgument that names the field.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace pmhash {

// How stores become durable.
enum class PersistMode : uint8_t {
  kAdr,   // CPU caches are volatile: data is durable after flush + fence (Optane ADR).
  kEadr,  // CPU caches are in the persistence domain: fences order stores, no flushes.
  kNone,  // Volatile baseline: no flush, no fence.
};

// The cache-line write-back instruction used in kAdr mode.
enum class FlushInstruction : uint8_t {
  kAuto,        // the best the CPU has: clwb, else clflushopt, else clflush (cpuid)
  kClwb,
  kClflushopt,
  kClflush,
};

struct Options {
  // Registered engine name (`pmhash engines` lists them). When opening an existing pool
  // it may be empty, meaning "whatever engine the pool holds"; if set, it must match.
  std::string engine;

  // Pool file. Empty means an anonymous DRAM pool: volatile, for benchmarking only, and
  // always new (the two creation options below do not apply).
  std::string path;

  // Size of a newly created pool in bytes (range 4 MiB .. 1 TiB, pm::kMinPoolSize ..
  // pm::kMaxPoolSize; rounded up to a multiple of 4 KiB; default 256 MiB). The pool never
  // grows: an insert that needs more is ResourceExhausted. Ignored on open.
  uint64_t pool_size = 256ull << 20;

  // Creation is explicit (as in LevelDB):
  //   create_if_missing  false (default): a missing `path` is NotFound.
  //                      true: a missing `path` is created (`engine` required).
  //   error_if_exists    false (default): an existing `path` is opened and recovered.
  //                      true: an existing `path` is AlreadyExists (to create only).
  // Opening an existing file never formats it, whatever these say: only a pool whose own
  // header says its creation never finished is created again (src/pm/pool.h). The
  // default opens what exists and creates nothing, so a mistyped path is an error, not a
  // new empty index. Callers that relied on the old default (create when missing) set
  // create_if_missing = true; the CLI creates only with `pmhash pool create` or a data
  // command's --create.
  bool create_if_missing = false;
  bool error_if_exists = false;

  PersistMode persist = PersistMode::kAdr;
  FlushInstruction flush = FlushInstruction::kAuto;

  // Emulated PM write latency: busy-wait this many ns per flushed cache line (0..100000;
  // the papers use 300 to 1200). Only in kAdr mode.
  uint32_t write_latency_ns = 0;

  // Expected number of keys; engines size their first table for it (0: engine default).
  uint64_t initial_capacity = 0;

  // Count flushes, fences, stores and media-line writes per thread (see IndexStats).
  bool count_stats = true;

  // Engine-specific options as name=value strings (e.g. {"group_size", "256"}). Unknown
  // names and malformed values are InvalidArgument, listing what the engine accepts.
  std::map<std::string, std::string> engine_options;
};

// Parses "adr" / "eadr" / "none" and "auto" / "clwb" / "clflushopt" / "clflush".
bool ParsePersistMode(const std::string& text, PersistMode* mode);
bool ParseFlushInstruction(const std::string& text, FlushInstruction* flush);
const char* PersistModeName(PersistMode mode);
const char* FlushInstructionName(FlushInstruction flush);

}  // namespace pmhash
