// The benchmark driver's configuration: what `pmhash bench` flags mean, parsed with
// CLI11. The flags and their spellings are a contract (../shared/DESIGN.md, "Benchmark
// driver contract"): scripts outside the project rely on them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/json.h"
#include "bench/keygen.h"
#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash::bench {

// kPrefill: the fill to --load-factor, reported as a row of its own (beyond the
// contract; only as the first phase, only with --load-factor).
enum class Phase { kLoad, kSearch, kNegative, kUpdate, kDelete, kMixed, kFill, kPrefill };
const char* PhaseName(Phase phase);

// --mix percentages (sum 100). YCSB's read/update/insert mixes plus negative lookups.
struct Mix {
  int search = 50, update = 50, insert = 0, negative = 0;
};
Status ParseMix(const std::string& text, Mix* out);
std::string MixText(const Mix& mix);

// --hash-seed: the key-hash seed of a pool the run creates (Options::hash_seed).
struct HashSeedSpec {
  bool random = false;  // a fresh seed per pool (getrandom), else `value`
  uint64_t value = 0;
};

// The registered engine a column of --engine runs: NAME for "NAME" and "NAME@LABEL" (a
// column of its own for the same engine, e.g. with other --opt or --hash-seed values).
std::string EngineOf(const std::string& column);

// One run: every engine x every thread count, the phases in order.
struct BenchConfig {
  // Columns: registered engine names, or NAME@LABEL (EngineOf). Empty: every engine.
  std::vector<std::string> engines;
  std::vector<int> threads = {1};
  uint64_t records = 1000000;        // keys loaded (or, with load_factor, table sizing)
  uint64_t ops = 0;                  // operations per measured phase; 0: records
  std::vector<Phase> phases = {Phase::kLoad, Phase::kSearch, Phase::kNegative,
                               Phase::kUpdate, Phase::kMixed, Phase::kDelete};
  Mix mix;
  DistSpec dist;
  size_t key_size = 8;
  ValueSizeSpec value_size;
  std::optional<double> load_factor;  // fill to this before the measured phases
  std::map<std::string, std::string> engine_options;
  std::string pool;                   // "" (fresh file under /dev/shm), "dram", or a path
  uint64_t pool_size = 0;             // 0: computed from records, sizes and headroom
  PersistMode persist = PersistMode::kAdr;
  FlushInstruction flush = FlushInstruction::kAuto;
  // Emulated latency and the media model: Options' fields of the same names
  // (include/pmhash/options.h), validated by pm::PersistConfig::Validate.
  uint32_t write_latency_ns = 0;
  uint32_t read_latency_ns = 0;
  bool media_model = true;
  MediaOptions media;
  // Options::count_stats: off, no persistence figure is measured (all null / n/a) and the
  // engines' hot paths count nothing (throughput without the counters' cost).
  bool count_stats = true;
  // New keys (load, fill, the mixed phase's inserts) written with Index::Put instead of
  // Insert: the contract's insert reports AlreadyExists and may read what a blind upsert
  // need not (bht's Insert reads the segment; its Put is the paper's blind write).
  bool put_inserts = false;
  bool eadr_write_back_instruction = true;
  uint64_t seed = 42;
  // --hash-seed by column ("" for every column): the seed of the pools the run creates.
  // None given: --seed's value, so that one seed repeats a run's placements too.
  std::map<std::string, HashSeedSpec> hash_seeds;
  bool recovery = true;               // reopen after an unclean close (file pools)
  bool clean_reopen = false;          // also time a reopen after a clean Close
  // Latency sampling: time 1 operation in `sample_every` (1 = every operation);
  // 0 = automatic (runner.h: every operation for short phases, else 1 in kSampleStride).
  uint32_t sample_every = 0;
  // Run on a DRAM pool under the crash simulator to count redundant flushes and fences
  // (throughput and latency are then meaningless).
  bool redundancy = false;
  // > 1: every search and negative phase also runs through Index::MultiGet, this many
  // keys a call, as a row of its own (PhaseResult::batch); 1: Gets only.
  uint32_t batch = 1;
  // Search and negative phases call Index::GetU64 instead of Get (--lookups u64; 8-byte
  // keys and values only). MultiGet rows and mixed phases are unchanged.
  bool get_u64 = false;
  bool pin = false;  // pin each worker thread to a CPU (threads.h)
  // Measure the machine's floor beside the engines (floor.h), prefetching this many
  // lookups ahead in its prefetch loop.
  bool floor = false;
  uint32_t floor_prefetch = 16;
  // Rounds of the whole matrix (rounds.h), and the max/min of a figure over them above
  // which it is flagged unstable.
  int repeat = 1;
  double max_spread = 1.25;
  std::string label = "main";         // names the run in a scenario

  uint64_t measured_ops() const { return ops == 0 ? records : ops; }
  Json ToJson() const;
};

// --redundancy: the largest pool the crash simulator may shadow (--pool-size), and the
// default cap when the pool is sized from --records.
inline constexpr uint64_t kMaxRedundancyPool = 2ull << 30;
inline constexpr uint64_t kDefaultRedundancyPool = 512ull << 20;
// --batch: the most keys one MultiGet call is given.
inline constexpr uint32_t kMaxBatch = 4096;
// --repeat: the most rounds.
inline constexpr int kMaxRepeat = 1000;

// Options that apply to the whole invocation, not to one run.
struct GlobalOptions {
  std::string json_path;
  std::string scenario;
  std::string scenario_dir;
  bool quiet = false;              // no tables on stdout
  std::string progress = "auto";   // auto (stderr is a terminal) | on | off
  bool list_scenarios = false;
  bool list_engines = false;
  bool help = false;
  std::string help_text;
};

// Parses `args` (without the program / "bench" word) into *config and *global.
// InvalidArgument with a one-line message naming the flag on any error, including
// unknown flags. Values already in *config are the defaults (scenarios layer flags).
Status ParseBenchArgs(const std::vector<std::string>& args, BenchConfig* config,
                      GlobalOptions* global);

// An error of the persistence settings' one check (pm::PersistConfig::Validate, whose
// messages name Options fields) as a flag's error: "write_latency_ns must be ..." becomes
// "--write-latency-ns must be ..." (the media fields become --media-dimms,
// --media-interleave, --media-buffer, --eadr-cache).
Status FlagError(const Status& persist_config_error);

// Splits "a,b,c" (empty parts dropped).
std::vector<std::string> SplitList(const std::string& text, char sep = ',');

}  // namespace pmhash::bench
