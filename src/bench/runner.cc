#include "bench/runner.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "bench/keygen.h"
#include "bench/latency.h"
#include "engines/engine.h"
#include "pm/crashsim.h"
#include "pm/persist.h"
#include "pm/pool.h"

namespace pmhash::bench {

// ---- Results ------------------------------------------------------------------------

uint32_t SampleEvery(const BenchConfig& config, uint64_t total_ops) {
  if (config.sample_every != 0) return config.sample_every;
  return total_ops <= kTimeEveryOpUpTo ? 1 : kSampleStride;
}

double MeasureTimerOverheadNs() {
  constexpr int kRounds = 101, kPerRound = 1000;
  std::vector<double> rounds;
  rounds.reserve(kRounds);
  const double ticks_per_ns = TicksPerNs();
  for (int r = 0; r < kRounds; ++r) {
    uint64_t sum = 0;
    for (int i = 0; i < kPerRound; ++i) {
      const uint64_t t0 = Ticks();
      sum += Ticks() - t0;
    }
    rounds.push_back(static_cast<double>(sum) / kPerRound / ticks_per_ns);
  }
  std::nth_element(rounds.begin(), rounds.begin() + kRounds / 2, rounds.end());
  return rounds[kRounds / 2];
}

Json PhaseResult::ToJson() const {
  const double n = ops > 0 ? static_cast<double>(ops) : 1;
  Json j = Json::Object();
  j.Set("run", run);
  j.Set("engine", engine);
  j.Set("threads", threads);
  j.Set("phase", phase);
  j.Set("phase_index", phase_index);
  j.Set("ops", ops);
  j.Set("seconds", seconds);
  j.Set("mops", mops());
  Json lat = Json::Object();
  const bool have = samples > 0;
  lat.Set("p50", NumberOrNull(have, p50));
  lat.Set("p90", NumberOrNull(have, p90));
  lat.Set("p99", NumberOrNull(have, p99));
  lat.Set("p999", NumberOrNull(have, p999));
  lat.Set("p9999", NumberOrNull(have, p9999));
  lat.Set("mean", NumberOrNull(have, mean));
  lat.Set("max", NumberOrNull(have, max));
  lat.Set("samples", samples);
  lat.Set("sample_every", uint64_t{sample_every});
  j.Set("latency_ns", lat);
  const bool any = ops > 0;
  j.Set("flushes_per_op", NumberOrNull(any, delta.flushes / n));
  j.Set("fences_per_op", NumberOrNull(any, delta.fences / n));
  j.Set("pm_bytes_written_per_op", NumberOrNull(any, delta.bytes_stored / n));
  j.Set("media_writes_per_op", NumberOrNull(any && media_known, delta.media_writes / n));
  j.Set("media_write_amp",
        NumberOrNull(media_known && delta.bytes_stored > 0,
                     static_cast<double>(delta.media_writes) * 256 / delta.bytes_stored));
  j.Set("pm_lines_read_per_op", NumberOrNull(any && lines_read_known, delta.lines_read / n));
  j.Set("load_factor", NumberOrNull(load_factor_known, load_factor));
  j.Set("pm_bytes", pm_bytes);
  j.Set("dram_bytes", dram_bytes);
  j.Set("recovery_ms", recovery_ms ? Json(*recovery_ms) : Json());
  // Beyond the contract: what a reader needs to trust the figures.
  j.Set("count", count);
  j.Set("key_slots", key_slots);
  j.Set("redundant_flushes_per_op",
        NumberOrNull(any && redundancy_known, delta.redundant_flushes / n));
  j.Set("redundant_fences_per_op",
        NumberOrNull(any && redundancy_known, delta.redundant_fences / n));
  j.Set("recovery_open_ms", recovery_open_ms ? Json(*recovery_open_ms) : Json());
  j.Set("reopen_ms", reopen_ms ? Json(*reopen_ms) : Json());
  j.Set("false_positive_rate", false_positive_rate ? Json(*false_positive_rate) : Json());
  Json counters = Json::Object();
  for (const auto& [name, value] : engine_counters) counters.Set(name, value);
  j.Set("engine_counters", counters);
  if (cdf.empty()) {
    j.Set("latency_cdf", Json());
  } else {
    Json cq = Json::Array(), cns = Json::Array();
    for (const auto& [q, ns] : cdf) {
      cq.Push(q);
      cns.Push(ns);
    }
    Json c = Json::Object();
    c.Set("quantiles", cq);
    c.Set("ns", cns);
    j.Set("latency_cdf", c);
  }
  j.Set("errors", errors);
  j.Set("first_error", first_error.empty() ? Json() : Json(first_error));
  j.Set("checksum", checksum);
  j.Set("mapping", mapping);
  j.Set("note", note.empty() ? Json() : Json(note));
  return j;
}

// ---- Environment --------------------------------------------------------------------

BenchEnv DefaultEnv() {
  BenchEnv env;
  env.open = [](const Options& o, std::unique_ptr<Index>* index) { return Open(o, index); };
  env.open_on_pool = [](const Options& o, std::unique_ptr<pm::Pool> pool,
                        pm::PersistObserver* observer, std::unique_ptr<Index>* index) {
    const engines::EngineRegistration* reg = engines::FindEngine(o.engine);
    if (reg == nullptr) return engines::UnknownEngine(o.engine);
    return engines::OpenEngine(reg->make(), std::move(pool), /*fresh=*/true, o, observer,
                               index);
  };
  env.warn = [](const std::string& w) {
    std::fprintf(stderr, "pmhash bench: warning: %s\n", w.c_str());
  };
  env.engines = [] {
    std::vector<std::string> names;
    for (const EngineDescription& e : RegisteredEngines()) names.push_back(e.name);
    return names;
  };
  env.out = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  env.err = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  return env;
}

// ---- Pool files and cleanup ---------------------------------------------------------

namespace {

constexpr int kMaxCleanup = 4;
char g_cleanup[kMaxCleanup][1024];  // paths of pools in use (signal handler unlinks them)

void OnSignal(int sig) {
  for (auto& path : g_cleanup) {
    if (path[0] != '\0') ::unlink(path);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void TrackPool(const std::string& path) {
  for (auto& slot : g_cleanup) {
    if (slot[0] == '\0' && path.size() < sizeof(slot)) {
      std::memcpy(slot, path.c_str(), path.size() + 1);
      return;
    }
  }
}

void ForgetPool(const std::string& path) {
  if (path.empty()) return;
  ::unlink(path.c_str());
  for (auto& slot : g_cleanup) {
    if (path == slot) slot[0] = '\0';
  }
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// "" for a DRAM pool.
Status PoolPath(const BenchConfig& config, const std::string& suffix, std::string* path) {
  static std::atomic<int> counter{0};
  if (config.pool == "dram") {
    path->clear();
    return Status::OK();
  }
  std::string dir = config.pool;
  if (dir.empty()) dir = IsDirectory("/dev/shm") ? "/dev/shm" : "/tmp";
  if (IsDirectory(dir)) {
    *path = dir + "/pmhash-bench-" + std::to_string(::getpid()) + "-" +
            std::to_string(counter.fetch_add(1)) + suffix + ".pool";
  } else {
    *path = config.pool + suffix;
  }
  if (Exists(*path)) {
    return Status::AlreadyExists("--pool " + *path +
                                 " exists; the benchmark needs a fresh pool (remove it, or "
                                 "pass a directory)");
  }
  return Status::OK();
}

}  // namespace

void InstallCleanupHandler() {
  ::signal(SIGINT, OnSignal);
  ::signal(SIGTERM, OnSignal);
}

uint64_t EstimatePoolSize(const BenchConfig& config, uint64_t keys) {
  const bool inline_kv = config.key_size == 8 && config.value_size.fixed() &&
                         config.value_size.min == 8;
  // Out-of-line record: lengths + key + value, in the allocator's size classes.
  uint64_t record = 0;
  if (!inline_kv) {
    record = 8 + config.key_size + config.value_size.max;
    record = record < 64 ? (record + 15) / 16 * 16 : record < 256 ? (record + 63) / 64 * 64
                                                                  : (record + 255) / 256 * 256;
  }
  // Tables: slots of 16 bytes plus metadata, at a load factor as low as 1/4 after a
  // doubling, with the old table alive while the new one fills.
  const uint64_t table = keys * 32 * 4;
  uint64_t size = table + keys * record * 5 / 4 + (64ull << 20);
  size = (size + (2ull << 20) - 1) / (2ull << 20) * (2ull << 20);
  return std::clamp<uint64_t>(size, pm::kMinPoolSize, pm::kMaxPoolSize);
}

// ---- Validation ---------------------------------------------------------------------

Status ValidateConfig(const BenchConfig& config) {
  const bool lf = config.load_factor.has_value();
  uint64_t live = 0;  // keys present, when known without opening (load mode)
  bool loaded = lf;
  const uint64_t ops = config.measured_ops();
  for (size_t pos = 0; pos < config.phases.size(); ++pos) {
    const Phase p = config.phases[pos];
    switch (p) {
      case Phase::kPrefill:
        if (pos != 0 || !lf) {
          return Status::InvalidArgument(
              "--phases: prefill (the fill to --load-factor, as a row) must come first and "
              "needs --load-factor");
        }
        break;
      case Phase::kLoad:
        loaded = true;
        live += lf ? ops : config.records;
        break;
      case Phase::kSearch:
      case Phase::kUpdate:
      case Phase::kDelete:
        if (!loaded) {
          return Status::InvalidArgument(std::string("--phases: ") + PhaseName(p) +
                                         " needs keys: put load before it (or use "
                                         "--load-factor)");
        }
        if (p == Phase::kDelete) {
          if (!lf && ops > live) {
            return Status::InvalidArgument(
                "--phases: delete of " + std::to_string(ops) + " keys but only " +
                std::to_string(live) + " are present (lower --ops or raise --records)");
          }
          live -= std::min(live, ops);
          if (!lf && live == 0) loaded = false;
        }
        break;
      case Phase::kMixed:
        if ((config.mix.search > 0 || config.mix.update > 0) && !loaded) {
          return Status::InvalidArgument(
              "--phases: mixed searches or updates keys: put load before it");
        }
        live += ops * config.mix.insert / 100;
        break;
      case Phase::kNegative:
      case Phase::kFill:
        break;
    }
  }
  return Status::OK();
}

// ---- Workers ------------------------------------------------------------------------

namespace {

enum class OpKind : uint8_t { kInsert, kSearch, kNegative, kUpdate, kDelete };

// One thread's operations, generated before the timed part.
struct ThreadPlan {
  uint64_t n = 0;
  std::vector<char> keys;          // n * key_size
  std::vector<uint32_t> voff;      // value offsets into the ValuePool (inserts, updates)
  std::vector<uint32_t> vsize;     // value sizes when they vary
  std::vector<uint8_t> kinds;      // per operation (mixed) or empty
  OpKind kind = OpKind::kSearch;
  uint32_t sample_offset = 0;      // the first timed operation (RunWorkers sets it)
};

struct alignas(64) ThreadOutcome {
  std::atomic<uint64_t> done{0};  // progress, updated every 1024 operations
  Latencies lat;
  uint64_t errors = 0, checksum = 0, attempted = 0;
  std::string first_error;
  bool refused = false;
  std::chrono::steady_clock::time_point end;
};

struct Measured {
  uint64_t ops = 0;
  double seconds = 0;
  uint32_t sample_every = 1;
  Latencies lat;
  uint64_t errors = 0, checksum = 0;
  std::string first_error;
  bool refused = false;
  std::string refusal;
};

struct WorkerContext {
  Index* index;
  const ValuePool* values;
  size_t key_size;
  size_t fixed_value;  // 0: sizes vary
  bool stop_on_refusal;
  std::atomic<bool>* stop;
  std::atomic<int>* ready;
  std::atomic<bool>* go;
  double ticks_per_ns;
  uint32_t sample_every;  // time 1 operation in this many (1: all)
};

void Worker(const WorkerContext& ctx, const ThreadPlan& plan, ThreadOutcome* out) {
  const uint64_t n = plan.n;
  // Sampling (runner.h): operations next_sample, next_sample + every, ... are timed.
  const uint64_t every = ctx.sample_every;
  uint64_t next_sample = plan.sample_offset % every;
  std::string value;
  value.reserve(1024);
  uint64_t checksum = 0, errors = 0;
  const char* keys = plan.keys.data();
  const bool mixed = !plan.kinds.empty();
  const bool fixed = ctx.fixed_value != 0;

  ctx.ready->fetch_add(1);
  while (!ctx.go->load(std::memory_order_acquire)) {
  }
  uint64_t i = 0;
  for (; i < n; ++i) {
    if (ctx.stop_on_refusal && ctx.stop->load(std::memory_order_relaxed)) break;
    const std::string_view key(keys + i * ctx.key_size, ctx.key_size);
    const OpKind kind = mixed ? static_cast<OpKind>(plan.kinds[i]) : plan.kind;
    const bool sample = i == next_sample;
    const uint64_t t0 = sample ? Ticks() : 0;
    Status s;
    bool ok = false;
    switch (kind) {
      case OpKind::kInsert:
      case OpKind::kUpdate: {
        const std::string_view v(ctx.values->data() + plan.voff[i],
                                 fixed ? ctx.fixed_value : plan.vsize[i]);
        s = kind == OpKind::kInsert ? ctx.index->Insert(key, v) : ctx.index->Update(key, v);
        ok = s.ok();
        break;
      }
      case OpKind::kSearch:
      case OpKind::kNegative: {
        s = ctx.index->Get(key, &value);
        if (s.ok()) {
          uint64_t w = 0;
          std::memcpy(&w, value.data(), value.size() < 8 ? value.size() : 8);
          checksum += w ^ value.size();
        }
        ok = kind == OpKind::kSearch ? s.ok() : s.IsNotFound();
        if (kind == OpKind::kNegative && s.ok()) {
          s = Status::Corruption("a key that was never inserted was found");
        }
        break;
      }
      case OpKind::kDelete:
        s = ctx.index->Delete(key);
        ok = s.ok();
        break;
    }
    if (sample) {
      out->lat.Record(static_cast<uint64_t>(static_cast<double>(Ticks() - t0) / ctx.ticks_per_ns));
      next_sample += every;
    }
    if (!ok) {
      if (ctx.stop_on_refusal && kind == OpKind::kInsert && s.IsResourceExhausted()) {
        out->refused = true;
        out->first_error = s.ToString();
        ctx.stop->store(true, std::memory_order_relaxed);
        ++i;
        break;
      }
      if (errors++ == 0) out->first_error = s.ToString();
    }
    if ((i & 1023) == 0) out->done.store(i, std::memory_order_relaxed);
  }
  out->end = std::chrono::steady_clock::now();
  out->attempted = i;
  out->done.store(i, std::memory_order_relaxed);
  out->errors = errors;
  out->checksum = checksum;
}

// Runs the plans on plans.size() threads from a common start; returns the merged figures.
// `every`: the sampling rate; 0 = SampleEvery(config, operations in the plans).
Measured RunWorkers(Index* index, const ValuePool& values, const BenchConfig& config,
                    std::vector<ThreadPlan>& plans, bool stop_on_refusal,
                    const BenchEnv& env, const std::string& label, uint32_t every = 0) {
  const size_t t = plans.size();
  uint64_t total = 0;
  for (const ThreadPlan& p : plans) total += p.n;
  if (every == 0) every = SampleEvery(config, total);
  for (size_t i = 0; i < t; ++i) {
    // A seeded random start per thread, so that the timed operations are not always the
    // same positions of every thread's stream.
    plans[i].sample_offset =
        static_cast<uint32_t>(Mix64(config.seed ^ (total * 0x9e3779b97f4a7c15ull) ^ (i + 1)) % every);
  }
  std::vector<ThreadOutcome> outcomes(t);
  std::atomic<bool> stop{false}, go{false};
  std::atomic<int> ready{0};
  WorkerContext ctx{index,
                    &values,
                    config.key_size,
                    config.value_size.fixed() ? config.value_size.min : 0,
                    stop_on_refusal,
                    &stop,
                    &ready,
                    &go,
                    TicksPerNs(),
                    every};
  // A fixed value size of 0 bytes would read as "varies": keep the sizes array then.
  if (config.value_size.fixed() && config.value_size.min == 0) ctx.fixed_value = 0;
  std::vector<std::thread> threads;
  threads.reserve(t);
  for (size_t i = 0; i < t; ++i) {
    threads.emplace_back(Worker, std::cref(ctx), std::cref(plans[i]), &outcomes[i]);
  }
  while (ready.load() < static_cast<int>(t)) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  // Report progress until every thread has finished.
  while (env.progress) {
    uint64_t done = 0;
    for (const ThreadOutcome& o : outcomes) done += o.done.load(std::memory_order_relaxed);
    env.progress(label, done, total);
    if (done >= total || stop.load()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& th : threads) th.join();
  Measured m;
  m.sample_every = every;
  auto end = start;
  for (ThreadOutcome& o : outcomes) {
    end = std::max(end, o.end);
    m.lat.Merge(o.lat);
    m.ops += o.attempted;
    m.errors += o.errors;
    m.checksum += o.checksum;
    if (o.refused && !m.refused) {
      m.refused = true;
      m.refusal = o.first_error;
    } else if (!o.first_error.empty() && m.first_error.empty() && !o.refused) {
      m.first_error = o.first_error;
    }
  }
  m.seconds = std::chrono::duration<double>(end - start).count();
  if (env.progress) env.progress(label, total, total);
  return m;
}

// ---- Plans --------------------------------------------------------------------------

// Live positive keys are the indices [lo, hi).
struct KeyState {
  uint64_t lo = 0, hi = 0;
  uint64_t live() const { return hi - lo; }
};

uint64_t ThreadSeed(uint64_t seed, size_t phase_pos, size_t thread) {
  return Mix64(seed * 0x100000001b3ull + phase_pos * 0x10001 + thread + 1);
}

// Splits n into t nearly equal parts.
uint64_t Share(uint64_t n, size_t t, size_t i) { return n / t + (i < n % t ? 1 : 0); }

class Planner {
 public:
  Planner(const BenchConfig& config, const KeySpace& keys, const ValuePool& values)
      : config_(config), keys_(keys), values_(values) {}

  void Begin(ThreadPlan* plan, uint64_t n, OpKind kind, bool with_values) const {
    plan->n = n;
    plan->kind = kind;
    plan->keys.resize(n * config_.key_size);
    if (with_values) {
      plan->voff.resize(n);
      if (!config_.value_size.fixed() || config_.value_size.min == 0) plan->vsize.resize(n);
    }
  }
  void Put(ThreadPlan* plan, uint64_t i, uint64_t index, bool value, uint64_t salt,
           Rng& rng) const {
    keys_.Write(index, plan->keys.data() + i * config_.key_size);
    if (value) {
      plan->voff[i] = values_.Offset(salt);
      if (!plan->vsize.empty()) {
        const ValueSizeSpec& vs = config_.value_size;
        plan->vsize[i] = static_cast<uint32_t>(vs.min + rng.Below(vs.max - vs.min + 1));
      }
    }
  }

  // Inserts of the new keys [first, first + n), split contiguously across threads.
  std::vector<ThreadPlan> Inserts(uint64_t first, uint64_t n, size_t threads,
                                  size_t phase_pos) const {
    std::vector<ThreadPlan> plans(threads);
    uint64_t next = first;
    for (size_t t = 0; t < threads; ++t) {
      const uint64_t m = Share(n, threads, t);
      Rng rng(ThreadSeed(config_.seed, phase_pos, t));
      Begin(&plans[t], m, OpKind::kInsert, true);
      for (uint64_t i = 0; i < m; ++i) Put(&plans[t], i, next + i, true, next + i, rng);
      next += m;
    }
    return plans;
  }

  // Deletes of [first, first + n) (distinct keys; order is the key index order, which
  // is random over the keys unless keys are sequential).
  std::vector<ThreadPlan> Deletes(uint64_t first, uint64_t n, size_t threads,
                                  size_t phase_pos) const {
    std::vector<ThreadPlan> plans(threads);
    uint64_t next = first;
    for (size_t t = 0; t < threads; ++t) {
      const uint64_t m = Share(n, threads, t);
      Rng rng(ThreadSeed(config_.seed, phase_pos, t));
      Begin(&plans[t], m, OpKind::kDelete, false);
      for (uint64_t i = 0; i < m; ++i) Put(&plans[t], i, next + i, false, 0, rng);
      next += m;
    }
    return plans;
  }

  // Searches, negative searches, updates or a mix; keys drawn from --dist over `live`.
  std::vector<ThreadPlan> Draws(const KeyState& live, uint64_t n, size_t threads,
                                size_t phase_pos, OpKind kind, const Mix* mix,
                                uint64_t insert_first, uint64_t* inserts_total) const {
    std::vector<ThreadPlan> plans(threads);
    uint64_t insert_next = insert_first;
    for (size_t t = 0; t < threads; ++t) {
      const uint64_t m = Share(n, threads, t);
      ThreadPlan& plan = plans[t];
      Rng rng(ThreadSeed(config_.seed, phase_pos, t));
      const bool values = kind == OpKind::kUpdate || mix != nullptr;
      Begin(&plan, m, kind, values);
      std::unique_ptr<IndexGenerator> gen;
      if (live.live() > 0) {
        gen = MakeGenerator(config_.dist, live.live(), live.live() / threads * t);
      }
      if (mix != nullptr) {
        plan.kinds.resize(m);
        for (uint64_t i = 0; i < m; ++i) {
          const uint64_t r = rng.Below(100);
          OpKind k = r < static_cast<uint64_t>(mix->search) ? OpKind::kSearch
                     : r < static_cast<uint64_t>(mix->search + mix->update) ? OpKind::kUpdate
                     : r < static_cast<uint64_t>(mix->search + mix->update + mix->insert)
                         ? OpKind::kInsert
                         : OpKind::kNegative;
          plan.kinds[i] = static_cast<uint8_t>(k);
        }
      }
      for (uint64_t i = 0; i < m; ++i) {
        const OpKind k = mix != nullptr ? static_cast<OpKind>(plan.kinds[i]) : kind;
        switch (k) {
          case OpKind::kSearch:
          case OpKind::kUpdate: {
            const uint64_t index = live.lo + gen->Next(rng);
            Put(&plan, i, index, k == OpKind::kUpdate,
                index * 0x9e3779b97f4a7c15ull + phase_pos + 1, rng);
            break;
          }
          case OpKind::kNegative:
            Put(&plan, i, kNegativeBit | (rng.Next() >> 1), false, 0, rng);
            break;
          case OpKind::kInsert:
            Put(&plan, i, insert_next, true, insert_next, rng);
            ++insert_next;
            break;
          case OpKind::kDelete:
            break;
        }
      }
    }
    if (inserts_total != nullptr) *inserts_total = insert_next - insert_first;
    return plans;
  }

 private:
  const BenchConfig& config_;
  const KeySpace& keys_;
  const ValuePool& values_;
};

PersistCounters Minus(const PersistCounters& a, const PersistCounters& b) {
  PersistCounters d;
  d.flushes = a.flushes - b.flushes;
  d.fences = a.fences - b.fences;
  d.bytes_stored = a.bytes_stored - b.bytes_stored;
  d.media_writes = a.media_writes - b.media_writes;
  d.lines_read = a.lines_read - b.lines_read;
  d.redundant_flushes = a.redundant_flushes - b.redundant_flushes;
  d.redundant_fences = a.redundant_fences - b.redundant_fences;
  return d;
}

// Merges a second run of the same phase into the first (fill: refused in step 2).
void Accumulate(const Measured& more, Measured* m) {
  m->ops += more.ops;
  m->seconds += more.seconds;
  m->lat.Merge(more.lat);
  m->errors += more.errors;
  m->checksum += more.checksum;
  if (m->first_error.empty()) m->first_error = more.first_error;
  m->refused = more.refused;
  m->refusal = more.refusal;
}

void FillFromMeasured(const Measured& m, PhaseResult* r) {
  r->ops = m.ops;
  r->seconds = m.seconds;
  r->samples = m.lat.count();
  r->sample_every = m.sample_every;
  r->p50 = m.lat.Percentile(0.50);
  r->p90 = m.lat.Percentile(0.90);
  r->p99 = m.lat.Percentile(0.99);
  r->p999 = m.lat.Percentile(0.999);
  r->p9999 = m.lat.Percentile(0.9999);
  r->mean = m.lat.Mean();
  r->max = m.lat.Max();
  r->cdf = m.lat.Cdf();
  r->errors = m.errors;
  r->first_error = m.first_error;
  r->checksum = m.checksum;
}

uint64_t CounterOr0(const IndexStats& s, const char* name) {
  const auto it = s.engine_counters.find(name);
  return it == s.engine_counters.end() ? 0 : it->second;
}

void FillFromStats(const BenchConfig& config, const IndexStats& before, const IndexStats& after,
                   PhaseResult* r) {
  r->delta = Minus(after.persist, before.persist);
  r->media_known = config.persist == PersistMode::kAdr;
  r->redundancy_known = config.redundancy;
  r->lines_read_known = after.persist.lines_read > 0;
  r->count = after.count;
  r->key_slots = after.key_slots;
  r->load_factor_known = after.key_slots > 0;
  r->load_factor = after.load_factor;
  r->pm_bytes = after.pm_bytes;
  r->dram_bytes = after.dram_bytes;
  r->mapping = after.mapping;
  r->engine_counters = after.engine_counters;
  // A filtered engine (smartht) counts the absent keys its filter answered and those it
  // let through to PM: in a phase of absent keys that is the filter's false-positive rate.
  if (r->phase == "negative" && after.engine_counters.count("filter_negatives") != 0 &&
      after.engine_counters.count("filter_false_positives") != 0) {
    const uint64_t neg = CounterOr0(after, "filter_negatives") -
                         CounterOr0(before, "filter_negatives");
    const uint64_t fp = CounterOr0(after, "filter_false_positives") -
                        CounterOr0(before, "filter_false_positives");
    if (neg + fp > 0) r->false_positive_rate = static_cast<double>(fp) / (neg + fp);
  }
}

// Background work an operation started (wophi's PAB refill, smartht's filter rebuild)
// finishes before the phase's counters are read, outside the timed part.
void Quiesce(Index* index) {
  if (auto* eng = dynamic_cast<engines::Engine*>(index)) eng->WaitForBackgroundWork();
}

Options BaseOptions(const BenchConfig& config, const std::string& engine) {
  Options o;
  o.engine = engine;
  o.persist = config.persist;
  o.flush = config.flush;
  o.write_latency_ns = config.write_latency_ns;
  o.initial_capacity = config.records;
  o.count_stats = true;
  o.create_if_missing = true;
  o.error_if_exists = true;
  // "engine:name=value" applies to that engine only; "name=value" to every engine.
  for (const auto& [name, value] : config.engine_options) {
    const size_t colon = name.find(':');
    if (colon == std::string::npos) {
      o.engine_options[name] = value;
    } else if (name.compare(0, colon, engine) == 0 && colon == engine.size()) {
      o.engine_options[name.substr(colon + 1)] = value;
    }
  }
  return o;
}

// An open pool file that is removed when the run ends, whatever happens.
class PoolGuard {
 public:
  explicit PoolGuard(std::string path) : path_(std::move(path)) {
    if (!path_.empty()) TrackPool(path_);
  }
  ~PoolGuard() { ForgetPool(path_); }
  PoolGuard(const PoolGuard&) = delete;
  PoolGuard& operator=(const PoolGuard&) = delete;

 private:
  std::string path_;
};

// An index, and under --redundancy the crash simulator observing its pool. The simulator
// must outlive the index (the index's persister calls it until the index is gone).
struct OpenedIndex {
  std::unique_ptr<pm::CrashSim> sim;
  std::unique_ptr<Index> index;

  OpenedIndex() = default;
  OpenedIndex(const OpenedIndex&) = delete;
  OpenedIndex& operator=(const OpenedIndex&) = delete;
  ~OpenedIndex() { index.reset(); }
  Index* get() const { return index.get(); }
};

// The pool size for `keys` keys; under --redundancy capped (the simulator shadows it).
uint64_t PoolSizeFor(const BenchConfig& config, uint64_t keys) {
  if (config.pool_size != 0) return config.pool_size;
  const uint64_t size = EstimatePoolSize(config, keys);
  return config.redundancy ? std::min(size, kDefaultRedundancyPool) : size;
}

// Opens a fresh index with options `o` (o.path set, or empty for DRAM). Under
// --redundancy: a DRAM pool with a CrashSim attached that reports redundant flushes and
// fences to the engine's counters (no crash hook).
Status OpenFresh(const BenchConfig& config, const BenchEnv& env, const Options& o,
                 OpenedIndex* out) {
  if (!config.redundancy) return env.open(o, &out->index);
  if (!env.open_on_pool) return Status::InvalidArgument("--redundancy is not available here");
  std::unique_ptr<pm::Pool> pool;
  PMHASH_RETURN_IF_ERROR(pm::Pool::CreateDram(o.engine, o.pool_size, &pool));
  out->sim = std::make_unique<pm::CrashSim>(pool->base(), pool->size(), config.persist);
  PMHASH_RETURN_IF_ERROR(env.open_on_pool(o, std::move(pool), out->sim.get(), &out->index));
  auto* eng = dynamic_cast<engines::Engine*>(out->index.get());
  if (eng == nullptr) {
    return Status::InvalidArgument("--redundancy: engine " + o.engine +
                                   " is not an engines::Engine");
  }
  out->sim->ReportTo(&eng->persister());
  return Status::OK();
}

std::string Describe(const std::string& engine, int threads, const char* what) {
  return engine + " t" + std::to_string(threads) + " " + what;
}

std::string Num(uint64_t v) { return std::to_string(v); }

std::string Fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// `fill`: a fresh index sized for --records keys, resizing off where the engine accepts
// it, filled until the first refused insert. Every figure of the row (ops, time, latency,
// persistence, load factor) comes from one span of inserts:
//  * step 1 inserts --records keys;
//  * if the engine's key slots grew during step 1 although resize=off, it allocates
//    slots on demand (chained: wophi's PAB, smartht's chain buckets) and never refuses
//    for want of slots: the row is step 1 (the load factor after --records keys, as
//    DESIGN.md says for chained engines), with a note;
//  * otherwise step 2 inserts up to (free key slots + 1024) more keys, which a table of
//    fixed size must refuse within; refused: the row is steps 1 + 2, at the refusal;
//    not refused (the slots grew after all): the row is step 1 again, with a note.
Status RunFill(const BenchConfig& config, const BenchEnv& env, const std::string& engine,
               int threads, size_t phase_pos, const KeySpace& keys, const ValuePool& values,
               PhaseResult* r) {
  std::string path;
  PMHASH_RETURN_IF_ERROR(PoolPath(config, ".fill", &path));
  Options o = BaseOptions(config, engine);
  o.path = config.redundancy ? std::string() : path;
  o.pool_size = PoolSizeFor(config, 2 * config.records);
  const auto given = o.engine_options.find("resize");
  const bool user_resize = given != o.engine_options.end();
  bool resize_off = !user_resize || given->second == "off" || given->second == "false" ||
                    given->second == "0" || given->second == "no";
  if (!user_resize) o.engine_options["resize"] = "off";
  PoolGuard guard(config.redundancy ? std::string() : path);
  OpenedIndex opened;
  Status s = OpenFresh(config, env, o, &opened);
  if (!s.ok() && !user_resize && s.IsInvalidArgument() &&
      s.message().find("resize") != std::string::npos) {
    // The engine has no such option: it never refuses for want of a resize (chained),
    // or it always resizes.
    resize_off = false;
    o.engine_options.erase("resize");
    opened.index.reset();
    opened.sim.reset();
    s = OpenFresh(config, env, o, &opened);
  }
  PMHASH_RETURN_IF_ERROR(s);
  Index* index = opened.get();
  const Planner planner(config, keys, values);
  Quiesce(index);
  const IndexStats before = index->Stats();
  // Step 1: --records keys.
  std::vector<ThreadPlan> plans = planner.Inserts(0, config.records, threads, phase_pos);
  Measured m = RunWorkers(index, values, config, plans, true, env,
                          Describe(engine, threads, "fill"));
  plans.clear();
  Quiesce(index);
  const IndexStats after_load = index->Stats();
  const bool by_pool1 = m.refused && m.refusal.find("pool full") != std::string::npos;
  const bool grew1 = after_load.key_slots > before.key_slots;

  // The row's span: step 1 unless step 2 ends in a refusal by the table.
  const Measured* row_m = &m;
  const IndexStats* row_after = &after_load;
  Measured both;
  IndexStats after;
  std::string note;
  if (m.refused && !by_pool1) {
    note = "first refused insert: " + m.refusal;
  } else if (by_pool1) {
    note = "the pool filled after " + Num(after_load.count) +
           " keys, before the table refused (raise --pool-size); load factor there";
  } else if (!resize_off) {
    note = user_resize ? "resize set by --opt; load factor after --records keys"
                       : "engine has no resize=off option; load factor after --records keys";
  } else if (grew1) {
    note = "never refuses: its key slots grew from " + Num(before.key_slots) + " to " +
           Num(after_load.key_slots) +
           " during the inserts although resize=off (slots allocated on demand, as a "
           "chained table does); load factor after --records keys";
  } else {
    // Step 2: a table of fixed size must refuse within its free slots (+ a margin).
    const uint64_t free_slots =
        after_load.key_slots > after_load.count ? after_load.key_slots - after_load.count : 0;
    const uint64_t extra = free_slots + 1024;
    plans = planner.Inserts(config.records, extra, threads, phase_pos + 1000);
    // The same sampling rate as step 1, so that merged percentiles weigh both alike.
    Measured m2 = RunWorkers(index, values, config, plans, true, env,
                             Describe(engine, threads, "fill"), m.sample_every);
    plans.clear();
    Quiesce(index);
    after = index->Stats();
    const bool by_pool2 = m2.refused && m2.refusal.find("pool full") != std::string::npos;
    if (m2.refused && !by_pool2) {
      both = m;
      Accumulate(m2, &both);
      row_m = &both;
      row_after = &after;
      note = "first refused insert: " + m2.refusal;
    } else {
      note = (by_pool2 ? "the pool filled before the table refused"
                       : "did not refuse within " + Num(extra) +
                             " more inserts (its key slots grew from " +
                             Num(after_load.key_slots) + " to " + Num(after.key_slots) + ")") +
             "; every figure is from the first --records inserts (load factor after load)";
    }
  }
  FillFromMeasured(*row_m, r);
  FillFromStats(config, before, *row_after, r);
  r->note = note;
  return index->Close();
}

}  // namespace

// ---- One engine ---------------------------------------------------------------------

Status RunEngine(const BenchConfig& config, const BenchEnv& env, const std::string& engine,
                 int threads, std::vector<PhaseResult>* results) {
  PMHASH_RETURN_IF_ERROR(ValidateConfig(config));
  const bool sequential = config.dist.kind == DistSpec::Kind::kSequential;
  const KeySpace keys(config.key_size, sequential);
  const ValuePool values(config.value_size.max, config.seed);
  const Planner planner(config, keys, values);
  const uint64_t ops = config.measured_ops();
  const size_t first_result = results->size();
  const std::string sim_note =
      config.redundancy ? "under the crash simulator (--redundancy): throughput and latency "
                          "are meaningless, the redundant flush/fence counts are the result"
                        : "";
  auto add_note = [](std::string* note, const std::string& more) {
    if (more.empty()) return;
    *note += (note->empty() ? "" : "; ") + more;
  };

  bool needs_main = false;
  for (Phase p : config.phases) needs_main = needs_main || p != Phase::kFill;

  std::string path;
  OpenedIndex opened;
  Options options = BaseOptions(config, engine);
  if (needs_main && !config.redundancy) {
    PMHASH_RETURN_IF_ERROR(PoolPath(config, "", &path));
    options.path = path;
  }
  options.pool_size = PoolSizeFor(config, 2 * config.records + 2 * ops);
  PoolGuard guard(path);
  if (needs_main) {
    PMHASH_RETURN_IF_ERROR(OpenFresh(config, env, options, &opened));
  }

  KeyState state;
  std::string lf_note;  // on every row measured at --load-factor
  // --load-factor F: fill (untimed) to F x the key slots of the index as created for
  // --records keys. A chained engine's slots grow as keys go in (wophi's PAB, smartht's
  // chain buckets), so the target is fixed when the fill starts: the fill always ends,
  // and the note says where the load factor ended up.
  if (needs_main && config.load_factor) {
    const double f = *config.load_factor;
    Quiesce(opened.get());
    const IndexStats created = opened.get()->Stats();
    if (created.key_slots == 0) {
      return Status::InvalidArgument("engine " + engine +
                                     " reports no key slots, so --load-factor cannot be "
                                     "reached");
    }
    const uint64_t target =
        static_cast<uint64_t>(std::ceil(f * static_cast<double>(created.key_slots)));
    const uint64_t need = target > created.count ? target - created.count : 0;
    std::vector<ThreadPlan> plans = planner.Inserts(0, need, threads, 100000);
    Measured m = RunWorkers(opened.get(), values, config, plans, false, env,
                            Describe(engine, threads, "prefill"));
    plans.clear();
    Quiesce(opened.get());
    const IndexStats filled = opened.get()->Stats();
    if (m.errors > 0) {
      return Status::ResourceExhausted("engine " + engine + " refused an insert while "
                                       "filling to load factor " + Fixed(f, 2) + ": " +
                                       m.first_error);
    }
    state.hi = need;
    if (filled.key_slots != created.key_slots) {
      lf_note = "--load-factor " + Fixed(f, 2) + ": filled to " + Num(need) + " keys = " +
                Fixed(f, 2) + " x the " + Num(created.key_slots) +
                " key slots of the index as created; its key slots grew to " +
                Num(filled.key_slots) + " meanwhile, so the load factor reached is " +
                Fixed(filled.load_factor, 3);
    }
    if (!config.phases.empty() && config.phases[0] == Phase::kPrefill) {
      PhaseResult r;
      r.run = config.label;
      r.engine = engine;
      r.threads = threads;
      r.phase = PhaseName(Phase::kPrefill);
      r.phase_index = 0;
      FillFromMeasured(m, &r);
      FillFromStats(config, created, filled, &r);
      r.note = lf_note;
      add_note(&r.note, sim_note);
      results->push_back(std::move(r));
    }
  }

  for (size_t pos = 0; pos < config.phases.size(); ++pos) {
    const Phase phase = config.phases[pos];
    if (phase == Phase::kPrefill) continue;  // reported by the fill above
    PhaseResult r;
    r.run = config.label;
    r.engine = engine;
    r.threads = threads;
    r.phase = PhaseName(phase);
    r.phase_index = static_cast<int>(pos);
    if (phase == Phase::kFill) {
      PMHASH_RETURN_IF_ERROR(
          RunFill(config, env, engine, threads, pos, keys, values, &r));
      add_note(&r.note, sim_note);
      results->push_back(std::move(r));
      continue;
    }
    std::vector<ThreadPlan> plans;
    KeyState next = state;
    switch (phase) {
      case Phase::kLoad: {
        const uint64_t n = config.load_factor ? ops : config.records;
        plans = planner.Inserts(state.hi, n, threads, pos);
        next.hi += n;
        break;
      }
      case Phase::kSearch:
      case Phase::kUpdate:
        if (state.live() == 0) {
          return Status::InvalidArgument(std::string(PhaseName(phase)) + ": no keys present");
        }
        plans = planner.Draws(state, ops, threads, pos,
                              phase == Phase::kSearch ? OpKind::kSearch : OpKind::kUpdate,
                              nullptr, 0, nullptr);
        break;
      case Phase::kNegative:
        plans = planner.Draws(state, ops, threads, pos, OpKind::kNegative, nullptr, 0, nullptr);
        break;
      case Phase::kMixed: {
        if ((config.mix.search > 0 || config.mix.update > 0) && state.live() == 0) {
          return Status::InvalidArgument("mixed: no keys present");
        }
        uint64_t inserts = 0;
        plans = planner.Draws(state, ops, threads, pos, OpKind::kSearch, &config.mix,
                              state.hi, &inserts);
        next.hi += inserts;
        break;
      }
      case Phase::kDelete:
        if (ops > state.live()) {
          return Status::InvalidArgument("delete: --ops " + std::to_string(ops) +
                                         " exceeds the " + std::to_string(state.live()) +
                                         " keys present");
        }
        plans = planner.Deletes(state.lo, ops, threads, pos);
        next.lo += ops;
        break;
      case Phase::kFill:
      case Phase::kPrefill:
        break;
    }
    Quiesce(opened.get());
    const IndexStats before = opened.get()->Stats();
    Measured m = RunWorkers(opened.get(), values, config, plans, false, env,
                            Describe(engine, threads, PhaseName(phase)));
    plans.clear();
    // The timer has stopped; the engine's background work belongs to this phase.
    Quiesce(opened.get());
    const IndexStats after = opened.get()->Stats();
    FillFromMeasured(m, &r);
    FillFromStats(config, before, after, &r);
    r.note = lf_note;
    add_note(&r.note, sim_note);
    state = next;
    results->push_back(std::move(r));
  }

  if (!needs_main) return Status::OK();

  // Recovery: drop the index as a crash would and time the reopen; then (clean) close
  // it and time a clean reopen.
  std::optional<double> recovery, recovery_open, reopen;
  auto* eng = dynamic_cast<engines::Engine*>(opened.get());
  const bool file_pool = !path.empty() && eng != nullptr;
  Options reopen_options = options;
  reopen_options.error_if_exists = false;
  reopen_options.create_if_missing = false;
  auto reopen_timed = [&](const char* what, double* ms) -> Status {
    if (env.progress) env.progress(Describe(engine, threads, what), 0, 1);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = env.open(reopen_options, &opened.index);
    *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
              .count();
    if (env.progress) env.progress(Describe(engine, threads, what), 1, 1);
    return s;
  };
  if (config.recovery && file_pool) {
    const uint64_t count = opened.get()->Count();
    eng->Abandon();
    opened.index.reset();
    double open_ms = 0;
    Status s = reopen_timed("recovery", &open_ms);
    if (!s.ok()) {
      env.warn(engine + ": reopening after an unclean close failed: " + s.ToString());
    } else {
      const IndexStats st = opened.get()->Stats();
      recovery = st.recovered ? st.recovery_ms : open_ms;
      recovery_open = open_ms;
      if (opened.get()->Count() != count) {
        env.warn(engine + ": after recovery Count() is " + std::to_string(opened.get()->Count()) +
                 ", before the unclean close it was " + std::to_string(count));
      }
    }
  }
  if (config.clean_reopen && file_pool && opened.index != nullptr) {
    const uint64_t count = opened.get()->Count();
    Status s = opened.get()->Close();
    opened.index.reset();
    double open_ms = 0;
    if (s.ok()) s = reopen_timed("clean reopen", &open_ms);
    if (!s.ok()) {
      env.warn(engine + ": reopening after a clean close failed: " + s.ToString());
    } else {
      reopen = open_ms;
      if (opened.get()->Count() != count) {
        env.warn(engine + ": after a clean reopen Count() is " +
                 std::to_string(opened.get()->Count()) + ", before the close it was " +
                 std::to_string(count));
      }
    }
  }
  for (size_t i = first_result; i < results->size(); ++i) {
    if ((*results)[i].phase != "fill") {
      (*results)[i].recovery_ms = recovery;
      (*results)[i].recovery_open_ms = recovery_open;
      (*results)[i].reopen_ms = reopen;
    }
  }
  if (opened.index != nullptr) PMHASH_RETURN_IF_ERROR(opened.get()->Close());
  return Status::OK();
}

}  // namespace pmhash::bench
