// Options for pmhash::Open. Every field is validated at Open; a bad value is an
// InvalidArgument that names the field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace pmhash {

// How stores become durable.
enum class PersistMode : uint8_t {
  kAdr,   // CPU caches are volatile: data is durable after flush + fence (Optane ADR).
  kEadr,  // CPU caches are in the persistence domain: fences order stores, no flushes.
  kNone,  // Volatile baseline: no flush, no fence.
};

// The cache-line write-back instruction: kAdr's flushes, and kEadr's write-back hints
// (Options::eadr_write_back_instruction).
enum class FlushInstruction : uint8_t {
  kAuto,        // the best the CPU has: clwb, else clflushopt, else clflush (cpuid)
  kClwb,
  kClflushopt,
  kClflush,
};

// The model of an Optane-like device (and, in kEadr, of the persistent CPU cache in front
// of it) that the substrate feeds to count media traffic and charge emulated latency
// (docs/architecture.md, "Media model"). The defaults are Optane's figures; the ranges
// are checked at Open.
struct MediaOptions {
  // Emulated DIMMs the pool is interleaved across (1..64). 6: a 2nd-generation Xeon socket
  // with one Optane 100 DIMM per memory channel (the BHT paper's platform kind); Spash's
  // Ice Lake sockets have 8.
  uint32_t dimms = 6;
  // Interleave chunk (a power of two, 256 B .. 1 GiB): 4 KiB, as in Optane app-direct mode.
  uint32_t interleave_bytes = 4096;
  // Write-combining buffer per DIMM (a multiple of 256, 256 B .. 1 MiB): 16 KiB = 64 media
  // lines, as measured on Optane. The BHT paper calls it "the PMem's 16KB internal
  // write-back buffer"; with 6 DIMMs the pool sees 6 x 16 KiB, which makes no difference
  // for a workload whose writes are scattered over far more than either.
  uint32_t buffer_bytes = 16384;
  // Persistent CPU cache modelled in kEadr mode (0, or a multiple of 1 KiB up to 256 MiB):
  // 32 MiB, this project's machine's L3 (Spash's testbed has 42 MB per socket). 0 means no
  // cache: every stored line goes straight to the device (write-through).
  uint64_t cache_bytes = 32ull << 20;
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

  // The key-hash seed of a pool this Open creates: every engine hashes keys with xxh3
  // seeded with it, and it is kept in the pool's checked header for the pool's life (do
  // not change: every key's place depends on it). Unset (the default): a random seed
  // (getrandom), so that keys crafted to collide in one pool do not collide in another
  // (docs/reliability.md, "Crafted keys"). Set: this seed, any 64-bit value; fixing it
  // makes a pool's layout repeat for the same keys (`pmhash bench` does: bench/README.md).
  // 0 is the unseeded hash of pools made before per-pool seeds (pool layout 3), whose
  // collisions anyone can compute. Opening an existing pool: unset, or the pool's own
  // seed; any other value is InvalidArgument (the seed cannot change).
  std::optional<uint64_t> hash_seed;

  PersistMode persist = PersistMode::kAdr;
  FlushInstruction flush = FlushInstruction::kAuto;

  // Emulated PM latency, a busy-wait, in kAdr and kEadr (kNone refuses a latency: it has
  // no media). Write: this many ns per 256-byte media write the media model emits (a line
  // that merges into a buffered media line is free; 0..100000; the papers use 300 to
  // 1200). Read: this many ns per media line an operation reads (each once per
  // operation), less the time since an engine prefetched it (0..100000). The write
  // latency needs media_model.
  uint32_t write_latency_ns = 0;
  uint32_t read_latency_ns = 0;

  // Run the media model (see MediaOptions): media writes, media reads of
  // read-modify-writes and lines written in IndexStats. Off, those figures stay 0 and
  // mean "not measured".
  bool media_model = true;
  MediaOptions media;
  // kEadr: a write-back hint (an engine's optional flush; never needed for durability)
  // executes the flush instruction besides feeding the media model; false: the model only.
  bool eadr_write_back_instruction = true;

  // Expected number of keys; engines size their first table for it (0: engine default).
  uint64_t initial_capacity = 0;

  // Count flushes, fences, stores, reads and media traffic per thread (IndexStats::persist,
  // and the media model's figures). Off by default (since 2026-12-01): counting takes every
  // store, flush and read through the persister's hooked path and turns off the engines'
  // short lookup paths: 1.1x-2.0x slower a call (2 M keys, 1 thread; BENCHMARKS.md,
  // "Counting by default, and not"). Turn it on to measure; `pmhash bench` does by
  // default (--counters).
  bool count_stats = false;

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
