#include "bench/report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include "bench/pool_files.h"
#include "bench/tables.h"
#include "pm/persist.h"
#include "pmhash_commit.h"  // generated at build time: PMHASH_COMMIT

namespace pmhash::bench {

bool IsReleaseBuild() {
#if defined(NDEBUG) && defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
  return true;
#else
  return false;
#endif
}

static std::string BuildType() {
  std::string s;
#if defined(__OPTIMIZE__)
  s = "optimized";
#else
  s = "unoptimized";
#endif
#if defined(NDEBUG)
  s += ", assertions off";
#else
  s += ", assertions on";
#endif
#if defined(__SANITIZE_ADDRESS__)
  s += ", ASan";
#endif
#if defined(__SANITIZE_THREAD__)
  s += ", TSan";
#endif
  return (IsReleaseBuild() ? "release (" : "NOT release (") + s + ")";
}

Json LoadAverage() {
  double load[3];
  if (::getloadavg(load, 3) != 3) return Json();
  Json j = Json::Array();
  for (double l : load) j.Push(std::round(l * 100) / 100);
  return j;
}

Json MachineJson() {
  Json m = Json::Object();
  std::string cpu = "unknown";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  m.Set("cpu", cpu);
  m.Set("cores", static_cast<uint64_t>(::sysconf(_SC_NPROCESSORS_ONLN)));
  m.Set("memory_bytes", static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                            static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)));
  struct utsname u;
  if (::uname(&u) == 0) m.Set("kernel", std::string(u.sysname) + " " + u.release);
  m.Set("compiler", std::string("gcc-compatible ") + __VERSION__);
  m.Set("build_type", BuildType());
  m.Set("release_build", IsReleaseBuild());
  const CpuFeatures& f = CpuFeatures::Get();
  std::string flushes;
  if (f.clwb) flushes += "clwb ";
  if (f.clflushopt) flushes += "clflushopt ";
  if (f.clflush) flushes += "clflush";
  m.Set("flush_instructions", flushes);
  Json features = Json::Object();
  features.Set("clwb", f.clwb);
  features.Set("clflushopt", f.clflushopt);
  features.Set("clflush", f.clflush);
  features.Set("avx2", f.avx2);
  features.Set("avx512bw", f.avx512bw);
  m.Set("cpu_features", features);
  // Set by CMake when the build tree was configured (CMakeLists.txt).
  m.Set("cmake_build_type", PMHASH_BUILD_TYPE);
  m.Set("commit", PMHASH_COMMIT);
  m.Set("load_average_start", LoadAverage());
  // What one empty timed region costs (runner.h, "Latency sampling").
  m.Set("timer_overhead_ns", std::round(MeasureTimerOverheadNs() * 10) / 10);
  char date[64];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m.Set("date", date);
  return m;
}

static std::string Get(const Json& j, const char* name) {
  const Json* v = j.Find(name);
  if (v == nullptr) return "?";
  if (v->is_string()) return v->string();
  if (v->is_uint()) return std::to_string(v->uint());
  if (v->is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v->number());
    return buf;
  }
  return v->is_bool() ? (v->boolean() ? "yes" : "no") : "?";
}

static const char* ResolvedFlush(FlushInstruction f) {
  if (f != FlushInstruction::kAuto) return FlushInstructionName(f);
  const CpuFeatures& c = CpuFeatures::Get();
  return c.clwb ? "clwb" : c.clflushopt ? "clflushopt" : "clflush";
}

std::string HeaderText(const Json& machine, const BenchConfig& config) {
  std::string s;
  s += "pmhash bench\n";
  s += "  CPU:        " + Get(machine, "cpu") + " (" + Get(machine, "cores") + " cores)\n";
  s += "  Kernel:     " + Get(machine, "kernel") + "\n";
  s += "  Build:      " + Get(machine, "build_type") + ", commit " + Get(machine, "commit") +
       "\n";
  if (const Json* load = machine.Find("load_average_start"); load && load->is_array()) {
    char buf[64];
    const auto& l = load->items();
    std::snprintf(buf, sizeof(buf), "%.2f %.2f %.2f", l[0].number(), l[1].number(),
                  l[2].number());
    s += std::string("  Load:       ") + buf + " (1, 5, 15 min) on " + Get(machine, "cores") +
         " cores\n";
  }
  std::string persist = PersistModeName(config.persist);
  if (config.persist == PersistMode::kAdr) {
    persist += std::string(" with ") + ResolvedFlush(config.flush);
  }
  if (config.write_latency_ns > 0) {
    persist += ", +" + std::to_string(config.write_latency_ns) + " ns per media write";
  }
  if (config.read_latency_ns > 0) {
    persist += ", +" + std::to_string(config.read_latency_ns) + " ns per media read";
  }
  if (config.write_latency_ns > 0 || config.read_latency_ns > 0) persist += " (emulated)";
  s += "  Persist:    " + persist + "\n";
  if (config.persist == PersistMode::kNone) {
    s += "  Media:      none (volatile baseline: media figures n/a)\n";
  } else if (!config.media_model) {
    s += "  Media:      model off (--media-model off: media figures n/a)\n";
  } else {
    const MediaOptions& m = config.media;
    std::string media = std::to_string(m.dimms) + " DIMMs, " +
                        std::to_string(m.interleave_bytes >> 10) + " KiB interleave, " +
                        std::to_string(m.buffer_bytes >> 10) + " KiB buffer each";
    if (config.persist == PersistMode::kEadr) {
      media += m.cache_bytes == 0
                   ? ", no cache model (stores write through)"
                   : ", " + (m.cache_bytes % (1 << 20) == 0
                                 ? std::to_string(m.cache_bytes >> 20) + " MiB"
                                 : std::to_string(m.cache_bytes >> 10) + " KiB") +
                         " persistent cache";
    }
    s += "  Media:      " + media + "; drained at each phase end\n";
  }
  s += "  Pool:       " + (config.pool.empty() ? std::string("fresh file under /dev/shm")
                                               : config.pool) +
       "; " + PoolKind(config, "") + "\n";
  if (config.repeat > 1) {
    s += "  Rounds:     " + std::to_string(config.repeat) +
         ", each in a new order; figures are median (min-max), ! = max/min above " +
         Format("%.2f", config.max_spread) + "x\n";
  }
  if (config.pin) s += "  Threads:    pinned to CPUs (--pin)\n";
  if (!IsReleaseBuild()) {
    s += "  WARNING: this is not a release build; timings are not representative.\n";
  }
  return s;
}

Json ResultsJson(const Json& config, const Json& machine, const std::vector<RunSummary>& runs) {
  Json doc = Json::Object();
  doc.Set("config", config);
  doc.Set("machine", machine);
  Json results = Json::Array(), floors = Json::Array(), rounds = Json::Array();
  Json setup = Json::Array(), unstable = Json::Array();
  double max_spread = 0;
  int repeat = 0;
  for (const RunSummary& run : runs) {
    for (const RowSummary& r : run.rows) results.Push(r.ToJson());
    for (const FloorSummary& f : run.floors) floors.Push(f.ToJson());
    for (size_t i = 0; i < run.orders.size(); ++i) {
      Json round = Json::Object();
      round.Set("run", run.run);
      round.Set("round", static_cast<uint64_t>(i));
      Json order = Json::Array();
      for (const Cell& c : run.orders[i]) order.Push(c.Label());
      round.Set("order", order);
      rounds.Push(round);
    }
    for (const RunSummary::Setup& s : run.setups) {
      Json j = Json::Object();
      j.Set("run", run.run);
      j.Set("engine", s.cell.engine);
      j.Set("threads", s.cell.threads);
      j.Set("create_ms", s.create_ms);
      j.Set("populate_ms", s.populate_ms ? Json(*s.populate_ms) : Json());
      setup.Push(j);
    }
    for (const std::string& f : UnstableFigures(run)) {
      Json j = Json::Object();
      j.Set("run", run.run);
      j.Set("figure", f);
      unstable.Push(j);
    }
    max_spread = std::max(max_spread, run.max_spread);
    repeat = repeat == 0 ? run.repeat : std::min(repeat, run.repeat);
  }
  doc.Set("results", results);
  doc.Set("floor", floors);
  doc.Set("rounds", rounds);
  doc.Set("setup", setup);
  Json stability = Json::Object();
  stability.Set("rounds", repeat);
  stability.Set("max_spread", max_spread);
  stability.Set("unstable", unstable);
  doc.Set("stability", stability);
  return doc;
}

}  // namespace pmhash::bench
