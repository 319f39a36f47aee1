#include "bench/workers.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <span>

#include "bench/threads.h"

namespace pmhash::bench {

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

namespace {

struct alignas(64) ThreadOutcome {
  std::atomic<uint64_t> done{0};  // progress, updated every 1024 operations
  Latencies lat;
  uint64_t errors = 0, checksum = 0, attempted = 0;
  std::string first_error;
  bool refused = false;
  bool refused_by_pool = false;
};

struct WorkerContext {
  Index* index;
  const ValuePool* values;
  size_t key_size;
  size_t fixed_value;  // 0: sizes vary
  bool stop_on_refusal;
  std::atomic<bool>* stop;
  double ticks_per_ns;
  uint32_t sample_every;  // time 1 operation in this many (1: all)
  bool put_inserts;       // new keys through Index::Put (--inserts put)
  bool get_u64;           // lookups through Index::GetU64 (--lookups u64)
};

// A negative search found its key: Corruption in *s, and not the expected status.
__attribute__((noinline)) bool NegativeFound(Status* s) {
  *s = Status::Corruption("a key that was never inserted was found");
  return false;
}

// A lookup's outcome: folds a found value into the checksum; true when the status is
// the expected one (found for a search, NotFound for a negative search; a negative
// search that finds its key becomes Corruption in *s). Inline, its rare path out of line.
[[gnu::always_inline]] inline bool CheckLookup(OpKind kind, const std::string& value, Status* s,
                                               uint64_t* checksum) {
  if (s->ok()) {
    uint64_t w = 0;
    if (value.size() >= 8) [[likely]] {
      std::memcpy(&w, value.data(), 8);  // one load: a variable-size copy was a libc call
    } else {
      std::memcpy(&w, value.data(), value.size());
    }
    *checksum += w ^ value.size();
    return kind == OpKind::kSearch || NegativeFound(s);
  }
  return kind == OpKind::kNegative && s->IsNotFound();
}

// A lookup phase issued through MultiGet, plan.batch keys per call. A batch is timed
// when it holds the next operation due for sampling; its time divided by its keys is
// recorded once, as the per-operation latency (runner.h, "Latency sampling").
void LookupBatches(const WorkerContext& ctx, const ThreadPlan& plan, ThreadOutcome* out) {
  const uint64_t n = plan.n, batch = plan.batch, every = ctx.sample_every;
  uint64_t next_sample = plan.sample_offset % every;
  std::vector<std::string_view> keys(batch);
  std::vector<std::string> values(batch);
  std::vector<Status> statuses(batch);
  for (std::string& v : values) v.reserve(1024);
  uint64_t checksum = 0, errors = 0, i = 0;
  while (i < n) {
    const uint64_t m = std::min(batch, n - i);
    for (uint64_t j = 0; j < m; ++j) {
      keys[j] = std::string_view(plan.keys.data() + (i + j) * ctx.key_size, ctx.key_size);
    }
    const bool sample = next_sample < i + m;
    const uint64_t t0 = sample ? Ticks() : 0;
    ctx.index->MultiGet(std::span(keys.data(), m), std::span(values.data(), m),
                        std::span(statuses.data(), m));
    if (sample) {
      out->lat.Record(
          static_cast<uint64_t>(static_cast<double>(Ticks() - t0) / ctx.ticks_per_ns / m));
      while (next_sample < i + m) next_sample += every;
    }
    for (uint64_t j = 0; j < m; ++j) {
      if (!CheckLookup(plan.kind, values[j], &statuses[j], &checksum) && errors++ == 0) {
        out->first_error = statuses[j].ToString();
      }
    }
    if (((i + m) >> 10) != (i >> 10)) out->done.store(i + m, std::memory_order_relaxed);
    i += m;
  }
  out->attempted = n;
  out->done.store(n, std::memory_order_relaxed);
  out->errors = errors;
  out->checksum = checksum;
}

// A write phase (inserts, updates or deletes) issued through Index::Write, plan.batch ops
// per call, timed as LookupBatches times its calls.
void WriteBatches(const WorkerContext& ctx, const ThreadPlan& plan, ThreadOutcome* out) {
  const uint64_t n = plan.n, batch = plan.batch, every = ctx.sample_every;
  uint64_t next_sample = plan.sample_offset % every;
  std::vector<WriteOp> ops(batch);
  std::vector<Status> statuses(batch);
  const WriteOp::Kind kind = plan.kind == OpKind::kInsert   ? WriteOp::Kind::kInsert
                             : plan.kind == OpKind::kUpdate ? WriteOp::Kind::kUpdate
                                                            : WriteOp::Kind::kDelete;
  uint64_t errors = 0, i = 0;
  while (i < n) {
    const uint64_t m = std::min(batch, n - i);
    for (uint64_t j = 0; j < m; ++j) {
      ops[j].kind = kind;
      ops[j].key = std::string_view(plan.keys.data() + (i + j) * ctx.key_size, ctx.key_size);
      if (kind != WriteOp::Kind::kDelete) {
        ops[j].value = std::string_view(ctx.values->data() + plan.voff[i + j],
                                        ctx.fixed_value != 0 ? ctx.fixed_value
                                                             : plan.vsize[i + j]);
      }
    }
    const bool sample = next_sample < i + m;
    const uint64_t t0 = sample ? Ticks() : 0;
    ctx.index->Write(std::span(ops.data(), m), std::span(statuses.data(), m));
    if (sample) {
      out->lat.Record(
          static_cast<uint64_t>(static_cast<double>(Ticks() - t0) / ctx.ticks_per_ns / m));
      while (next_sample < i + m) next_sample += every;
    }
    for (uint64_t j = 0; j < m; ++j) {
      if (!statuses[j].ok() && errors++ == 0) out->first_error = statuses[j].ToString();
    }
    if (((i + m) >> 10) != (i >> 10)) out->done.store(i + m, std::memory_order_relaxed);
    i += m;
  }
  out->attempted = n;
  out->done.store(n, std::memory_order_relaxed);
  out->errors = errors;
}

// A search or negative phase issued through Get (or, kWords, through GetU64 with 8-byte
// keys and values): the loop of Worker below with nothing but a lookup in it, so that
// its own work between one Get and the next is a handful of instructions (issue 29: the
// loop's share of a lookup was 92 instructions, and what lies between one lookup's miss
// and the next one's load decides whether the two overlap). Sampling, checks and progress
// as in Worker; a word found folds into the checksum as an 8-byte string would.
template <bool kWords>
void Lookups(const WorkerContext& ctx, const ThreadPlan& plan, ThreadOutcome* out) {
  const uint64_t n = plan.n, every = ctx.sample_every;
  uint64_t next_sample = plan.sample_offset % every;
  std::string value;
  value.reserve(1024);
  uint64_t checksum = 0, errors = 0;
  const char* const keys = plan.keys.data();
  const size_t key_size = ctx.key_size;
  Index* const index = ctx.index;
  const OpKind kind = plan.kind;
  for (uint64_t i = 0; i < n; ++i) {
    const std::string_view key(keys + i * key_size, key_size);
    const bool sample = i == next_sample;
    const uint64_t t0 = sample ? Ticks() : 0;
    uint64_t word = 0;
    Status s = [&] {  // built in place: a Status assigned over costs its reset
      if constexpr (kWords) {
        uint64_t key_word;
        std::memcpy(&key_word, key.data(), sizeof(key_word));
        return index->GetU64(key_word, &word);
      } else {
        return index->Get(key, &value);
      }
    }();
    bool ok;
    if constexpr (kWords) {
      checksum += s.ok() ? word ^ sizeof(word) : 0;
      ok = s.ok() ? kind == OpKind::kSearch || NegativeFound(&s)
                  : kind == OpKind::kNegative && s.IsNotFound();
    } else {
      ok = CheckLookup(kind, value, &s, &checksum);
    }
    if (sample) [[unlikely]] {
      out->lat.Record(static_cast<uint64_t>(static_cast<double>(Ticks() - t0) / ctx.ticks_per_ns));
      next_sample += every;
    }
    if (!ok && errors++ == 0) [[unlikely]] out->first_error = s.ToString();
    if ((i & 1023) == 0) out->done.store(i, std::memory_order_relaxed);
  }
  out->attempted = n;
  out->done.store(n, std::memory_order_relaxed);
  out->errors = errors;
  out->checksum = checksum;
}

// The loop of every other phase (inserts, updates, deletes, mixed). Its own work per
// operation is kept small (issue 29): the settings in locals (an opaque call into the
// index would make the compiler reload them through ctx and plan), each Status built
// where it is returned (no default Status assigned over).
void Worker(const WorkerContext& ctx, const ThreadPlan& plan, ThreadOutcome* out) {
  const uint64_t n = plan.n;
  // Sampling (runner.h): operations next_sample, next_sample + every, ... are timed.
  const uint64_t every = ctx.sample_every;
  uint64_t next_sample = plan.sample_offset % every;
  std::string value;
  value.reserve(1024);
  uint64_t checksum = 0, errors = 0;
  const char* keys = plan.keys.data();
  const size_t key_size = ctx.key_size;
  Index* const index = ctx.index;
  const bool mixed = !plan.kinds.empty();
  const bool fixed = ctx.fixed_value != 0;
  const bool stop_on_refusal = ctx.stop_on_refusal;
  const bool put_inserts = ctx.put_inserts;

  if (plan.batch > 1) {
    if (plan.kind == OpKind::kSearch || plan.kind == OpKind::kNegative) {
      return LookupBatches(ctx, plan, out);
    }
    return WriteBatches(ctx, plan, out);
  }
  if (!mixed && (plan.kind == OpKind::kSearch || plan.kind == OpKind::kNegative)) {
    return ctx.get_u64 ? Lookups<true>(ctx, plan, out) : Lookups<false>(ctx, plan, out);
  }
  uint64_t i = 0;
  for (; i < n; ++i) {
    if (stop_on_refusal && ctx.stop->load(std::memory_order_relaxed)) break;
    const std::string_view key(keys + i * key_size, key_size);
    const OpKind kind = mixed ? static_cast<OpKind>(plan.kinds[i]) : plan.kind;
    const bool lookup = kind == OpKind::kSearch || kind == OpKind::kNegative;
    const bool sample = i == next_sample;
    const uint64_t t0 = sample ? Ticks() : 0;
    Status s = lookup                     ? index->Get(key, &value)
               : kind == OpKind::kDelete ? index->Delete(key)
                                          : [&] {
                                              const std::string_view v(
                                                  ctx.values->data() + plan.voff[i],
                                                  fixed ? ctx.fixed_value : plan.vsize[i]);
                                              if (kind == OpKind::kUpdate) return index->Update(key, v);
                                              return put_inserts ? index->Put(key, v)
                                                                 : index->Insert(key, v);
                                            }();
    const bool ok = lookup ? CheckLookup(kind, value, &s, &checksum) : s.ok();
    if (sample) {
      out->lat.Record(static_cast<uint64_t>(static_cast<double>(Ticks() - t0) / ctx.ticks_per_ns));
      next_sample += every;
    }
    if (!ok) [[unlikely]] {
      if (stop_on_refusal && kind == OpKind::kInsert && s.IsResourceExhausted()) {
        out->refused = true;
        out->refused_by_pool = s.IsPoolFull();
        out->first_error = s.ToString();
        ctx.stop->store(true, std::memory_order_relaxed);
        ++i;
        break;
      }
      if (errors++ == 0) out->first_error = s.ToString();
    }
    if ((i & 1023) == 0) out->done.store(i, std::memory_order_relaxed);
  }
  out->attempted = i;
  out->done.store(i, std::memory_order_relaxed);
  out->errors = errors;
  out->checksum = checksum;
}

}  // namespace

Measured RunWorkers(Index* index, const ValuePool& values, const BenchConfig& config,
                    std::vector<ThreadPlan>& plans, bool stop_on_refusal,
                    const BenchEnv& env, const std::string& label, uint32_t every) {
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
  std::atomic<bool> stop{false};
  WorkerContext ctx{index,
                    &values,
                    config.key_size,
                    config.value_size.fixed() ? config.value_size.min : 0,
                    stop_on_refusal,
                    &stop,
                    TicksPerNs(),
                    every,
                    config.put_inserts,
                    config.get_u64};
  // A fixed value size of 0 bytes would read as "varies": keep the sizes array then.
  if (config.value_size.fixed() && config.value_size.min == 0) ctx.fixed_value = 0;
  // Progress until every thread has finished (or a refusal stopped them).
  std::function<bool()> poll;
  if (env.progress) {
    poll = [&] {
      uint64_t done = 0;
      for (const ThreadOutcome& o : outcomes) done += o.done.load(std::memory_order_relaxed);
      env.progress(label, done, total);
      return done < total && !stop.load();
    };
  }
  const TogetherRun run = RunTogether(
      t, PinCpus(config.pin, t), [&](size_t i) { Worker(ctx, plans[i], &outcomes[i]); }, poll);
  Measured m;
  m.sample_every = every;
  m.pinned = run.pinned;
  if (!run.pin_error.empty() && env.warn) env.warn("--pin: " + run.pin_error);
  for (ThreadOutcome& o : outcomes) {
    m.lat.Merge(o.lat);
    m.ops += o.attempted;
    m.errors += o.errors;
    m.checksum += o.checksum;
    if (o.refused && !m.refused) {
      m.refused = true;
      m.refused_by_pool = o.refused_by_pool;
      m.refusal = o.first_error;
    } else if (!o.first_error.empty() && m.first_error.empty() && !o.refused) {
      m.first_error = o.first_error;
    }
  }
  m.seconds = run.seconds;
  if (env.progress) env.progress(label, total, total);
  return m;
}

void Accumulate(const Measured& more, Measured* m) {
  m->ops += more.ops;
  m->seconds += more.seconds;
  m->lat.Merge(more.lat);
  m->errors += more.errors;
  m->checksum += more.checksum;
  if (m->first_error.empty()) m->first_error = more.first_error;
  m->refused = more.refused;
  m->refused_by_pool = more.refused_by_pool;
  m->refusal = more.refusal;
}

std::string Describe(const std::string& engine, int threads, const char* what) {
  return engine + " t" + std::to_string(threads) + " " + what;
}

}  // namespace pmhash::bench
