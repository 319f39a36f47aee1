#include "bench/report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <optional>
#include <set>

#include "pm/persist.h"

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
  const pm::CpuFeatures& f = pm::CpuFeatures::Get();
  std::string flushes;
  if (f.clwb) flushes += "clwb ";
  if (f.clflushopt) flushes += "clflushopt ";
  if (f.clflush) flushes += "clflush";
  m.Set("flush_instructions", flushes);
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
  if (v->is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v->number());
    return buf;
  }
  return v->is_bool() ? (v->boolean() ? "yes" : "no") : "?";
}

static const char* ResolvedFlush(FlushInstruction f) {
  if (f != FlushInstruction::kAuto) return FlushInstructionName(f);
  const pm::CpuFeatures& c = pm::CpuFeatures::Get();
  return c.clwb ? "clwb" : c.clflushopt ? "clflushopt" : "clflush";
}

std::string HeaderText(const Json& machine, const BenchConfig& config) {
  std::string s;
  s += "pmhash bench\n";
  s += "  CPU:        " + Get(machine, "cpu") + " (" + Get(machine, "cores") + " cores)\n";
  s += "  Kernel:     " + Get(machine, "kernel") + "\n";
  s += "  Build:      " + Get(machine, "build_type") + "\n";
  std::string persist = PersistModeName(config.persist);
  if (config.persist == PersistMode::kAdr) {
    persist += std::string(" with ") + ResolvedFlush(config.flush);
  }
  if (config.write_latency_ns > 0) {
    persist += ", +" + std::to_string(config.write_latency_ns) + " ns per flushed line";
  }
  s += "  Persist:    " + persist + "\n";
  s += "  Pool:       " + (config.pool.empty() ? std::string("fresh file under /dev/shm")
                                               : config.pool) + "\n";
  if (!IsReleaseBuild()) {
    s += "  WARNING: this is not a release build; timings are not representative.\n";
  }
  return s;
}

// ---- Tables -------------------------------------------------------------------------

namespace {

struct Metric {
  const char* name;
  std::function<std::optional<double>(const PhaseResult&)> value;
  const char* format;
  bool higher_is_better;
};

std::optional<double> PerOp(const PhaseResult& r, uint64_t v, bool known = true) {
  if (r.ops == 0 || !known) return std::nullopt;
  return static_cast<double>(v) / r.ops;
}

std::vector<Metric> Metrics() {
  return {
      {"Mops/s", [](const PhaseResult& r) { return std::optional<double>(r.mops()); }, "%.3f",
       true},
      {"mean ns", [](const PhaseResult& r) {
         return r.samples ? std::optional<double>(r.mean) : std::nullopt; }, "%.0f", false},
      {"p50 ns", [](const PhaseResult& r) {
         return r.samples ? std::optional<double>(r.p50) : std::nullopt; }, "%.0f", false},
      {"p99 ns", [](const PhaseResult& r) {
         return r.samples ? std::optional<double>(r.p99) : std::nullopt; }, "%.0f", false},
      {"p99.9 ns", [](const PhaseResult& r) {
         return r.samples ? std::optional<double>(r.p999) : std::nullopt; }, "%.0f", false},
      {"p99.99 ns", [](const PhaseResult& r) {
         return r.samples ? std::optional<double>(r.p9999) : std::nullopt; }, "%.0f", false},
      {"flushes/op", [](const PhaseResult& r) { return PerOp(r, r.delta.flushes); }, "%.2f",
       false},
      {"fences/op", [](const PhaseResult& r) { return PerOp(r, r.delta.fences); }, "%.2f", false},
      {"PM bytes/op", [](const PhaseResult& r) { return PerOp(r, r.delta.bytes_stored); },
       "%.1f", false},
      {"media writes/op", [](const PhaseResult& r) { return PerOp(r, r.delta.media_writes); },
       "%.2f", false},
      {"media write amp", [](const PhaseResult& r) {
         return r.delta.bytes_stored ? std::optional<double>(r.delta.media_writes * 256.0 /
                                                             r.delta.bytes_stored)
                                     : std::nullopt; }, "%.2f", false},
      {"PM lines read/op", [](const PhaseResult& r) {
         return PerOp(r, r.delta.lines_read, r.lines_read_known); }, "%.2f", false},
      {"load factor", [](const PhaseResult& r) {
         return r.load_factor_known ? std::optional<double>(r.load_factor) : std::nullopt; },
       "%.3f", true},
      {"PM MiB", [](const PhaseResult& r) {
         return std::optional<double>(r.pm_bytes / 1048576.0); }, "%.1f", false},
      {"DRAM MiB", [](const PhaseResult& r) {
         return std::optional<double>(r.dram_bytes / 1048576.0); }, "%.2f", false},
      {"recovery ms", [](const PhaseResult& r) { return r.recovery_ms; }, "%.2f", false},
  };
}

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Pad(const std::string& s, size_t width, bool left) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

}  // namespace

std::string PhaseTables(const std::vector<PhaseResult>& results,
                        const std::vector<std::string>& engines) {
  std::string out;
  // Order of (threads, phase) as they first appear.
  std::vector<std::pair<int, std::string>> keys;
  for (const PhaseResult& r : results) {
    std::pair<int, std::string> k{r.threads, r.phase};
    bool seen = false;
    for (const auto& e : keys) seen = seen || e == k;
    if (!seen) keys.push_back(k);
  }
  const std::vector<Metric> metrics = Metrics();
  for (const auto& [threads, phase] : keys) {
    std::vector<const PhaseResult*> cols;
    for (const std::string& e : engines) {
      const PhaseResult* found = nullptr;
      for (const PhaseResult& r : results) {
        if (r.engine == e && r.threads == threads && r.phase == phase) found = &r;
      }
      if (found != nullptr) cols.push_back(found);
    }
    if (cols.empty()) continue;
    out += "\n== " + phase + " · " + std::to_string(threads) + " thread" +
           (threads == 1 ? "" : "s") + " · " + std::to_string(cols[0]->ops) + " ops";
    if (!cols[0]->run.empty() && cols[0]->run != "main") out += " · run " + cols[0]->run;
    out += " ==\n";
    // Cells: value (ratio to the first engine).
    std::vector<std::vector<std::string>> cells(metrics.size() + 1);
    cells[0].push_back("");
    for (const PhaseResult* c : cols) cells[0].push_back(c->engine);
    for (size_t m = 0; m < metrics.size(); ++m) {
      cells[m + 1].push_back(metrics[m].name);
      const std::optional<double> base = metrics[m].value(*cols[0]);
      for (size_t i = 0; i < cols.size(); ++i) {
        const std::optional<double> v = metrics[m].value(*cols[i]);
        std::string cell = v ? Format(metrics[m].format, *v) : "-";
        if (i > 0 && v && base && *base != 0) cell += " (" + Format("%.2f", *v / *base) + "x)";
        cells[m + 1].push_back(cell);
      }
    }
    std::vector<size_t> width(cols.size() + 1, 0);
    for (const auto& row : cells) {
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    for (const auto& row : cells) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        line += (i == 0 ? "" : "  ") + Pad(row[i], width[i], i == 0);
      }
      out += line + "\n";
    }
    for (const PhaseResult* c : cols) {
      if (c->errors > 0) {
        out += "  ! " + c->engine + ": " + std::to_string(c->errors) +
               " operations failed; first: " + c->first_error + "\n";
      }
      if (!c->note.empty()) out += "  note " + c->engine + ": " + c->note + "\n";
    }
  }
  return out;
}

Json ResultsJson(const Json& config, const Json& machine,
                 const std::vector<PhaseResult>& results) {
  Json doc = Json::Object();
  doc.Set("config", config);
  doc.Set("machine", machine);
  Json rs = Json::Array();
  for (const PhaseResult& r : results) rs.Push(r.ToJson());
  doc.Set("results", rs);
  return doc;
}

}  // namespace pmhash::bench
