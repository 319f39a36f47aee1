#include "bench/config.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include <CLI/CLI.hpp>

#include "bench/index_setup.h"

namespace pmhash::bench {

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kLoad: return "load";
    case Phase::kSearch: return "search";
    case Phase::kNegative: return "negative";
    case Phase::kUpdate: return "update";
    case Phase::kDelete: return "delete";
    case Phase::kMixed: return "mixed";
    case Phase::kFill: return "fill";
    case Phase::kPrefill: return "prefill";
  }
  return "?";
}

std::vector<std::string> SplitList(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    std::string part = text.substr(start, end - start);
    // Trim spaces so "a, b" works from scenario files.
    part.erase(0, part.find_first_not_of(' '));
    part.erase(part.find_last_not_of(' ') + 1);
    if (!part.empty()) out.push_back(part);
    start = end + 1;
  }
  return out;
}

static bool ParseUint(const std::string& text, uint64_t* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

Status ParseMix(const std::string& text, Mix* out) {
  Mix mix{0, 0, 0, 0};
  for (const std::string& part : SplitList(text)) {
    const size_t eq = part.find('=');
    uint64_t pct = 0;
    if (eq == std::string::npos || !ParseUint(part.substr(eq + 1), &pct) || pct > 100) {
      return Status::InvalidArgument("--mix '" + text +
                                     "': expected name=percent pairs, e.g. search=90,update=10");
    }
    const std::string name = part.substr(0, eq);
    int* slot = name == "search" || name == "read" ? &mix.search
                : name == "update"                 ? &mix.update
                : name == "insert"                 ? &mix.insert
                : name == "negative"               ? &mix.negative
                                                   : nullptr;
    if (slot == nullptr) {
      return Status::InvalidArgument("--mix: unknown operation '" + name +
                                     "' (expected search, update, insert, negative)");
    }
    *slot += static_cast<int>(pct);
  }
  if (mix.search + mix.update + mix.insert + mix.negative != 100) {
    return Status::InvalidArgument("--mix '" + text + "': the percentages must add up to 100");
  }
  *out = mix;
  return Status::OK();
}

std::string MixText(const Mix& mix) {
  std::string s;
  auto add = [&](const char* name, int pct) {
    if (pct == 0) return;
    if (!s.empty()) s += ",";
    s += std::string(name) + "=" + std::to_string(pct);
  };
  add("search", mix.search);
  add("update", mix.update);
  add("insert", mix.insert);
  add("negative", mix.negative);
  return s;
}

std::string EngineOf(const std::string& column) { return column.substr(0, column.find('@')); }

Json BenchConfig::ToJson() const {
  Json j = Json::Object();
  j.Set("run", label);
  Json e = Json::Array();
  for (const auto& name : engines) e.Push(name);
  j.Set("engines", e);
  Json t = Json::Array();
  for (int n : threads) t.Push(n);
  j.Set("threads", t);
  j.Set("records", records);
  j.Set("ops", measured_ops());
  Json p = Json::Array();
  for (Phase ph : phases) p.Push(PhaseName(ph));
  j.Set("phases", p);
  j.Set("mix", MixText(mix));
  j.Set("dist", DistName(dist));
  j.Set("key_size", static_cast<uint64_t>(key_size));
  j.Set("value_size", value_size.fixed() ? std::to_string(value_size.min)
                                         : std::to_string(value_size.min) + "-" +
                                               std::to_string(value_size.max));
  j.Set("load_factor", load_factor ? Json(*load_factor) : Json());
  Json o = Json::Object();
  for (const auto& [k, v] : engine_options) o.Set(k, v);
  j.Set("opt", o);
  j.Set("pool", pool.empty() ? std::string("shm") : pool);
  j.Set("pool_size", pool_size == 0 ? Json() : Json(pool_size));
  j.Set("persist", PersistModeName(persist));
  j.Set("flush", FlushInstructionName(flush));
  j.Set("write_latency_ns", static_cast<uint64_t>(write_latency_ns));
  j.Set("read_latency_ns", static_cast<uint64_t>(read_latency_ns));
  j.Set("latency", write_latency_ns > 0 || read_latency_ns > 0 ? Json("emulated") : Json());
  j.Set("media_model", media_model);
  j.Set("counters", count_stats);
  j.Set("inserts", put_inserts ? "put" : "insert");
  Json m = Json::Object();
  m.Set("dimms", static_cast<uint64_t>(media.dimms));
  m.Set("interleave_bytes", static_cast<uint64_t>(media.interleave_bytes));
  m.Set("buffer_bytes", static_cast<uint64_t>(media.buffer_bytes));
  m.Set("cache_bytes", media.cache_bytes);
  j.Set("media", m);
  j.Set("eadr_write_back_instruction", eadr_write_back_instruction);
  j.Set("seed", seed);
  Json hs = Json::Object();  // by column ("" for all); no entry: --seed's value
  for (const auto& [column, spec] : hash_seeds) {
    hs.Set(column, spec.random ? Json("random") : Json(spec.value));
  }
  j.Set("hash_seed", hs);
  j.Set("recovery", recovery);
  j.Set("clean_reopen", clean_reopen);
  j.Set("latency_sampling", sample_every == 0 ? Json("auto") : Json(uint64_t{sample_every}));
  j.Set("redundancy", redundancy);
  j.Set("batch", uint64_t{batch});
  j.Set("lookups", get_u64 ? "u64" : "get");
  j.Set("pin", pin);
  j.Set("floor", floor);
  j.Set("floor_prefetch", uint64_t{floor_prefetch});
  j.Set("repeat", repeat);
  j.Set("max_spread", max_spread);
  return j;
}

Status FlagError(const Status& s) {
  if (s.ok()) return s;
  static const std::pair<const char*, const char*> kFlags[] = {
      {"write_latency_ns", "--write-latency-ns"},
      {"read_latency_ns", "--read-latency-ns"},
      {"media.dimms", "--media-dimms"},
      {"media.interleave_bytes", "--media-interleave"},
      {"media.buffer_bytes", "--media-buffer"},
      {"media.cache_bytes", "--eadr-cache"}};
  const std::string message(s.message());
  for (const auto& [field, flag] : kFlags) {
    if (message.rfind(field, 0) == 0) {
      return Status::InvalidArgument(flag + message.substr(std::strlen(field)));
    }
  }
  return s;
}

namespace {

bool ParseSizeWithSuffix(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  uint64_t mult = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K': case 'k': mult = 1ull << 10; digits.pop_back(); break;
    case 'M': case 'm': mult = 1ull << 20; digits.pop_back(); break;
    case 'G': case 'g': mult = 1ull << 30; digits.pop_back(); break;
    case 'T': case 't': mult = 1ull << 40; digits.pop_back(); break;
    default: break;
  }
  uint64_t v = 0;
  if (!ParseUint(digits, &v) || v > (~0ull) / mult) return false;
  *out = v * mult;
  return true;
}

// The persistence settings' one check, as Open runs it, its message naming the flag.
Status ValidatePersistFlags(const BenchConfig& config) {
  return FlagError(engines::PersistConfigOf(BaseOptions(config, "")).Validate());
}

// One line: CLI11 messages sometimes span lines.
std::string OneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

Status ParseBenchArgs(const std::vector<std::string>& args, BenchConfig* config,
                      GlobalOptions* global) {
  CLI::App app{
      "pmhash bench: measure engines side by side (throughput, latency percentiles, "
      "persistence cost per operation, load factor, recovery time)",
      "pmhash bench"};
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.footer(
      "Compare two result files (e.g. before and after a change): pmhash bench compare "
      "OLD.json NEW.json (Mops/s median (min-max) per engine, phase and thread count; "
      "faster / slower only when both have 2+ rounds and their [min, max] ranges do not "
      "overlap).");
  app.allow_extras(false);

  std::string engines, threads, phases, mix, dist, value_size, load_factor, pool_size;
  std::string persist, flush;
  std::vector<std::string> opts, hash_seeds;
  std::string recovery, seed, key_size, write_latency, sampling, batch, lookups;
  std::string read_latency, media_model, media_dimms, media_interleave, media_buffer;
  std::string eadr_cache, eadr_write_back, counters, inserts;
  bool redundancy = config->redundancy;
  bool pin = config->pin;
  bool floor = config->floor;
  std::string floor_prefetch, repeat, max_spread;
  auto last = [](CLI::Option* o) {
    return o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  };
  last(app.add_option("--engine", engines,
                      "Engines to compare, comma-separated (default: every registered engine; "
                      "'all' means the same); NAME@LABEL runs NAME again as a column of its "
                      "own, for other --opt NAME@LABEL:... or --hash-seed NAME@LABEL:... "
                      "values"));
  last(app.add_option("--threads", threads, "Thread counts, comma-separated (default 1)"));
  std::string records, ops;
  last(app.add_option("--records", records,
                      "Keys loaded by the load phase; with --load-factor, the number of keys "
                      "the table is created for (default 1000000)")
           ->type_name("UINT"));
  last(app.add_option("--ops", ops,
                      "Operations per measured phase (default: --records)")
           ->type_name("UINT"));
  last(app.add_option("--phases", phases,
                      "Phases in order: load,search,negative,update,delete,mixed,fill "
                      "(default load,search,negative,update,mixed,delete)"));
  last(app.add_option("--mix", mix, "Mixed phase: search=50,update=50 (also insert, negative)"));
  last(app.add_option("--dist", dist,
                      "Key distribution: uniform | zipfian[:0.99] | selfsimilar[:0.2] | "
                      "sequential | crafted[:12] (keys whose seed-0 hashes share their top "
                      "12 bits, 1..16: a hash flood against pools of seed 0, drawn "
                      "uniformly; about 2^bits hashes per key to find) (default uniform)"));
  last(app.add_option("--key-size", key_size, "Key bytes, 8..1024 (default 8)")->type_name("UINT"));
  last(app.add_option("--value-size", value_size, "Value bytes: N or a range MIN-MAX (default 8)"));
  last(app.add_option("--load-factor", load_factor,
                      "Fill the table to this load factor (0,1] before the measured phases; "
                      "load then inserts --ops new keys (the papers' latency method)"));
  app.add_option("--opt", opts,
                 "Engine option name=value (repeatable); ENGINE:name=value applies to that "
                 "engine only. `pmhash engines NAME` lists an engine's options")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--hash-seed", hash_seeds,
                 "Key-hash seed of the pools the run creates: N (0..2^64-1) or random "
                 "(repeatable; ENGINE:VALUE for that --engine column only; default: --seed's "
                 "value, so a run's placements repeat; 0 is the unseeded hash of layout-3 "
                 "pools, which --dist crafted attacks)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  last(app.add_option("--pool", config->pool,
                      "dram (anonymous memory) | PATH (a file that must not exist, or a "
                      "directory; removed afterwards) (default: a fresh file under /dev/shm)"));
  last(app.add_option("--pool-size", pool_size,
                      "Pool size, e.g. 512M (default: computed from records and sizes)"));
  last(app.add_option("--persist", persist, "adr | eadr | none (default adr)"));
  last(app.add_option("--flush", flush, "auto | clwb | clflushopt | clflush (default auto)"));
  last(app.add_option("--write-latency-ns", write_latency,
                      "Emulated PM write latency, a busy-wait per 256-byte media write the "
                      "media model emits (a line merging into a buffered media line is "
                      "free), in adr and eadr, 0..100000 (default 0)")
           ->type_name("UINT"));
  last(app.add_option("--read-latency-ns", read_latency,
                      "Emulated PM read latency, a busy-wait per media line an operation "
                      "reads (once per operation; less the time since the engine prefetched "
                      "it), in adr and eadr, 0..100000 (default 0)")
           ->type_name("UINT"));
  last(app.add_option("--counters", counters,
                      "on | off: count flushes, fences, stores, reads and media traffic per "
                      "operation; off: every persistence figure is n/a and the engines' hot "
                      "paths count nothing, for throughput without the counters' cost "
                      "(default on)"));
  last(app.add_option("--inserts", inserts,
                      "insert | put: how new keys are written (load, fill, the mixed phase's "
                      "inserts): Index::Insert, or Index::Put, an upsert that need not look "
                      "for the key first (bht's blind write) (default insert)"));
  last(app.add_option("--media-model", media_model,
                      "on | off: run the media model (media writes, reads of read-modify-"
                      "writes, PM lines written; off: those figures are n/a and no write "
                      "latency can be emulated) (default on)"));
  last(app.add_option("--media-dimms", media_dimms,
                      "Emulated DIMMs the pool is interleaved across, 1..64 (default 6)")
           ->type_name("UINT"));
  last(app.add_option("--media-interleave", media_interleave,
                      "Interleave chunk across the DIMMs, a power of two 256..1G, e.g. 4K "
                      "(default 4K)"));
  last(app.add_option("--media-buffer", media_buffer,
                      "Write-combining buffer per DIMM, a multiple of 256 up to 1M, e.g. 16K "
                      "(default 16K)"));
  last(app.add_option("--eadr-cache", eadr_cache,
                      "eadr: the persistent CPU cache modelled in front of the device, 0 (none: "
                      "every stored line goes to the device) or a multiple of 1K up to 256M "
                      "(default 32M)"));
  last(app.add_option("--eadr-write-back", eadr_write_back,
                      "on | off: in eadr an engine's write-back hint executes the flush "
                      "instruction (--flush) besides feeding the media model; off: the model "
                      "only (default on)"));
  CLI::Option* seed_opt =
      last(app.add_option("--seed", seed, "Seed of every generator, 0..2^64-1 (default 42)")
               ->type_name("UINT"));
  last(app.add_option("--recovery", recovery,
                      "on | off | clean | both: at the end of each engine's run, time the "
                      "reopen after an unclean close (on: recovery_ms), after a clean Close "
                      "(clean: reopen_ms), or both (default on; file pools only)"));
  last(app.add_option("--latency-sample", sampling,
                      "auto | all | N: time every operation (all), 1 in N, or auto: every "
                      "operation in phases of at most 4096 operations, else 1 in 64 "
                      "(default auto)"));
  last(app.add_option("--batch", batch,
                      "N > 1: every search and negative phase also runs through MultiGet, N "
                      "keys a call, and every load, update and delete phase through Write, N "
                      "ops a call (on a second index holding the same keys), as rows of their "
                      "own ('search (batch N)'); latency per operation = time per call / N; "
                      "1..4096 (default 1: single calls only)")
           ->type_name("UINT"));
  last(app.add_option("--lookups", lookups,
                      "get | u64: the call of every search and negative phase: Index::Get into "
                      "a string (default), or Index::GetU64 with the key and value in words "
                      "(needs --key-size 8 and --value-size 8)"));
  last(app.add_option("--repeat", repeat,
                      "Rounds of the whole engine x thread-count matrix, each in a new "
                      "order (seeded); figures are the median with min and max, ratios "
                      "between engines are taken within each round, 1..1000 (default 1; "
                      "use 3 or more before claiming a difference)")
           ->type_name("UINT"));
  last(app.add_option("--max-spread", max_spread,
                      "Flag a throughput whose max/min over the rounds exceeds this as "
                      "unstable, >= 1 (default 1.25)")
           ->type_name("X"));
  app.add_flag("--pin,!--no-pin", pin,
               "Pin worker thread i to the i-th CPU this process may run on (in turn); each "
               "row's pinned_cpus says where its threads ran (default off)");
  app.add_flag("--floor,!--no-floor", floor,
               "Also time plain loops over a table of 64-byte buckets as large as the run's "
               "pool, on the same pool kind and persistence (insert-like, delete-like, "
               "lookups, prefetched lookups, dependent lookups), and show each engine's "
               "throughput as a percentage of the matching loop (default off)");
  last(app.add_option("--floor-prefetch", floor_prefetch,
                      "Lookups ahead the floor's prefetch loop prefetches, 1..1024 (default 16)")
           ->type_name("UINT"));
  app.add_flag("--redundancy,!--no-redundancy", redundancy,
               "Run on a DRAM pool under the crash simulator and report redundant flushes "
               "(a line flushed with nothing pending) and fences (nothing flushed) per "
               "operation; throughput and latency are then meaningless (default off)");
  last(app.add_option("--json", global->json_path, "Write results as JSON to FILE"));
  last(app.add_option("--scenario", global->scenario,
                      "Run bench/scenarios/NAME.json (flags given here override it)"));
  last(app.add_option("--scenario-dir", global->scenario_dir,
                      "Where scenario files are (default: $PMHASH_SCENARIO_DIR, else "
                      "bench/scenarios found from the executable or the working directory)"));
  app.add_flag("--list-scenarios", global->list_scenarios, "List the scenarios and exit");
  app.add_flag("--list-engines", global->list_engines,
               "List the registered engines, one per line, and exit");
  app.add_flag("--quiet", global->quiet, "No tables on stdout (JSON and errors only)");
  last(app.add_option("--progress", global->progress, "auto | on | off (default auto)"));

  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 wants it reversed
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    global->help = true;
    global->help_text = app.help();
    return Status::OK();
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(OneLine(e.what()));
  }

  config->redundancy = redundancy;
  config->pin = pin;
  config->floor = floor;
  if (!repeat.empty()) {
    uint64_t n = 0;
    if (!ParseUint(repeat, &n) || n == 0 || n > static_cast<uint64_t>(kMaxRepeat)) {
      return Status::InvalidArgument("--repeat '" + repeat + "': expected a whole number 1.." +
                                     std::to_string(kMaxRepeat));
    }
    config->repeat = static_cast<int>(n);
  }
  if (!max_spread.empty()) {
    double x = 0;
    auto [end, ec] =
        std::from_chars(max_spread.data(), max_spread.data() + max_spread.size(), x);
    if (ec != std::errc() || end != max_spread.data() + max_spread.size() || !(x >= 1) ||
        x > 1000) {
      return Status::InvalidArgument("--max-spread '" + max_spread +
                                     "': expected a ratio max/min of at least 1, e.g. 1.25");
    }
    config->max_spread = x;
  }
  if (!floor_prefetch.empty()) {
    uint64_t d = 0;
    if (!ParseUint(floor_prefetch, &d) || d == 0 || d > 1024) {
      return Status::InvalidArgument("--floor-prefetch '" + floor_prefetch +
                                     "': expected a whole number 1..1024");
    }
    config->floor_prefetch = static_cast<uint32_t>(d);
  }
  if (seed_opt->count() > 0 && !ParseUint(seed, &config->seed)) {
    return Status::InvalidArgument("--seed '" + seed + "': expected a whole number 0.." +
                                   std::to_string(~0ull));
  }
  if (!key_size.empty()) {
    uint64_t k = 0;
    if (!ParseUint(key_size, &k) || k < 8 || k > 1024) {
      return Status::InvalidArgument("--key-size '" + key_size +
                                     "': expected 8..1024 bytes (8 bytes name 2^64 distinct keys)");
    }
    config->key_size = static_cast<size_t>(k);
  }
  // Persistence settings: the format here, the ranges in ValidatePersistFlags below.
  auto whole = [](const char* flag, const std::string& text, uint32_t* out) {
    uint64_t v = 0;
    if (text.empty()) return Status::OK();
    if (!ParseUint(text, &v) || v > 0xffffffffull) {
      return Status::InvalidArgument(std::string(flag) + " '" + text +
                                     "': expected a whole number");
    }
    *out = static_cast<uint32_t>(v);
    return Status::OK();
  };
  auto bytes = [](const char* flag, const std::string& text, auto* out) {
    uint64_t v = 0;
    if (text.empty()) return Status::OK();
    using T = std::decay_t<decltype(*out)>;
    if (!ParseSizeWithSuffix(text, &v) || v > std::numeric_limits<T>::max()) {
      return Status::InvalidArgument(std::string(flag) + " '" + text +
                                     "': expected bytes with an optional K, M, G suffix");
    }
    *out = static_cast<T>(v);
    return Status::OK();
  };
  auto on_off = [](const char* flag, const std::string& text, bool* out) {
    if (text.empty()) return Status::OK();
    if (text != "on" && text != "off") {
      return Status::InvalidArgument(std::string(flag) + " '" + text + "': expected on or off");
    }
    *out = text == "on";
    return Status::OK();
  };
  PMHASH_RETURN_IF_ERROR(whole("--write-latency-ns", write_latency, &config->write_latency_ns));
  PMHASH_RETURN_IF_ERROR(whole("--read-latency-ns", read_latency, &config->read_latency_ns));
  PMHASH_RETURN_IF_ERROR(whole("--media-dimms", media_dimms, &config->media.dimms));
  PMHASH_RETURN_IF_ERROR(
      bytes("--media-interleave", media_interleave, &config->media.interleave_bytes));
  PMHASH_RETURN_IF_ERROR(bytes("--media-buffer", media_buffer, &config->media.buffer_bytes));
  PMHASH_RETURN_IF_ERROR(bytes("--eadr-cache", eadr_cache, &config->media.cache_bytes));
  PMHASH_RETURN_IF_ERROR(on_off("--media-model", media_model, &config->media_model));
  PMHASH_RETURN_IF_ERROR(on_off("--counters", counters, &config->count_stats));
  if (!inserts.empty() && inserts != "insert" && inserts != "put") {
    return Status::InvalidArgument("--inserts must be insert or put, not '" + inserts + "'");
  }
  config->put_inserts = inserts == "put";
  PMHASH_RETURN_IF_ERROR(
      on_off("--eadr-write-back", eadr_write_back, &config->eadr_write_back_instruction));
  if (!sampling.empty()) {
    uint64_t every = 0;
    if (sampling == "auto") {
      config->sample_every = 0;
    } else if (sampling == "all") {
      config->sample_every = 1;
    } else if (ParseUint(sampling, &every) && every >= 1 && every <= (1u << 30)) {
      config->sample_every = static_cast<uint32_t>(every);
    } else {
      return Status::InvalidArgument("--latency-sample '" + sampling +
                                     "': expected auto, all or a whole number 1..2^30");
    }
  }
  if (!batch.empty()) {
    uint64_t b = 0;
    if (!ParseUint(batch, &b) || b == 0 || b > kMaxBatch) {
      return Status::InvalidArgument("--batch '" + batch + "': expected a whole number 1.." +
                                     std::to_string(kMaxBatch));
    }
    config->batch = static_cast<uint32_t>(b);
  }
  if (!lookups.empty()) {
    if (lookups != "get" && lookups != "u64") {
      return Status::InvalidArgument("--lookups '" + lookups + "': expected get or u64");
    }
    config->get_u64 = lookups == "u64";
  }
  if (!records.empty() && !ParseUint(records, &config->records)) {
    return Status::InvalidArgument("--records '" + records + "': expected a whole number");
  }
  if (!ops.empty() && !ParseUint(ops, &config->ops)) {
    return Status::InvalidArgument("--ops '" + ops + "': expected a whole number");
  }
  if (!engines.empty()) {
    config->engines = SplitList(engines);
    if (config->engines.size() == 1 && config->engines[0] == "all") config->engines.clear();
  }
  if (!threads.empty()) {
    config->threads.clear();
    for (const std::string& t : SplitList(threads)) {
      uint64_t n = 0;
      if (!ParseUint(t, &n) || n == 0 || n > 256) {
        return Status::InvalidArgument("--threads '" + threads +
                                       "': expected thread counts 1..256, e.g. 1,2");
      }
      config->threads.push_back(static_cast<int>(n));
    }
    if (config->threads.empty()) return Status::InvalidArgument("--threads: no thread count");
  }
  if (!phases.empty()) {
    config->phases.clear();
    for (const std::string& p : SplitList(phases)) {
      static const Phase kAll[] = {Phase::kLoad,   Phase::kSearch, Phase::kNegative,
                                   Phase::kUpdate, Phase::kDelete, Phase::kMixed,
                                   Phase::kFill,   Phase::kPrefill};
      bool found = false;
      for (Phase ph : kAll) {
        if (p == PhaseName(ph)) {
          config->phases.push_back(ph);
          found = true;
        }
      }
      if (!found) {
        return Status::InvalidArgument("--phases: unknown phase '" + p +
                                       "' (expected load, search, negative, update, delete, "
                                       "mixed, fill, prefill)");
      }
    }
    if (config->phases.empty()) return Status::InvalidArgument("--phases: no phase");
  }
  if (!mix.empty()) PMHASH_RETURN_IF_ERROR(ParseMix(mix, &config->mix));
  if (!dist.empty()) PMHASH_RETURN_IF_ERROR(ParseDist(dist, &config->dist));
  if (!value_size.empty()) PMHASH_RETURN_IF_ERROR(ParseValueSize(value_size, &config->value_size));
  if (!load_factor.empty()) {
    if (load_factor == "none") {
      config->load_factor.reset();
    } else {
      double f = 0;
      auto [end, ec] = std::from_chars(load_factor.data(),
                                       load_factor.data() + load_factor.size(), f);
      if (ec != std::errc() || end != load_factor.data() + load_factor.size() || !(f > 0) ||
          f > 1) {
        return Status::InvalidArgument("--load-factor '" + load_factor +
                                       "': expected a number in (0, 1]");
      }
      config->load_factor = f;
    }
  }
  for (const std::string& o : opts) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument("--opt '" + o + "': expected name=value");
    }
    config->engine_options[o.substr(0, eq)] = o.substr(eq + 1);
  }
  for (const std::string& h : hash_seeds) {
    const size_t colon = h.rfind(':');
    const std::string column = colon == std::string::npos ? "" : h.substr(0, colon);
    const std::string value = colon == std::string::npos ? h : h.substr(colon + 1);
    HashSeedSpec spec;
    if (value == "random") {
      spec.random = true;
    } else if (!ParseUint(value, &spec.value)) {
      return Status::InvalidArgument("--hash-seed '" + h +
                                     "': expected [ENGINE:]N (0..2^64-1) or [ENGINE:]random");
    }
    config->hash_seeds[column] = spec;
  }
  if (!pool_size.empty() && !ParseSizeWithSuffix(pool_size, &config->pool_size)) {
    return Status::InvalidArgument("--pool-size '" + pool_size +
                                   "': expected bytes with an optional K, M, G suffix");
  }
  if (!persist.empty() && !ParsePersistMode(persist, &config->persist)) {
    return Status::InvalidArgument("--persist '" + persist + "': expected adr, eadr or none");
  }
  if (!flush.empty() && !ParseFlushInstruction(flush, &config->flush)) {
    return Status::InvalidArgument("--flush '" + flush +
                                   "': expected auto, clwb, clflushopt or clflush");
  }
  if (!recovery.empty()) {
    if (recovery != "on" && recovery != "off" && recovery != "clean" && recovery != "both") {
      return Status::InvalidArgument("--recovery '" + recovery +
                                     "': expected on, off, clean or both");
    }
    config->recovery = recovery == "on" || recovery == "both";
    config->clean_reopen = recovery == "clean" || recovery == "both";
  }
  if (global->progress != "auto" && global->progress != "on" && global->progress != "off") {
    return Status::InvalidArgument("--progress '" + global->progress +
                                   "': expected auto, on or off");
  }

  // Cross-flag checks.
  PMHASH_RETURN_IF_ERROR(ValidatePersistFlags(*config));
  if (config->redundancy && !config->count_stats) {
    return Status::InvalidArgument("--redundancy reports through the counters: it cannot be "
                                   "combined with --counters off");
  }
  if (config->floor && config->read_latency_ns > 0) {
    return Status::InvalidArgument("--floor cannot be combined with --read-latency-ns (the "
                                   "floor's lookup loops are plain loads, charged no "
                                   "emulated read latency)");
  }
  if (config->records == 0) return Status::InvalidArgument("--records must be at least 1");
  if (config->records > (1ull << 40) || config->measured_ops() > (1ull << 40)) {
    return Status::InvalidArgument("--records / --ops: at most 2^40");
  }
  if (config->redundancy && !config->pool.empty() && config->pool != "dram") {
    return Status::InvalidArgument("--redundancy runs on a DRAM pool under the crash "
                                   "simulator: it cannot be combined with --pool " +
                                   config->pool);
  }
  if (config->redundancy && config->floor) {
    return Status::InvalidArgument("--floor cannot be combined with --redundancy (under the "
                                   "crash simulator no timing means anything)");
  }
  if (config->redundancy && config->pool_size > kMaxRedundancyPool) {
    return Status::InvalidArgument("--redundancy: --pool-size at most 2G (the crash simulator "
                                   "keeps about 2.5x the pool in DRAM)");
  }
  return Status::OK();
}

}  // namespace pmhash::bench
