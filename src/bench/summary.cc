#include "bench/summary.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace pmhash::bench {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Spread::max_over_min() const {
  if (samples.size() < 2) return 1;
  if (min <= 0) return max > 0 ? std::numeric_limits<double>::infinity() : 1;
  return max / min;
}

bool Spread::Unstable(double limit) const {
  return samples.size() >= 2 && max_over_min() > limit;
}

Json Spread::ToJson() const {
  Json j = Json::Object();
  j.Set("median", median);
  j.Set("min", min);
  j.Set("max", max);
  const double spread = max_over_min();
  j.Set("max_over_min", NumberOrNull(std::isfinite(spread), spread));
  Json s = Json::Array();
  for (double v : samples) s.Push(v);
  j.Set("samples", s);
  return j;
}

Spread SpreadOf(const std::vector<double>& samples) {
  Spread s;
  s.samples = samples;
  s.median = Median(samples);
  s.min = samples.empty() ? 0 : *std::min_element(samples.begin(), samples.end());
  s.max = samples.empty() ? 0 : *std::max_element(samples.begin(), samples.end());
  return s;
}

Json RowSummary::ToJson() const {
  Json j = median.ToJson();
  j.Set("mops", mops.median);
  j.Set("rounds", static_cast<uint64_t>(rounds.size()));
  j.Set("median_round", median_round);
  j.Set("mops_range", mops.ToJson());
  j.Set("stable", !unstable);
  if (ratio) {
    Json r = ratio->ToJson();
    r.Set("engine", ratio_to);
    j.Set("ratio_to_first", r);
  } else {
    j.Set("ratio_to_first", Json());
  }
  if (floor_pct) {
    Json f = floor_pct->ToJson();
    f.Set("floor", FloorKindName(*floor_kind));
    j.Set("pct_of_floor", f);
  } else {
    j.Set("pct_of_floor", Json());
  }
  Json samples = Json::Array();
  for (const PhaseResult& r : rounds) {
    Json s = r.ToJson();
    s.Set("round", r.round);
    s.Set("position", r.position);
    samples.Push(s);
  }
  j.Set("samples", samples);
  return j;
}

Json FloorSummary::ToJson() const {
  const FloorResult& first = rounds.front();
  Json j = Json::Object();
  j.Set("run", run);
  j.Set("threads", threads);
  j.Set("ops", first.ops);
  j.Set("table_bytes", first.table_bytes);
  j.Set("mapping", first.mapping);
  j.Set("pool_kind", first.pool_kind);
  j.Set("prefetch_distance", uint64_t{first.prefetch_distance});
  j.Set("rounds", static_cast<uint64_t>(rounds.size()));
  Json loops = Json::Object();
  for (FloorKind kind : kAllFloorKinds) {
    const size_t k = static_cast<size_t>(kind);
    const PersistCounters& c = first.persist[k];
    const double n = first.ops > 0 ? static_cast<double>(first.ops) : 1;
    Json l = Json::Object();
    l.Set("mops", mops[k].median);
    l.Set("mops_range", mops[k].ToJson());
    l.Set("stable", !unstable[k]);
    l.Set("flushes_per_op", NumberOrNull(first.counted, c.flushes / n));
    l.Set("fences_per_op", NumberOrNull(first.counted, c.fences / n));
    l.Set("pm_bytes_written_per_op", NumberOrNull(first.counted, c.bytes_stored / n));
    if (kind == FloorKind::kApi) l.Set("pct_of_lookup", api_pct_of_lookup.ToJson());
    loops.Set(FloorKindName(kind), l);
  }
  j.Set("loops", loops);
  Json samples = Json::Array();
  for (const FloorResult& r : rounds) {
    Json s = Json::Object();
    s.Set("round", r.round);
    s.Set("position", r.position);
    s.Set("create_ms", r.create_ms);
    s.Set("populate_ms", r.populate_ms);
    Json m = Json::Object();
    for (FloorKind kind : kAllFloorKinds) m.Set(FloorKindName(kind), r.mops(kind));
    s.Set("mops", m);
    Json cpus = Json::Array();
    for (int c : r.pinned_cpus) cpus.Push(c);
    s.Set("pinned_cpus", r.pinned_cpus.empty() ? Json() : cpus);
    s.Set("checksum", r.checksum);
    samples.Push(s);
  }
  j.Set("samples", samples);
  return j;
}

namespace {

// The median of the values `get` returns over the rounds that have one.
std::optional<double> MedianOf(const std::vector<PhaseResult>& rounds,
                               std::optional<double> (*get)(const PhaseResult&)) {
  std::vector<double> v;
  for (const PhaseResult& r : rounds) {
    if (const std::optional<double> x = get(r)) v.push_back(*x);
  }
  if (v.empty()) return std::nullopt;
  return Median(v);
}

RowSummary SummarizeRow(std::vector<PhaseResult> rounds, double max_spread) {
  RowSummary s;
  std::vector<double> mops;
  for (const PhaseResult& r : rounds) mops.push_back(r.mops());
  s.mops = SpreadOf(mops);
  s.unstable = s.mops.Unstable(max_spread);
  std::vector<size_t> by_mops(rounds.size());
  for (size_t i = 0; i < by_mops.size(); ++i) by_mops[i] = i;
  std::stable_sort(by_mops.begin(), by_mops.end(),
                   [&](size_t a, size_t b) { return mops[a] < mops[b]; });
  const size_t mid = by_mops[(by_mops.size() - 1) / 2];
  s.median = rounds[mid];
  s.median_round = rounds[mid].round;
  PhaseResult& m = s.median;
  if (s.mops.median > 0) m.seconds = static_cast<double>(m.ops) / (s.mops.median * 1e6);
  using R = const PhaseResult&;
  using Getter = std::optional<double> (*)(R);
  const std::pair<double*, Getter> latencies[] = {
      {&m.p50, [](R r) { return r.samples ? std::optional<double>(r.p50) : std::nullopt; }},
      {&m.p90, [](R r) { return r.samples ? std::optional<double>(r.p90) : std::nullopt; }},
      {&m.p99, [](R r) { return r.samples ? std::optional<double>(r.p99) : std::nullopt; }},
      {&m.p999, [](R r) { return r.samples ? std::optional<double>(r.p999) : std::nullopt; }},
      {&m.p9999, [](R r) { return r.samples ? std::optional<double>(r.p9999) : std::nullopt; }},
      {&m.mean, [](R r) { return r.samples ? std::optional<double>(r.mean) : std::nullopt; }},
      {&m.max, [](R r) { return r.samples ? std::optional<double>(r.max) : std::nullopt; }},
  };
  for (const auto& [field, get] : latencies) {
    if (const std::optional<double> v = MedianOf(rounds, get)) *field = *v;
  }
  m.recovery_ms = MedianOf(rounds, [](R r) { return r.recovery_ms; });
  m.recovery_open_ms = MedianOf(rounds, [](R r) { return r.recovery_open_ms; });
  m.reopen_ms = MedianOf(rounds, [](R r) { return r.reopen_ms; });
  m.errors = 0;
  m.first_error.clear();
  for (const PhaseResult& r : rounds) {
    m.errors += r.errors;
    if (m.first_error.empty()) m.first_error = r.first_error;
  }
  s.rounds = std::move(rounds);
  return s;
}

}  // namespace

RunSummary Summarize(const BenchConfig& config, const RunOutcome& outcome) {
  RunSummary summary;
  summary.run = config.label;
  summary.orders = outcome.orders;
  summary.repeat = config.repeat;
  summary.max_spread = config.max_spread;
  const std::vector<Cell> cells = MatrixCells(config);
  auto cell_of = [&](const std::string& engine, int threads) {
    const Cell c{engine, threads};
    return static_cast<size_t>(std::find(cells.begin(), cells.end(), c) - cells.begin());
  };

  // Rows: grouped by (cell, phase position, batch), each group in round order.
  std::map<std::tuple<size_t, int, uint32_t>, std::vector<PhaseResult>> groups;
  for (const PhaseResult& r : outcome.rows) {
    groups[{cell_of(r.engine, r.threads), r.phase_index, r.batch}].push_back(r);
  }
  for (auto& [key, rounds] : groups) {
    summary.rows.push_back(SummarizeRow(std::move(rounds), config.max_spread));
  }

  // Floors by thread count, and each round's floor figures for the percentages.
  std::map<int, std::vector<FloorResult>> floors;
  for (const FloorResult& f : outcome.floors) floors[f.threads].push_back(f);
  std::map<std::pair<int, int>, const FloorResult*> floor_of;  // (threads, round)
  for (auto& [threads, rounds] : floors) {
    FloorSummary fs;
    fs.run = config.label;
    fs.threads = threads;
    for (FloorKind kind : kAllFloorKinds) {
      std::vector<double> v;
      for (const FloorResult& f : rounds) v.push_back(f.mops(kind));
      const size_t k = static_cast<size_t>(kind);
      fs.mops[k] = SpreadOf(v);
      fs.unstable[k] = fs.mops[k].Unstable(config.max_spread);
    }
    std::vector<double> pcts;
    for (const FloorResult& f : rounds) {
      const double lookup = f.mops(FloorKind::kLookup);
      pcts.push_back(lookup > 0 ? 100 * f.mops(FloorKind::kApi) / lookup : 0);
    }
    fs.api_pct_of_lookup = SpreadOf(pcts);
    fs.rounds = rounds;
    summary.floors.push_back(std::move(fs));
  }
  for (const FloorSummary& fs : summary.floors) {
    for (const FloorResult& f : fs.rounds) floor_of[{f.threads, f.round}] = &f;
  }

  // Per-round ratios to the first engine with the same row, and shares of the floor.
  std::map<std::tuple<std::string, int, int, uint32_t, int>, double> mops_of;
  std::set<std::tuple<std::string, int, int, uint32_t>> rows_of;
  for (const PhaseResult& r : outcome.rows) {
    mops_of[{r.engine, r.threads, r.phase_index, r.batch, r.round}] = r.mops();
    rows_of.insert({r.engine, r.threads, r.phase_index, r.batch});
  }
  for (RowSummary& s : summary.rows) {
    const PhaseResult& m = s.median;
    std::string base;  // the first engine of --engine with this row
    for (const std::string& e : config.engines) {
      if (rows_of.count({e, m.threads, m.phase_index, m.batch}) != 0) {
        base = e;
        break;
      }
    }
    std::vector<double> ratios, pcts;
    const std::optional<FloorKind> kind = FloorFor(m);
    for (const PhaseResult& r : s.rounds) {
      if (!base.empty() && base != m.engine) {
        const auto it = mops_of.find({base, r.threads, r.phase_index, r.batch, r.round});
        if (it != mops_of.end() && it->second > 0) ratios.push_back(r.mops() / it->second);
      }
      const auto f = floor_of.find({r.threads, r.round});
      if (kind && f != floor_of.end() && f->second->mops(*kind) > 0) {
        pcts.push_back(100 * r.mops() / f->second->mops(*kind));
      }
    }
    if (!ratios.empty()) {
      s.ratio = SpreadOf(ratios);
      s.ratio_to = base;
    }
    if (!pcts.empty()) {
      s.floor_pct = SpreadOf(pcts);
      s.floor_kind = kind;
    }
  }

  // Setup times per cell.
  for (const Cell& cell : cells) {
    std::vector<double> create, populate;
    for (const SetupTime& t : outcome.setups) {
      if (t.engine != cell.engine || t.threads != cell.threads) continue;
      create.push_back(t.create_ms);
      if (t.populate_ms) populate.push_back(*t.populate_ms);
    }
    if (create.empty()) continue;
    RunSummary::Setup setup{cell, Median(create), std::nullopt};
    if (!populate.empty()) setup.populate_ms = Median(populate);
    summary.setups.push_back(setup);
  }
  return summary;
}

std::vector<std::string> UnstableFigures(const RunSummary& summary) {
  std::vector<std::string> out;
  char buf[32];
  for (const RowSummary& s : summary.rows) {
    if (!s.unstable) continue;
    const PhaseResult& m = s.median;
    std::snprintf(buf, sizeof(buf), "%.2fx", s.mops.max_over_min());
    std::string phase = m.phase;
    if (m.batch > 1) phase += " (batch " + std::to_string(m.batch) + ")";
    out.push_back(m.engine + " " + phase + " t" + std::to_string(m.threads) + ": max/min " +
                  buf);
  }
  for (const FloorSummary& f : summary.floors) {
    for (FloorKind kind : kAllFloorKinds) {
      const size_t k = static_cast<size_t>(kind);
      if (!f.unstable[k]) continue;
      std::snprintf(buf, sizeof(buf), "%.2fx", f.mops[k].max_over_min());
      out.push_back(std::string("floor ") + FloorKindName(kind) + " t" +
                    std::to_string(f.threads) + ": max/min " + buf);
    }
  }
  return out;
}

}  // namespace pmhash::bench
