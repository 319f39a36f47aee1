// What the registry knows about an engine, as data: its description, its options (name,
// default, range, help), its capabilities and its test profile. The conformance and crash
// suites, the CLI's `engines` listing and the benchmark read it; none of them has code for
// a particular engine. EngineOptions reads an index's engine options through the declared
// list, so an engine's Configure cannot disagree with what it declares.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/index.h"
#include "pmhash/options.h"

namespace pmhash::engines {

// One engine option. The default may be absent ("auto"): the engine then derives the
// value (from initial_capacity, say), and the help says how.
struct OptionSpec {
  enum class Type : uint8_t { kUint, kDouble, kBool };

  std::string name;
  Type type = Type::kUint;
  bool has_default = false;  // false: "auto", the getter returns 0 (or false)
  uint64_t uint_default = 0, uint_min = 0, uint_max = 0;
  double double_default = 0, double_min = 0, double_max = 0;
  bool bool_default = false;
  std::string help;

  static OptionSpec Uint(std::string name, std::optional<uint64_t> fallback, uint64_t min,
                         uint64_t max, std::string help);
  static OptionSpec Double(std::string name, double fallback, double min, double max,
                           std::string help);
  static OptionSpec Bool(std::string name, bool fallback, std::string help);

  // "256", "0.9", "on", or "auto".
  std::string DefaultText() const;
  // "4..65536", "0.05..1", "on|off".
  std::string RangeText() const;
};

// What an engine can do, for the callers that adapt to it (benchmark, suites, CLI).
struct EngineCapabilities {
  bool resizes = true;            // the table grows as keys arrive
  // Accepts resize=on|off: the kit declares the option (DeclaredOptions), the engine
  // reads it with EngineOptions::Bool("resize"); resize_when says what "on" does.
  bool resize_switch = false;
  std::string resize_when;
  // With resize=off, an Insert that finds no place is refused with Status::TableFull.
  // False for chained tables, which take key slots on demand and only stop when the
  // pool is full (Status::PoolFull).
  bool refuses_when_full = false;
  // Keys whose 64-bit hashes are all equal (no resize separates them): true if the engine
  // holds a bounded number of them and refuses more with Status::TableFull (group: a home's
  // level-1 cell and its group's level-2 cells; extendible hashing: a segment); false if
  // it stores any number (chains and probing runs grow, and slow down). The
  // degenerate-hash conformance run holds each engine to what it says here.
  bool refuses_full_collisions = false;
  bool background_work = false;   // threads of its own (WaitForBackgroundWork waits)
  bool variable_size_keys = true;  // keys and values of any size up to the limits
  bool pipelined_multiget = false;  // MultiGet prefetches ahead (Engine::Prefetch)
  bool pipelined_write = false;     // Write prefetches ahead (Engine::Prefetch)
  // An inline (8-byte) key's 8 bytes appear as they are in its slot; false for an engine
  // that stores another form (spash: the key's hash, from which the key is recovered).
  bool inline_keys_verbatim = true;
  // The persistence modes it supports (Open refuses the others).
  std::vector<PersistMode> persist_modes = {PersistMode::kAdr, PersistMode::kEadr,
                                            PersistMode::kNone};
};

// Sizes and options the generic suites use for this engine.
struct TestProfile {
  // Engine options for the crash suite's short scripts: small enough that every kind of
  // growth the engine has (resizes, refills, rebuilds) happens within a few hundred keys.
  std::map<std::string, std::string> crash_options;
  // Changes to crash_options for the multi-threaded crash tests, where those options
  // would put every key under one lock (threads must run inside each other's ops).
  std::map<std::string, std::string> thread_crash_options;
  // Engine counters (IndexStats::engine_counters) counting that growth; the crash suite
  // asserts each moved.
  std::vector<std::string> growth_counters;
  // The value size of the shared-arena crash test (CrashThreads.SharedArena*), whose
  // records one thread frees and another allocates at once: large enough that the
  // engine's records come from the allocator's shared arena (spash keeps records of up
  // to 128 bytes in per-thread chunks instead).
  size_t shared_arena_value_bytes = 40;
  // The crash suite's script lengths for this engine (x PMHASH_CRASH_SOAK): below 1 for
  // an engine with many fences per op, whose images at full length cost make test's
  // budget without reaching other code (linear-log: 87,220 images at 1, twice the next).
  double crash_script_scale = 1.0;
  uint64_t crash_pool_size = 4ull << 20;         // each crash-suite script's pool
  uint64_t conformance_pool_size = 16ull << 20;  // a conformance test's pool
  // Non-empty: an engine counter that moves when a Get does the engine's upkeep (bht: the
  // search that wraps a buffer's read-miss counter flips it, as the paper does, and a
  // flip allocates). GetsOfInlineKeysAllocateNothing then lets such Gets allocate, and
  // holds every other Get to none.
  std::string get_upkeep_counter;
  // Non-empty: why the engine still wastes persists (a flush of a line with nothing
  // stored since its last flush, a fence with nothing flushed) somewhere in the crash
  // suite's scripts: ScriptsExerciseGrowthAndPersistNothingTwice then prints its counts
  // instead of failing. A debt on record, not a pass: the engine's doc says it too.
  std::string redundant_persists_known;
  // Non-empty: a known failure of the engine under the degenerate hash (docs/testing.md),
  // which the degenerate-hash conformance run then skips with this as its message. A bug
  // on record, not a pass: the engine's doc says it too.
  std::string degenerate_hash_known_failure;
};

struct EngineInfo {
  EngineDescription description;  // name, summary, paper, crash_consistent
  std::vector<OptionSpec> options;  // the engine's own (see DeclaredOptions)
  EngineCapabilities capabilities;
  TestProfile test;
};

// Options every engine accepts (the kit reads them, not the engine).
std::span<const OptionSpec> CommonOptions();

// Every option an engine accepts: its own, then `resize` if capabilities.resize_switch
// (help from refuses_when_full), then, with `with_common`, CommonOptions().
std::vector<OptionSpec> DeclaredOptions(const EngineInfo& info, bool with_common);

// Typed access to Options::engine_options through the declared options: each getter
// returns the given value if it is valid, else the declared default (0 / false for an
// "auto" default). Finish() reports malformed and out-of-range values, names nobody
// declared (listing the declared ones), and getters for undeclared names or of the
// wrong type (an engine bug), as one InvalidArgument.
class EngineOptions {
 public:
  EngineOptions(const std::map<std::string, std::string>& values,
                std::span<const OptionSpec> declared);

  uint64_t Uint(std::string_view name);
  double Double(std::string_view name);
  bool Bool(std::string_view name);
  // Whether the user gave the option (e.g. to compare it with what a pool holds).
  bool Given(std::string_view name) const;
  Status Finish() const;

 private:
  // The declaration of `name` if it has `type`; nullptr (and an error) otherwise.
  const OptionSpec* Declared(std::string_view name, OptionSpec::Type type);
  // The given text of `name`, or nullptr.
  const std::string* Text(std::string_view name) const;

  const std::map<std::string, std::string>& values_;
  std::vector<const OptionSpec*> declared_;
  std::vector<std::string> errors_;
};

}  // namespace pmhash::engines
