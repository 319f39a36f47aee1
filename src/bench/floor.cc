#include "bench/floor.h"

#include <chrono>
#include <memory>

#include "bench/floor_engine.h"
#include "bench/index_setup.h"
#include "bench/keygen.h"
#include "bench/latency.h"
#include "bench/phase_stats.h"
#include "bench/pool_files.h"
#include "bench/threads.h"
#include "bench/workers.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/stats.h"

namespace pmhash::bench {

const char* FloorKindName(FloorKind kind) {
  switch (kind) {
    case FloorKind::kInsert: return "insert";
    case FloorKind::kDelete: return "delete";
    case FloorKind::kLookup: return "lookup";
    case FloorKind::kPrefetch: return "prefetch";
    case FloorKind::kDependent: return "dependent";
    case FloorKind::kApi: return "api";
  }
  return "?";
}

double FloorResult::mops(FloorKind kind) const {
  const double s = seconds[static_cast<size_t>(kind)];
  return s > 0 ? static_cast<double>(ops) / s / 1e6 : 0;
}

std::optional<FloorKind> FloorFor(const PhaseResult& row) {
  if (row.phase == "load" || row.phase == "prefill" || row.phase == "fill") {
    return FloorKind::kInsert;
  }
  if (row.phase == "delete") return FloorKind::kDelete;
  if (row.phase == "search" || row.phase == "negative") {
    return row.batch > 1 ? FloorKind::kPrefetch : FloorKind::kLookup;
  }
  return std::nullopt;
}

namespace {

constexpr uint64_t kBucket = 64;

// One thread's part of the table: buckets [first, first + count), and the random buckets
// its loops visit (drawn before the timing).
struct Slice {
  uint64_t first = 0, count = 0;
  std::vector<uint64_t> buckets;
  uint64_t checksum = 0;
};

// Uniform in [0, n) from a 64-bit word (multiply-shift).
inline uint64_t Below(uint64_t word, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(word) * n) >> 64);
}

inline uint64_t FirstWord(const char* bucket) {
  return *reinterpret_cast<const uint64_t*>(bucket);
}

// The loops; noinline so that each is the same machine code whatever calls it.
__attribute__((noinline)) void InsertLoop(pm::Persister& p, char* table, Slice& s) {
  uint64_t sum = 0;
  for (const uint64_t b : s.buckets) {
    char* bucket = table + b * kBucket;
    const uint64_t payload[2] = {FirstWord(bucket), b};
    sum += payload[0];
    p.Copy(bucket + 16, payload, sizeof(payload));
    p.Persist(bucket + 16, sizeof(payload));
  }
  s.checksum += sum;
}

__attribute__((noinline)) void DeleteLoop(pm::Persister& p, char* table, Slice& s) {
  uint64_t sum = 0;
  for (const uint64_t b : s.buckets) {
    char* bucket = table + b * kBucket;
    sum += FirstWord(bucket);
    auto* word = reinterpret_cast<uint64_t*>(bucket + 8);
    p.Store(word, uint64_t{0});
    p.Persist(word, sizeof(*word));
  }
  s.checksum += sum;
}

__attribute__((noinline)) void LookupLoop(const char* table, Slice& s) {
  uint64_t sum = 0;
  for (const uint64_t b : s.buckets) sum += FirstWord(table + b * kBucket);
  s.checksum += sum;
}

__attribute__((noinline)) void PrefetchLoop(const char* table, Slice& s, uint32_t distance) {
  uint64_t sum = 0;
  const uint64_t n = s.buckets.size();
  for (uint64_t i = 0; i < n; ++i) {
    if (i + distance < n) __builtin_prefetch(table + s.buckets[i + distance] * kBucket);
    sum += FirstWord(table + s.buckets[i] * kBucket);
  }
  s.checksum += sum;
}

__attribute__((noinline)) void DependentLoop(const char* table, Slice& s) {
  const uint64_t n = s.buckets.size();
  uint64_t b = s.buckets.empty() ? s.first : s.buckets[0];
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t word = FirstWord(table + b * kBucket);
    sum += word;
    b = s.first + Below(Mix64(word ^ i), s.count);
  }
  s.checksum += sum;
}

// The plain loops, on the floor's own pool (gone when this returns).
Status MeasureLoops(const BenchConfig& config, const BenchEnv& env, int threads,
                    const std::string& label, uint64_t size, FloorResult* r) {
  std::string path;
  PMHASH_RETURN_IF_ERROR(PoolPath(config, ".floor", &path));
  PoolGuard guard(path);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<pm::Pool> pool;
  PMHASH_RETURN_IF_ERROR(path.empty() ? pm::Pool::CreateDram("floor", size, &pool)
                                      : pm::Pool::Create(path, "floor", size, &pool));
  r->create_ms = MsSince(t0);
  r->mapping = pm::MappingName(pool->mapping());
  r->pool_kind = PoolKind(config, r->mapping);
  // The engines' persistence settings (latency, media model, counting) exactly: with
  // --counters off the engines run without the media model, and so must the loops they
  // are read against.
  const pm::PersistConfig pc = engines::PersistConfigOf(BaseOptions(config, "floor"));
  r->counted = pc.count;
  std::unique_ptr<pm::Persister> persister;
  PMHASH_RETURN_IF_ERROR(pm::Persister::Make(pc, &persister));

  char* table = pool->heap();
  const uint64_t buckets = pool->heap_size() / kBucket;
  r->table_bytes = buckets * kBucket;
  if (buckets < static_cast<uint64_t>(threads)) {
    return Status::InvalidArgument("floor: the pool holds fewer buckets than threads");
  }
  const auto t1 = std::chrono::steady_clock::now();
  for (uint64_t b = 0; b < buckets; ++b) {
    persister->Store(reinterpret_cast<uint64_t*>(table + b * kBucket), FloorWord(b));
  }
  r->populate_ms = MsSince(t1);

  std::vector<Slice> slices(threads);
  for (int t = 0; t < threads; ++t) {
    Slice& s = slices[t];
    s.first = buckets * t / threads;
    s.count = buckets * (t + 1) / threads - s.first;
    const uint64_t n = r->ops / threads + (static_cast<uint64_t>(t) < r->ops % threads ? 1 : 0);
    Rng rng(Mix64(config.seed ^ 0x466c6f6f72ull) + t);  // "Floor"
    s.buckets.resize(n);
    for (uint64_t& b : s.buckets) b = s.first + rng.Below(s.count);
  }
  if (env.progress) env.progress(label + " setup", 1, 1);

  const std::vector<int> cpus = PinCpus(config.pin, threads);
  for (const FloorKind kind : kAllFloorKinds) {
    if (kind == FloorKind::kApi) continue;  // MeasureApi
    const std::string what = label + " " + FloorKindName(kind);
    if (env.progress) env.progress(what, 0, 1);
    const PersistCounters before = persister->Totals();
    const TogetherRun run = RunTogether(
        threads, cpus,
        [&](size_t t) {
          Slice& s = slices[t];
          switch (kind) {
            case FloorKind::kInsert: InsertLoop(*persister, table, s); break;
            case FloorKind::kDelete: DeleteLoop(*persister, table, s); break;
            case FloorKind::kLookup: LookupLoop(table, s); break;
            case FloorKind::kPrefetch: PrefetchLoop(table, s, config.floor_prefetch); break;
            case FloorKind::kDependent: DependentLoop(table, s); break;
            case FloorKind::kApi: break;
          }
        },
        nullptr);
    r->seconds[static_cast<size_t>(kind)] = run.seconds;
    r->persist[static_cast<size_t>(kind)] = pm::CountersMinus(persister->Totals(), before);
    if (!run.pin_error.empty() && env.warn) env.warn("--pin: " + run.pin_error);
    r->pinned_cpus = run.pinned;
    if (env.progress) env.progress(what, 1, 1);
  }
  for (const Slice& s : slices) r->checksum += s.checksum;
  return Status::OK();
}

// The lookups through the API: the floor-api engine on a pool of the same kind and size,
// driven by the benchmark's loop as a search phase is.
Status MeasureApi(const BenchConfig& config, const BenchEnv& env, int threads,
                  const std::string& label, uint64_t size, FloorResult* r) {
  const std::string what = label + " " + FloorKindName(FloorKind::kApi);
  if (env.progress) env.progress(what + " setup", 0, 1);
  std::string path;
  PMHASH_RETURN_IF_ERROR(PoolPath(config, ".floor-api", &path));
  PoolGuard guard(path);
  Options options = BaseOptions(config, kFloorEngineName);
  options.engine_options.clear();  // --opt names the engines' options, not this one's
  std::unique_ptr<pm::Pool> pool;
  PMHASH_RETURN_IF_ERROR(
      path.empty() ? pm::Pool::CreateDram(kFloorEngineName, size, &pool, options.hash_seed)
                   : pm::Pool::Create(path, kFloorEngineName, size, &pool, options.hash_seed));
  std::unique_ptr<engines::Engine> engine;
  PMHASH_RETURN_IF_ERROR(
      engines::OpenEngine(MakeFloorEngine(), std::move(pool), true, options, nullptr, &engine));
  std::vector<ThreadPlan> plans = FloorApiPlans(config, threads);
  const ValuePool values(sizeof(uint64_t), config.seed);
  if (env.progress) env.progress(what + " setup", 1, 1);
  const PersistCounters before = engine->Stats().persist;
  const Measured m = RunWorkers(engine.get(), values, config, plans, false, env, what);
  if (m.errors != 0) {
    return Status::Corruption("floor: a lookup through the API failed: " + m.first_error);
  }
  engine->persister().DrainMedia();  // every thread's batch of noted reads counted
  const size_t k = static_cast<size_t>(FloorKind::kApi);
  r->seconds[k] = m.seconds;
  r->persist[k] = pm::CountersMinus(engine->Stats().persist, before);
  r->api_checksum = m.checksum;
  r->checksum += m.checksum;
  return engine->Close();
}

}  // namespace

std::vector<ThreadPlan> FloorApiPlans(const BenchConfig& config, int threads) {
  const KeySpace keys(config.key_size, DistSpec{});  // uniform
  const uint64_t ops = config.measured_ops();
  std::vector<ThreadPlan> plans(threads);
  for (int t = 0; t < threads; ++t) {
    ThreadPlan& p = plans[t];
    p.n = ops / threads + (static_cast<uint64_t>(t) < ops % threads ? 1 : 0);
    p.kind = OpKind::kSearch;
    p.keys.resize(p.n * config.key_size);
    Rng rng(Mix64(config.seed ^ 0x4150494b657973ull) + t);  // "APIKeys"
    for (uint64_t i = 0; i < p.n; ++i) {
      keys.Write(rng.Next() & ~kNegativeBit, p.keys.data() + i * config.key_size);
    }
  }
  return plans;
}

Status MeasureFloor(const BenchConfig& config, const BenchEnv& env, int threads,
                    FloorResult* out) {
  FloorResult r;
  r.run = config.label;
  r.threads = threads;
  r.ops = config.measured_ops();
  r.prefetch_distance = config.floor_prefetch;
  const std::string label = "floor t" + std::to_string(threads);
  if (env.progress) env.progress(label + " setup", 0, 1);
  // The pools: the main index's size and kind, one at a time.
  const uint64_t size = PoolSizeFor(config, 2 * config.records + 2 * config.measured_ops());
  PMHASH_RETURN_IF_ERROR(MeasureLoops(config, env, threads, label, size, &r));
  PMHASH_RETURN_IF_ERROR(MeasureApi(config, env, threads, label, size, &r));
  *out = std::move(r);
  return Status::OK();
}

}  // namespace pmhash::bench
