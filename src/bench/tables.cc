#include "bench/tables.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>

namespace pmhash::bench {

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Ranged(const char* fmt, const Spread& s, const char* unit) {
  std::string cell = Format(fmt, s.median) + unit;
  if (s.samples.size() > 1) cell += " (" + Format(fmt, s.min) + "-" + Format(fmt, s.max) + ")";
  return cell;
}

std::string Grid(const std::vector<std::vector<std::string>>& cells) {
  auto pad = [](const std::string& s, size_t width, bool left) {
    if (s.size() >= width) return s;
    return left ? s + std::string(width - s.size(), ' ')
                : std::string(width - s.size(), ' ') + s;
  };
  size_t columns = 0;
  for (const auto& row : cells) columns = std::max(columns, row.size());
  std::vector<size_t> width(columns, 0);
  for (const auto& row : cells) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : cells) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += (i == 0 ? "" : "  ") + pad(row[i], width[i], i == 0);
    }
    out += line + "\n";
  }
  return out;
}

namespace {

struct Metric {
  const char* name;
  std::function<std::optional<double>(const PhaseResult&)> value;
  const char* format;
  bool ratio = true;      // show the ratio to the first engine
  bool optional = false;  // hide the row when no engine has a value
  bool hide_zero = false;  // hide it too when every value is 0 (a figure few engines use)
  bool counted = false;    // measured only with --counters on
};

// A persistence figure: with --counters off in every column its row gives way to one
// line saying so, instead of a row of n/a per figure.
Metric Counted(Metric m) {
  m.counted = true;
  return m;
}

constexpr const char* kThroughput = "Mops/s";

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
      {kThroughput, [](R r) { return std::optional<double>(r.mops()); }, "%.3f"},
      {"mean ns", [](R r) { return Latency(r, r.mean); }, "%.0f"},
      {"p50 ns", [](R r) { return Latency(r, r.p50); }, "%.0f"},
      {"p99 ns", [](R r) { return Latency(r, r.p99); }, "%.0f"},
      {"p99.9 ns", [](R r) { return Latency(r, r.p999); }, "%.0f"},
      {"p99.99 ns", [](R r) { return Latency(r, r.p9999); }, "%.0f"},
      Counted({"flushes/op", [](R r) { return PerOp(r, r.delta.flushes, r.counters_known); },
               "%.2f"}),
      Counted({"fences/op", [](R r) { return PerOp(r, r.delta.fences, r.counters_known); },
               "%.2f"}),
      Counted({"PM bytes/op",
               [](R r) { return PerOp(r, r.delta.bytes_stored, r.counters_known); }, "%.1f"}),
      Counted({"PM lines written/op",
               [](R r) { return PerOp(r, r.delta.lines_written, r.media_known); }, "%.2f"}),
      Counted({"media writes/op",
               [](R r) { return PerOp(r, r.delta.media_writes, r.media_known); }, "%.2f"}),
      Counted({"media write amp", [](R r) { return r.MediaWriteAmp(); }, "%.2f"}),
      Counted({"media B/stored B", [](R r) { return r.MediaWriteAmpStored(); }, "%.2f"}),
      Counted({"media RMW reads/op",
               [](R r) { return PerOp(r, r.delta.media_rmw_reads, r.media_known); }, "%.3f"}),
      Counted({"write-backs/op",
               [](R r) { return PerOp(r, r.delta.write_backs, r.counters_known); }, "%.2f",
               true, true, true}),
      Counted({"PM lines read/op",
               [](R r) { return PerOp(r, r.delta.lines_read, r.lines_read_known); }, "%.2f"}),
      Counted({"media reads/op",
               [](R r) { return PerOp(r, r.delta.media_reads, r.lines_read_known); }, "%.2f"}),
      Counted({"redundant flushes/op",
               [](R r) { return PerOp(r, r.delta.redundant_flushes, r.redundancy_known); },
               "%.3f", true, true}),
      Counted({"redundant fences/op",
               [](R r) { return PerOp(r, r.delta.redundant_fences, r.redundancy_known); },
               "%.3f", true, true}),
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

std::string Rounds(size_t n) {
  return n > 1 ? " · median of " + std::to_string(n) + " rounds (min-max)" : "";
}

}  // namespace

std::string PhaseTables(const RunSummary& run, const std::vector<std::string>& engines) {
  std::string out;
  // (threads, phase position, batch) in the order they first appear: a phase that
  // repeats in --phases (load,search,delete,search) gets a table per occurrence.
  struct Key {
    int threads;
    int index;
    uint32_t batch;
    std::string phase;
    bool operator==(const Key& o) const {
      return threads == o.threads && index == o.index && batch == o.batch;
    }
  };
  auto key_of = [](const PhaseResult& r) {
    return Key{r.threads, r.phase_index, r.batch, r.phase};
  };
  std::vector<Key> keys;
  std::map<std::string, std::set<int>> positions;  // phase -> positions it occupies
  for (const RowSummary& s : run.rows) {
    const Key k = key_of(s.median);
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    positions[k.phase].insert(k.index);
  }
  const std::vector<Metric> metrics = Metrics();
  for (const Key& key : keys) {
    std::vector<const RowSummary*> cols;
    for (const std::string& e : engines) {
      for (const RowSummary& s : run.rows) {
        if (s.median.engine == e && key_of(s.median) == key) cols.push_back(&s);
      }
    }
    if (cols.empty()) continue;
    const PhaseResult& first = cols[0]->median;
    size_t rounds = 0;
    for (const RowSummary* c : cols) rounds = std::max(rounds, c->rounds.size());
    out += "\n== " + key.phase;
    if (key.batch > 1) out += " (batch " + std::to_string(key.batch) + ")";
    if (positions[key.phase].size() > 1) {
      out += " (phase " + std::to_string(key.index + 1) + " of --phases)";
    }
    out += " · " + std::to_string(key.threads) + " thread" + (key.threads == 1 ? "" : "s");
    if (!first.run.empty() && first.run != "main") out += " · run " + first.run;
    out += Rounds(rounds) + " ==\n";
    // Cells: value (ratio to the first engine).
    std::vector<std::vector<std::string>> cells;
    cells.emplace_back();
    cells[0].push_back("");
    for (const RowSummary* c : cols) cells[0].push_back(c->median.engine);
    const bool counted = std::any_of(cols.begin(), cols.end(), [](const RowSummary* c) {
      return c->median.counters_known;
    });
    for (const Metric& metric : metrics) {
      if (metric.counted && !counted) continue;
      bool any = false;
      for (const RowSummary* c : cols) {
        const std::optional<double> v = metric.value(c->median);
        any = any || (v.has_value() && (!metric.hide_zero || *v != 0));
      }
      if (metric.optional && !any) continue;
      std::vector<std::string> row{metric.name};
      const std::optional<double> base = metric.value(first);
      const bool ranged = std::string_view(metric.name) == kThroughput && rounds > 1;
      for (size_t i = 0; i < cols.size(); ++i) {
        const std::optional<double> v = metric.value(cols[i]->median);
        std::string cell = v ? Format(metric.format, *v) : "n/a";  // not measured
        if (ranged) {
          cell = Ranged(metric.format, cols[i]->mops) + (cols[i]->unstable ? " !" : "");
        } else if (metric.ratio && i > 0 && v && base && *base != 0) {
          cell += " (" + Format("%.2f", *v / *base) + "x)";
        }
        row.push_back(cell);
      }
      cells.push_back(std::move(row));
      if (std::string_view(metric.name) != kThroughput) continue;
      // Beside throughput: the per-round ratio to the first engine, and the floor.
      if (rounds > 1 && cols.size() > 1) {
        std::vector<std::string> ratio{"ratio, per round"};
        for (const RowSummary* c : cols) {
          ratio.push_back(c->ratio ? Ranged("%.2f", *c->ratio, "x") : "-");
        }
        cells.push_back(std::move(ratio));
      }
      const RowSummary* with_floor = nullptr;
      for (const RowSummary* c : cols) {
        if (c->floor_pct) with_floor = c;
      }
      if (with_floor != nullptr) {
        std::vector<std::string> pct{std::string("% of ") +
                                     FloorKindName(*with_floor->floor_kind) + " floor"};
        for (const RowSummary* c : cols) {
          pct.push_back(c->floor_pct ? Ranged("%.0f", *c->floor_pct, "%") : "-");
        }
        cells.push_back(std::move(pct));
      }
    }
    out += Grid(cells);
    if (!counted) {
      out += "  flushes, fences, PM bytes, media traffic and reads per op: not measured "
             "(--counters off)\n";
    }
    // Notes, each once with the engines it applies to (a note shared by every column,
    // such as --redundancy's, is not repeated per engine).
    std::vector<std::pair<std::string, std::string>> notes;  // note -> engines
    for (const RowSummary* col : cols) {
      const PhaseResult* c = &col->median;
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
    if (first.sample_every > 1) {
      out += "  latency: 1 operation in " + std::to_string(first.sample_every) +
             " timed (--latency-sample)\n";
    }
  }
  return out;
}

std::string FloorTable(const RunSummary& run) {
  if (run.floors.empty()) return "";
  const FloorResult& any = run.floors[0].rounds[0];
  std::string out = "\n== floor: plain loops over 64-byte buckets, " +
                    Format("%.1f", any.table_bytes / 1048576.0) + " MiB, " + any.pool_kind +
                    ", Mops/s";
  if (!run.run.empty() && run.run != "main") out += " · run " + run.run;
  size_t rounds = 0;
  for (const FloorSummary& f : run.floors) rounds = std::max(rounds, f.rounds.size());
  out += Rounds(rounds) + " ==\n";
  std::vector<std::vector<std::string>> cells;
  cells.emplace_back();
  cells[0].push_back("");
  for (const FloorSummary& f : run.floors) {
    cells[0].push_back(std::to_string(f.threads) + " thread" + (f.threads == 1 ? "" : "s"));
  }
  for (FloorKind kind : kAllFloorKinds) {
    const size_t k = static_cast<size_t>(kind);
    std::string name = kind == FloorKind::kInsert     ? "insert (read, 16 B + persist)"
                       : kind == FloorKind::kDelete   ? "delete (read, 8 B + persist)"
                       : kind == FloorKind::kLookup   ? "lookup (independent)"
                       : kind == FloorKind::kPrefetch ? "lookup, prefetched " +
                                                            std::to_string(any.prefetch_distance) +
                                                            " ahead"
                       : kind == FloorKind::kDependent ? "lookup, dependent"
                                                       : "lookup through the API (Index::Get)";
    std::vector<std::string> row{name};
    for (const FloorSummary& f : run.floors) {
      row.push_back(Ranged("%.3f", f.mops[k]) + (f.unstable[k] ? " !" : ""));
    }
    cells.push_back(std::move(row));
  }
  std::vector<std::string> pct{"API lookup, % of lookup (per round)"};
  for (const FloorSummary& f : run.floors) pct.push_back(Ranged("%.0f", f.api_pct_of_lookup, "%"));
  cells.push_back(std::move(pct));
  return out + Grid(cells);
}

std::string SetupLine(const RunSummary& run) {
  if (run.setups.empty()) return "";
  std::string out = "\npool setup, median ms (create, populate):";
  for (size_t i = 0; i < run.setups.size(); ++i) {
    const RunSummary::Setup& s = run.setups[i];
    out += std::string(i == 0 ? " " : " · ") + s.cell.Label() + " " + Format("%.1f", s.create_ms);
    if (s.populate_ms) out += ", " + Format("%.1f", *s.populate_ms);
  }
  return out + "\n";
}

std::string StabilityText(const std::vector<RunSummary>& runs) {
  int fewest = 0;
  double limit = 0;
  std::vector<std::string> unstable;
  for (const RunSummary& run : runs) {
    fewest = fewest == 0 ? run.repeat : std::min(fewest, run.repeat);
    limit = std::max(limit, run.max_spread);
    for (const std::string& f : UnstableFigures(run)) {
      unstable.push_back((runs.size() > 1 ? "run " + run.run + ": " : std::string()) + f);
    }
  }
  if (fewest <= 1) {
    return "\none round: no figure's spread was measured, and on a shared machine one run "
           "can be off by more than a difference between engines; use --repeat 3 or more "
           "(and pmhash bench compare) before claiming one\n";
  }
  if (unstable.empty()) {
    return "\nstable: every Mops/s stayed within max/min " + Format("%.2f", limit) +
           "x over its rounds\n";
  }
  std::string out = "\nunstable (max/min of Mops/s over the rounds above " +
                    Format("%.2f", limit) + "x, marked !): ";
  constexpr size_t kNamed = 12;  // the rest are in the JSON's stability.unstable
  for (size_t i = 0; i < unstable.size() && i < kNamed; ++i) {
    out += (i == 0 ? "" : "; ") + unstable[i];
  }
  if (unstable.size() > kNamed) {
    out += "; and " + std::to_string(unstable.size() - kNamed) + " more";
  }
  return out + "\nrun more rounds (--repeat " + std::to_string(std::max(5, 2 * fewest)) +
         ") or at a quieter time before relying on them\n";
}

}  // namespace pmhash::bench
