// RunEngine: one engine at one thread count through every phase (runner.h names the
// parts it uses).
#include "bench/runner.h"

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "bench/fill.h"
#include "bench/index_setup.h"
#include "bench/latency.h"
#include "bench/phase_stats.h"
#include "bench/plans.h"
#include "bench/pool_files.h"
#include "bench/recovery.h"
#include "bench/tables.h"
#include "bench/workers.h"

namespace pmhash::bench {

namespace {

// The seed stream of a batched lookup row: its phase position + this (plans.h).
constexpr size_t kBatchedStream = 2000;

// For an engine that takes an oracle hotspot detector (Engine::HotKeyOracleSize): the
// live keys that a phase drawing from `live` will hit most (HottestDraws).
void TellHotKeys(engines::Engine* index, const BenchConfig& config, const KeySpace& keys,
                 const KeyState& live) {
  const uint64_t k = index->HotKeyOracleSize();
  if (k == 0) return;
  std::vector<std::string> hot;
  if (live.live() > 0) {
    for (uint64_t i : HottestDraws(config.dist, live.live(), k)) {
      hot.push_back(keys.Key(live.lo + i));
    }
  }
  index->SetHotKeyOracle(hot);
}

}  // namespace

Status RunEngine(const BenchConfig& config, const BenchEnv& env, const std::string& engine,
                 int threads, std::vector<PhaseResult>* results, EngineSetup* setup) {
  PMHASH_RETURN_IF_ERROR(ValidateConfig(config));
  const KeySpace keys(config.key_size, config.dist);
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
  EngineSetup times;
  if (needs_main) {
    const auto t0 = std::chrono::steady_clock::now();
    PMHASH_RETURN_IF_ERROR(OpenFresh(config, env, options, &opened));
    times.create_ms = MsSince(t0);
  }

  // --batch N with a write phase: the same writes through Index::Write, N ops a call, as
  // rows of their own, on a second index that mirrors the main one's keys (each phase's
  // writes run on both; the batched ones are timed on their own).
  bool batch_writes = false;
  for (Phase p : config.phases) {
    batch_writes = batch_writes || (config.batch > 1 && (p == Phase::kLoad || p == Phase::kUpdate ||
                                                         p == Phase::kDelete));
  }
  std::string batch_path;
  OpenedIndex batch_index;
  if (batch_writes && !config.redundancy) {
    PMHASH_RETURN_IF_ERROR(PoolPath(config, ".batch", &batch_path));
  }
  PoolGuard batch_guard(batch_path);
  if (batch_writes) {
    Options bo = options;
    bo.path = batch_path;
    PMHASH_RETURN_IF_ERROR(OpenFresh(config, env, bo, &batch_index));
  }
  // The same plans on the batch index, untimed (phases that are not batched rows).
  auto mirror = [&](const std::vector<ThreadPlan>& plans, const char* what) {
    if (!batch_writes) return Status::OK();
    std::vector<ThreadPlan> copy = plans;
    const Measured m = RunWorkers(batch_index.get(), values, config, copy, false, env,
                                  Describe(engine, threads, what));
    if (m.errors > 0) {
      return Status::Corruption("the batch index refused what the main one took: " +
                                m.first_error);
    }
    return Status::OK();
  };

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
    PMHASH_RETURN_IF_ERROR(mirror(plans, "prefill (batch index)"));
    const auto t0 = std::chrono::steady_clock::now();
    Measured m = RunWorkers(opened.get(), values, config, plans, false, env,
                            Describe(engine, threads, "prefill"));
    plans.clear();
    Quiesce(opened.get());
    times.populate_ms = MsSince(t0);
    const IndexStats filled = opened.get()->Stats();
    if (m.errors > 0) {
      return Status::ResourceExhausted("engine " + engine + " refused an insert while "
                                       "filling to load factor " + Format("%.2f", f) + ": " +
                                       m.first_error);
    }
    state.hi = need;
    if (filled.key_slots != created.key_slots) {
      lf_note = "--load-factor " + Format("%.2f", f) + ": filled to " + std::to_string(need) +
                " keys = " + Format("%.2f", f) + " x the " + std::to_string(created.key_slots) +
                " key slots of the index as created; its key slots grew to " +
                std::to_string(filled.key_slots) + " meanwhile, so the load factor reached is " +
                Format("%.3f", filled.load_factor);
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

  // Runs one phase's plans on the main index and fills its row.
  auto measure = [&](std::vector<ThreadPlan>& plans, const char* what, PhaseResult* r) {
    Quiesce(opened.get());
    const IndexStats before = opened.get()->Stats();
    Measured m = RunWorkers(opened.get(), values, config, plans, false, env,
                            Describe(engine, threads, what));
    const bool through_get_u64 =
        config.get_u64 && !plans.empty() && plans[0].batch == 1 && plans[0].kinds.empty() &&
        (plans[0].kind == OpKind::kSearch || plans[0].kind == OpKind::kNegative);
    plans.clear();
    // The timer has stopped; the engine's background work belongs to this phase.
    Quiesce(opened.get());
    const IndexStats after = opened.get()->Stats();
    FillFromMeasured(m, r);
    FillFromStats(config, before, after, r);
    r->note = lf_note;
    add_note(&r->note, sim_note);
    if (through_get_u64) add_note(&r->note, "through Index::GetU64 (--lookups u64)");
  };

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
    const bool batched = config.batch > 1 && (phase == Phase::kSearch ||
                                              phase == Phase::kNegative);
    const bool batched_write = batch_writes && (phase == Phase::kLoad ||
                                                phase == Phase::kUpdate ||
                                                phase == Phase::kDelete);
    TellHotKeys(opened.get(), config, keys, state);
    if (batch_writes) TellHotKeys(batch_index.get(), config, keys, state);
    PhaseResult batched_row = r;
    std::vector<ThreadPlan> write_plans;
    if (batched_write) {
      write_plans = plans;
    } else if (phase == Phase::kMixed) {
      PMHASH_RETURN_IF_ERROR(mirror(plans, "mixed (batch index)"));
    }
    measure(plans, PhaseName(phase), &r);
    results->push_back(std::move(r));
    if (batched_write) {
      // The same writes through Index::Write on the batch index, config.batch ops a call.
      for (ThreadPlan& plan : write_plans) plan.batch = config.batch;
      batched_row.batch = config.batch;
      const std::string label = std::string(PhaseName(phase)) + " batch";
      Quiesce(batch_index.get());
      const IndexStats before = batch_index.get()->Stats();
      Measured m = RunWorkers(batch_index.get(), values, config, write_plans, false, env,
                              Describe(engine, threads, label.c_str()));
      Quiesce(batch_index.get());
      FillFromMeasured(m, &batched_row);
      FillFromStats(config, before, batch_index.get()->Stats(), &batched_row);
      batched_row.note = lf_note;
      add_note(&batched_row.note, "through Index::Write on a second index holding the same "
                                  "keys (--batch)");
      results->push_back(std::move(batched_row));
    }
    if (batched) {
      // The same lookups through MultiGet, config.batch keys a call: keys drawn alike
      // from a stream of their own, so that the plain row leaves no warm cache behind.
      plans = planner.Draws(state, ops, threads, pos + kBatchedStream,
                            phase == Phase::kSearch ? OpKind::kSearch : OpKind::kNegative,
                            nullptr, 0, nullptr);
      for (ThreadPlan& plan : plans) plan.batch = config.batch;
      batched_row.batch = config.batch;
      const std::string label = std::string(PhaseName(phase)) + " batch";
      measure(plans, label.c_str(), &batched_row);
      results->push_back(std::move(batched_row));
    }
    state = next;
  }

  if (setup != nullptr) *setup = times;
  if (!needs_main) return Status::OK();

  const RecoveryTimes rec = TimeRecovery(config, env, engine, threads, options, path, &opened);
  for (size_t i = first_result; i < results->size(); ++i) {
    if ((*results)[i].phase != "fill") {
      (*results)[i].recovery_ms = rec.recovery_ms;
      (*results)[i].recovery_open_ms = rec.recovery_open_ms;
      (*results)[i].reopen_ms = rec.reopen_ms;
    }
  }
  if (opened.index != nullptr) PMHASH_RETURN_IF_ERROR(opened.get()->Close());
  return Status::OK();
}

}  // namespace pmhash::bench
