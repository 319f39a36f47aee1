#include "bench/fill.h"

#include "bench/index_setup.h"
#include "bench/phase_stats.h"
#include "bench/plans.h"
#include "bench/pool_files.h"
#include "bench/workers.h"
#include "engines/engine.h"

namespace pmhash::bench {

Status RunFill(const BenchConfig& config, const BenchEnv& env, const std::string& engine,
               int threads, size_t phase_pos, const KeySpace& keys, const ValuePool& values,
               PhaseResult* r) {
  std::string path;
  PMHASH_RETURN_IF_ERROR(PoolPath(config, ".fill", &path));
  Options o = BaseOptions(config, engine);
  o.path = config.redundancy ? std::string() : path;
  o.pool_size = PoolSizeFor(config, 2 * config.records);
  // What the engine can do, from its registry data: whether it accepts resize=off.
  const engines::EngineInfo* info = env.info ? env.info(o.engine) : nullptr;
  if (info == nullptr) return Status::InvalidArgument("fill: unknown engine '" + engine + "'");
  const bool resize_switch = info->capabilities.resize_switch;
  const auto given = o.engine_options.find("resize");
  const bool user_resize = given != o.engine_options.end();
  const bool resize_off = user_resize ? (given->second == "off" || given->second == "false" ||
                                         given->second == "0" || given->second == "no")
                                      : resize_switch;
  if (!user_resize && resize_switch) o.engine_options["resize"] = "off";
  PoolGuard guard(config.redundancy ? std::string() : path);
  OpenedIndex opened;
  PMHASH_RETURN_IF_ERROR(OpenFresh(config, env, o, &opened));
  engines::Engine* index = opened.get();
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
  const bool by_pool1 = m.refused && m.refused_by_pool;
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
    note = "the pool filled after " + std::to_string(after_load.count) +
           " keys, before the table refused (raise --pool-size); load factor there";
  } else if (!resize_off) {
    note = user_resize ? "resize set by --opt; load factor after --records keys"
                       : "engine has no resize=off option; load factor after --records keys";
  } else if (grew1) {
    note = "never refuses: its key slots grew from " + std::to_string(before.key_slots) +
           " to " + std::to_string(after_load.key_slots) +
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
    const bool by_pool2 = m2.refused && m2.refused_by_pool;
    if (m2.refused && !by_pool2) {
      both = m;
      Accumulate(m2, &both);
      row_m = &both;
      row_after = &after;
      note = "first refused insert: " + m2.refusal;
    } else {
      note = (by_pool2 ? "the pool filled before the table refused"
                       : "did not refuse within " + std::to_string(extra) +
                             " more inserts (its key slots grew from " +
                             std::to_string(after_load.key_slots) + " to " +
                             std::to_string(after.key_slots) + ")") +
             "; every figure is from the first --records inserts (load factor after load)";
    }
  }
  FillFromMeasured(*row_m, r);
  FillFromStats(config, before, *row_after, r);
  r->note = note;
  return index->Close();
}

}  // namespace pmhash::bench
