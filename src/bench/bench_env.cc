// DefaultEnv: the registered engines, opened through the public factory.
#include <cstdio>

#include "bench/runner.h"
#include "engines/engine.h"

namespace pmhash::bench {

BenchEnv DefaultEnv() {
  BenchEnv env;
  env.open = [](const Options& o, std::unique_ptr<engines::Engine>* index) {
    return engines::Open(o, index);
  };
  env.open_on_pool = [](const Options& o, std::unique_ptr<pm::Pool> pool,
                        pm::PersistObserver* observer, std::unique_ptr<engines::Engine>* index) {
    const engines::EngineRegistration* reg = engines::FindEngine(o.engine);
    if (reg == nullptr) return engines::UnknownEngine(o.engine);
    return engines::OpenEngine(reg->make(), std::move(pool), /*fresh=*/true, o, observer,
                               index);
  };
  env.info = [](const std::string& engine) -> const engines::EngineInfo* {
    const engines::EngineRegistration* reg = engines::FindEngine(engine);
    return reg == nullptr ? nullptr : &reg->info;
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

}  // namespace pmhash::bench
