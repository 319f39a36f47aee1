#include "bench/index_setup.h"

#include "engines/engine.h"
#include "pm/pool.h"

namespace pmhash::bench {

void Quiesce(engines::Engine* index) {
  index->WaitForBackgroundWork();
  index->persister().DrainMedia();
}

Options BaseOptions(const BenchConfig& config, const std::string& column) {
  const std::string engine = EngineOf(column);
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
  // "name=value" applies to every engine, "engine:name=value" to every column of that
  // engine, "engine@label:name=value" to that column alone, in that order.
  const auto apply = [&](const std::string& scope) {
    for (const auto& [name, value] : config.engine_options) {
      const size_t colon = name.find(':');
      const std::string of = colon == std::string::npos ? "" : name.substr(0, colon);
      if (of == scope) o.engine_options[name.substr(of.empty() ? 0 : colon + 1)] = value;
    }
  };
  apply("");
  apply(engine);
  if (column != engine) apply(column);
  // The pools' hash seed: the column's, the engine's, every column's, else --seed's.
  auto seed = config.hash_seeds.find(column);
  if (seed == config.hash_seeds.end()) seed = config.hash_seeds.find(engine);
  if (seed == config.hash_seeds.end()) seed = config.hash_seeds.find("");
  if (seed == config.hash_seeds.end()) {
    o.hash_seed = config.seed;
  } else if (!seed->second.random) {
    o.hash_seed = seed->second.value;
  }
  return o;
}

Status OpenFresh(const BenchConfig& config, const BenchEnv& env, const Options& o,
                 OpenedIndex* out) {
  if (!config.redundancy) return env.open(o, &out->index);
  if (!env.open_on_pool) return Status::InvalidArgument("--redundancy is not available here");
  std::unique_ptr<pm::Pool> pool;
  PMHASH_RETURN_IF_ERROR(pm::Pool::CreateDram(o.engine, o.pool_size, &pool, o.hash_seed));
  out->sim = std::make_unique<pm::CrashSim>(pool->base(), pool->size(), config.persist);
  PMHASH_RETURN_IF_ERROR(env.open_on_pool(o, std::move(pool), out->sim.get(), &out->index));
  out->sim->ReportTo(&out->index->persister());
  return Status::OK();
}

}  // namespace pmhash::bench
