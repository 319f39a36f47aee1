#include "bench/index_setup.h"

#include "engines/engine.h"
#include "pm/pool.h"

namespace pmhash::bench {

void Quiesce(engines::Engine* index) {
  index->WaitForBackgroundWork();
  index->persister().DrainMedia();
}

Options BaseOptions(const BenchConfig& config, const std::string& engine) {
  Options o;
  o.engine = engine;
  o.persist = config.persist;
  o.flush = config.flush;
  o.write_latency_ns = config.write_latency_ns;
  o.read_latency_ns = config.read_latency_ns;
  o.media_model = config.media_model;
  o.media = config.media;
  o.eadr_write_back_instruction = config.eadr_write_back_instruction;
  o.initial_capacity = config.records;
  o.count_stats = config.count_stats;
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

Status OpenFresh(const BenchConfig& config, const BenchEnv& env, const Options& o,
                 OpenedIndex* out) {
  if (!config.redundancy) return env.open(o, &out->index);
  if (!env.open_on_pool) return Status::InvalidArgument("--redundancy is not available here");
  std::unique_ptr<pm::Pool> pool;
  PMHASH_RETURN_IF_ERROR(pm::Pool::CreateDram(o.engine, o.pool_size, &pool));
  out->sim = std::make_unique<pm::CrashSim>(pool->base(), pool->size(), config.persist);
  PMHASH_RETURN_IF_ERROR(env.open_on_pool(o, std::move(pool), out->sim.get(), &out->index));
  out->sim->ReportTo(&out->index->persister());
  return Status::OK();
}

}  // namespace pmhash::bench
