#include "bench/report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <algorithm>
#include <functional>
#include <map>
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
  const CpuFeatures& f = CpuFeatures::Get();
  std::string flushes;
  if (f.clwb) flushes += "clwb ";
  if (f.clflushopt) flushes += "clflushopt ";
  if (f.clflush) flushes += "clflush";
  m.Set("flush_instructions", flushes);
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
  bool ratio = true;      // show the ratio to the first engine
  bool optional = false;  // hide the row when no engine has a value
};

std::optional<double> PerOp(const PhaseResult& r, uint64_t v, bool known = true) {
  if (r.ops == 0 || !known) return std::nullopt;
  return static_cast<double>(v) / r.ops;
}

std::optional<double> Latency(const PhaseResult& r, double v) {
  return r.samples ? std::optional<double>(v) : std::nullopt;
}

std::vector<Metric> Metrics() {
  using R = const PhaseResult&;
  return {
      {"ops", [](R r) { return std::optional<double>(r.ops); }, "%.0f", false},
      {"Mops/s", [](R r) { return std::optional<double>(r.mops()); }, "%.3f"},
      {"mean ns", [](R r) { return Latency(r, r.mean); }, "%.0f"},
      {"p50 ns", [](R r) { return Latency(r, r.p50); }, "%.0f"},
      {"p99 ns", [](R r) { return Latency(r, r.p99); }, "%.0f"},
      {"p99.9 ns", [](R r) { return Latency(r, r.p999); }, "%.0f"},
      {"p99.99 ns", [](R r) { return Latency(r, r.p9999); }, "%.0f"},
      {"flushes/op", [](R r) { return PerOp(r, r.delta.flushes); }, "%.2f"},
      {"fences/op", [](R r) { return PerOp(r, r.delta.fences); }, "%.2f"},
      {"PM bytes/op", [](R r) { return PerOp(r, r.delta.bytes_stored); }, "%.1f"},
      {"media writes/op", [](R r) { return PerOp(r, r.delta.media_writes, r.media_known); },
       "%.2f"},
      {"media write amp", [](R r) {
         return r.media_known && r.delta.bytes_stored
                    ? std::optional<double>(r.delta.media_writes * 256.0 / r.delta.bytes_stored)
                    : std::nullopt; }, "%.2f"},
      {"PM lines read/op", [](R r) { return PerOp(r, r.delta.lines_read, r.lines_read_known); },
       "%.2f"},
      {"redundant flushes/op",
       [](R r) { return PerOp(r, r.delta.redundant_flushes, r.redundancy_known); }, "%.3f",
       true, true},
      {"redundant fences/op",
       [](R r) { return PerOp(r, r.delta.redundant_fences, r.redundancy_known); }, "%.3f",
       true, true},
      {"load factor", [](R r) {
         return r.load_factor_known ? std::optional<double>(r.load_factor) : std::nullopt; },
       "%.3f"},
      {"keys stored", [](R r) { return std::optional<double>(r.count); }, "%.0f", false},
      {"key slots", [](R r) {
         return r.key_slots ? std::optional<double>(r.key_slots) : std::nullopt; }, "%.0f",
       false},
      {"filter FP rate", [](R r) { return r.false_positive_rate; }, "%.2e", true, true},
      {"PM MiB", [](R r) { return std::optional<double>(r.pm_bytes / 1048576.0); }, "%.1f"},
      {"DRAM MiB", [](R r) { return std::optional<double>(r.dram_bytes / 1048576.0); }, "%.2f"},
      {"recovery ms", [](R r) { return r.recovery_ms; }, "%.2f"},
      {"Open ms, unclean", [](R r) { return r.reopen_ms ? r.recovery_open_ms : std::nullopt; },
       "%.2f", true, true},
      {"Open ms, clean", [](R r) { return r.reopen_ms; }, "%.2f", true, true},
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
  // (threads, phase position) in the order they first appear: a phase that repeats in
  // --phases (load,search,delete,search) gets a table per occurrence.
  struct Key {
    int threads;
    int index;
    std::string phase;
    bool operator==(const Key& o) const { return threads == o.threads && index == o.index; }
  };
  std::vector<Key> keys;
  std::map<std::string, std::set<int>> positions;  // phase -> positions it occupies
  for (const PhaseResult& r : results) {
    const Key k{r.threads, r.phase_index, r.phase};
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    positions[r.phase].insert(r.phase_index);
  }
  const std::vector<Metric> metrics = Metrics();
  for (const Key& key : keys) {
    std::vector<const PhaseResult*> cols;
    for (const std::string& e : engines) {
      const PhaseResult* found = nullptr;
      for (const PhaseResult& r : results) {
        if (r.engine == e && r.threads == key.threads && r.phase_index == key.index) found = &r;
      }
      if (found != nullptr) cols.push_back(found);
    }
    if (cols.empty()) continue;
    out += "\n== " + key.phase;
    if (positions[key.phase].size() > 1) {
      out += " (phase " + std::to_string(key.index + 1) + " of --phases)";
    }
    out += " · " + std::to_string(key.threads) + " thread" + (key.threads == 1 ? "" : "s");
    if (!cols[0]->run.empty() && cols[0]->run != "main") out += " · run " + cols[0]->run;
    out += " ==\n";
    // Cells: value (ratio to the first engine).
    std::vector<std::vector<std::string>> cells;
    cells.emplace_back();
    cells[0].push_back("");
    for (const PhaseResult* c : cols) cells[0].push_back(c->engine);
    for (const Metric& metric : metrics) {
      bool any = false;
      for (const PhaseResult* c : cols) any = any || metric.value(*c).has_value();
      if (metric.optional && !any) continue;
      std::vector<std::string> row{metric.name};
      const std::optional<double> base = metric.value(*cols[0]);
      for (size_t i = 0; i < cols.size(); ++i) {
        const std::optional<double> v = metric.value(*cols[i]);
        std::string cell = v ? Format(metric.format, *v) : "-";
        if (metric.ratio && i > 0 && v && base && *base != 0) {
          cell += " (" + Format("%.2f", *v / *base) + "x)";
        }
        row.push_back(cell);
      }
      cells.push_back(std::move(row));
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
    // Notes, each once with the engines it applies to (a note shared by every column,
    // such as --redundancy's, is not repeated per engine).
    std::vector<std::pair<std::string, std::string>> notes;  // note -> engines
    for (const PhaseResult* c : cols) {
      if (c->errors > 0) {
        out += "  ! " + c->engine + ": " + std::to_string(c->errors) +
               " operations failed; first: " + c->first_error + "\n";
      }
      if (c->note.empty()) continue;
      auto it = std::find_if(notes.begin(), notes.end(),
                             [&](const auto& n) { return n.first == c->note; });
      if (it == notes.end()) {
        notes.emplace_back(c->note, c->engine);
      } else {
        it->second += ", " + c->engine;
      }
    }
    for (const auto& [note, who] : notes) out += "  note " + who + ": " + note + "\n";
    if (cols[0]->sample_every > 1) {
      out += "  latency: 1 operation in " + std::to_string(cols[0]->sample_every) +
             " timed (--latency-sample)\n";
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
