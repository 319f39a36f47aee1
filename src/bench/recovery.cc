#include "bench/recovery.h"

#include <chrono>

#include "bench/workers.h"
#include "engines/engine.h"

namespace pmhash::bench {

RecoveryTimes TimeRecovery(const BenchConfig& config, const BenchEnv& env,
                           const std::string& engine, int threads, const Options& options,
                           const std::string& path, OpenedIndex* opened) {
  RecoveryTimes times;
  const bool file_pool = !path.empty();
  Options reopen_options = options;
  reopen_options.error_if_exists = false;
  reopen_options.create_if_missing = false;
  auto reopen_timed = [&](const char* what, double* ms) -> Status {
    if (env.progress) env.progress(Describe(engine, threads, what), 0, 1);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = env.open(reopen_options, &opened->index);
    *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
              .count();
    if (env.progress) env.progress(Describe(engine, threads, what), 1, 1);
    return s;
  };
  if (config.recovery && file_pool) {
    const uint64_t count = opened->get()->Count();
    opened->get()->Abandon();
    opened->index.reset();
    double open_ms = 0;
    Status s = reopen_timed("recovery", &open_ms);
    if (!s.ok()) {
      env.warn(engine + ": reopening after an unclean close failed: " + s.ToString());
    } else {
      const IndexStats st = opened->get()->Stats();
      times.recovery_ms = st.recovered ? st.recovery_ms : open_ms;
      times.recovery_open_ms = open_ms;
      if (opened->get()->Count() != count) {
        env.warn(engine + ": after recovery Count() is " +
                 std::to_string(opened->get()->Count()) +
                 ", before the unclean close it was " + std::to_string(count));
      }
    }
  }
  if (config.clean_reopen && file_pool && opened->index != nullptr) {
    const uint64_t count = opened->get()->Count();
    Status s = opened->get()->Close();
    opened->index.reset();
    double open_ms = 0;
    if (s.ok()) s = reopen_timed("clean reopen", &open_ms);
    if (!s.ok()) {
      env.warn(engine + ": reopening after a clean close failed: " + s.ToString());
    } else {
      times.reopen_ms = open_ms;
      if (opened->get()->Count() != count) {
        env.warn(engine + ": after a clean reopen Count() is " +
                 std::to_string(opened->get()->Count()) + ", before the close it was " +
                 std::to_string(count));
      }
    }
  }
  return times;
}

}  // namespace pmhash::bench
