#include "bench/plans.h"

#include <algorithm>
#include <memory>
#include <string>

#include "bench/runner.h"

namespace pmhash::bench {

Status ValidateConfig(const BenchConfig& config) {
  if (config.get_u64 && (config.key_size != 8 || !config.value_size.fixed() ||
                         config.value_size.min != 8)) {
    return Status::InvalidArgument("--lookups u64 calls GetU64, which takes 8-byte keys and "
                                   "values: it needs --key-size 8 and --value-size 8");
  }
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

namespace {

uint64_t ThreadSeed(uint64_t seed, size_t phase_pos, size_t thread) {
  return Mix64(seed * 0x100000001b3ull + phase_pos * 0x10001 + thread + 1);
}

// Splits n into t nearly equal parts.
uint64_t Share(uint64_t n, size_t t, size_t i) { return n / t + (i < n % t ? 1 : 0); }

}  // namespace

void Planner::Begin(ThreadPlan* plan, uint64_t n, OpKind kind, bool with_values) const {
  plan->n = n;
  plan->kind = kind;
  plan->keys.resize(n * config_.key_size);
  if (with_values) {
    plan->voff.resize(n);
    if (!config_.value_size.fixed() || config_.value_size.min == 0) plan->vsize.resize(n);
  }
}

void Planner::Put(ThreadPlan* plan, uint64_t i, uint64_t index, bool value, uint64_t salt,
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

std::vector<ThreadPlan> Planner::Inserts(uint64_t first, uint64_t n, size_t threads,
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

std::vector<ThreadPlan> Planner::Deletes(uint64_t first, uint64_t n, size_t threads,
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

std::vector<ThreadPlan> Planner::Draws(const KeyState& live, uint64_t n, size_t threads,
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

}  // namespace pmhash::bench
