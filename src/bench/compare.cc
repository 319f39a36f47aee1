#include "bench/compare.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "bench/tables.h"

namespace pmhash::bench {

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kFaster: return "faster";
    case Verdict::kSlower: return "slower";
    case Verdict::kNoise: return "noise";
    case Verdict::kOneRound: return "1 round";
  }
  return "?";
}

namespace {

using Key = std::tuple<std::string, std::string, int, std::string, int, uint32_t>;

struct Side {
  std::vector<Key> order;
  std::map<Key, Spread> mops;
  std::set<std::string> engines;
};

std::string KeyText(const Key& k) {
  const auto& [run, engine, threads, phase, index, batch] = k;
  std::string s = engine + " " + phase;
  if (batch > 1) s += " (batch " + std::to_string(batch) + ")";
  s += " t" + std::to_string(threads);
  if (!run.empty() && run != "main") s += " run " + run;
  return s;
}

// The Mops/s of a row or floor loop: its mops_range, else its mops as one round.
Status SpreadOfRow(const Json& row, const char* mops_field, Spread* out) {
  const Json* range = row.Find("mops_range");
  if (range != nullptr && range->is_object()) {
    const Json* samples = range->Find("samples");
    if (samples != nullptr && samples->is_array() && !samples->items().empty()) {
      std::vector<double> v;
      for (const Json& x : samples->items()) {
        if (!x.is_number()) return Status::InvalidArgument("a mops_range sample is not a number");
        v.push_back(x.number());
      }
      *out = SpreadOf(v);
      return Status::OK();
    }
  }
  const Json* mops = row.Find(mops_field);
  if (mops == nullptr || !mops->is_number()) {
    return Status::InvalidArgument(std::string("a row has no numeric ") + mops_field);
  }
  *out = SpreadOf({mops->number()});
  return Status::OK();
}

Status ReadSide(const Json& doc, const char* which, Side* side) {
  auto bad = [which](const std::string& why) {
    return Status::InvalidArgument(std::string(which) +
                                   " is not a pmhash bench --json result file: " + why);
  };
  if (!doc.is_object()) return bad("not a JSON object");
  const Json* results = doc.Find("results");
  if (results == nullptr || !results->is_array()) return bad("no results array");
  for (const Json& row : results->items()) {
    const Json* engine = row.Find("engine");
    const Json* phase = row.Find("phase");
    const Json* threads = row.Find("threads");
    if (engine == nullptr || !engine->is_string() || phase == nullptr || !phase->is_string() ||
        threads == nullptr || !threads->is_uint()) {
      return bad("a result has no engine, phase or thread count");
    }
    const Json* run = row.Find("run");
    const Json* index = row.Find("phase_index");
    const Json* batch = row.Find("batch");
    // Files from before scenario runs name none: their one run was "main".
    const Key key{run != nullptr && run->is_string() ? run->string() : "main",
                  engine->string(),
                  static_cast<int>(threads->uint()),
                  phase->string(),
                  index != nullptr && index->is_uint() ? static_cast<int>(index->uint()) : -1,
                  batch != nullptr && batch->is_uint() ? static_cast<uint32_t>(batch->uint())
                                                       : 1u};
    Spread s;
    Status st = SpreadOfRow(row, "mops", &s);
    if (!st.ok()) return bad(std::string(st.message()));
    if (side->mops.emplace(key, s).second) side->order.push_back(key);
    side->engines.insert(engine->string());
  }
  // The floor loops, as rows of engine "floor".
  const Json* floors = doc.Find("floor");
  if (floors != nullptr && floors->is_array()) {
    for (const Json& f : floors->items()) {
      const Json* loops = f.Find("loops");
      const Json* threads = f.Find("threads");
      const Json* run = f.Find("run");
      if (loops == nullptr || !loops->is_object() || threads == nullptr || !threads->is_uint()) {
        return bad("a floor entry has no loops or thread count");
      }
      for (const auto& [name, loop] : loops->members()) {
        const Key key{run != nullptr && run->is_string() ? run->string() : "main", "floor",
                      static_cast<int>(threads->uint()), name, -1, 1u};
        Spread s;
        Status st = SpreadOfRow(loop, "mops", &s);
        if (!st.ok()) return bad("floor " + name + ": " + std::string(st.message()));
        if (side->mops.emplace(key, s).second) side->order.push_back(key);
      }
    }
  }
  return Status::OK();
}

// The row of `side` that `k` (of the other file) matches: the same key, or, when one
// file predates phase_index (-1), the same key at any position.
const Key* Match(const Side& side, const Key& k, const std::set<Key>& taken) {
  if (side.mops.count(k) != 0) return &side.mops.find(k)->first;
  for (const Key& o : side.order) {
    if (taken.count(o) != 0) continue;
    if (std::get<4>(o) != -1 && std::get<4>(k) != -1) continue;
    if (std::get<0>(o) == std::get<0>(k) && std::get<1>(o) == std::get<1>(k) &&
        std::get<2>(o) == std::get<2>(k) && std::get<3>(o) == std::get<3>(k) &&
        std::get<5>(o) == std::get<5>(k)) {
      return &o;
    }
  }
  return nullptr;
}

Verdict Judge(const Spread& old_mops, const Spread& new_mops) {
  if (old_mops.samples.size() < 2 || new_mops.samples.size() < 2) return Verdict::kOneRound;
  if (new_mops.min > old_mops.max) return Verdict::kFaster;
  if (new_mops.max < old_mops.min) return Verdict::kSlower;
  return Verdict::kNoise;
}

std::string Scalar(const Json* v) {
  if (v == nullptr || v->is_null()) return "null";
  return v->is_string() ? v->string() : v->Dump(-1);
}

// Fields of `section` that differ between the documents: "config.records 1000 vs 2000".
void Differences(const Json& a, const Json& b, const char* section,
                 const std::vector<const char*>& fields, std::vector<std::string>* out) {
  const Json* sa = a.Find(section);
  const Json* sb = b.Find(section);
  if (sa == nullptr || sb == nullptr) return;
  for (const char* f : fields) {
    const std::string va = Scalar(sa->Find(f)), vb = Scalar(sb->Find(f));
    if (va != vb) out->push_back(std::string(section) + "." + f + ": " + va + " vs " + vb);
  }
}

}  // namespace

Status CompareResults(const Json& old_doc, const Json& new_doc, Comparison* out) {
  Side a, b;
  PMHASH_RETURN_IF_ERROR(ReadSide(old_doc, "OLD", &a));
  PMHASH_RETURN_IF_ERROR(ReadSide(new_doc, "NEW", &b));
  bool common = false;
  for (const std::string& e : a.engines) common = common || b.engines.count(e) != 0;
  if (!common) {
    std::string olds, news;
    for (const std::string& e : a.engines) olds += (olds.empty() ? "" : ",") + e;
    for (const std::string& e : b.engines) news += (news.empty() ? "" : ",") + e;
    return Status::InvalidArgument("no engine in common (OLD: " + olds + "; NEW: " + news + ")");
  }
  Comparison c;
  std::set<Key> matched;  // rows of OLD
  for (const Key& k : b.order) {
    const Key* o = Match(a, k, matched);
    if (o == nullptr) {
      c.only_new.push_back(KeyText(k));
      continue;
    }
    matched.insert(*o);
    CompareRow row;
    std::tie(row.run, row.engine, row.threads, row.phase, row.phase_index, row.batch) = k;
    row.old_mops = a.mops.at(*o);
    row.new_mops = b.mops.at(k);
    row.ratio = row.old_mops.median > 0 ? row.new_mops.median / row.old_mops.median : 0;
    row.verdict = Judge(row.old_mops, row.new_mops);
    c.rows.push_back(row);
  }
  for (const Key& k : a.order) {
    if (matched.count(k) == 0) c.only_old.push_back(KeyText(k));
  }
  bool engine_row = false;
  for (const CompareRow& r : c.rows) engine_row = engine_row || r.engine != "floor";
  if (!engine_row) {
    return Status::InvalidArgument("no (engine, phase, thread count) row is in both files");
  }
  Differences(old_doc, new_doc, "config",
              {"records", "ops", "dist", "key_size", "value_size", "load_factor", "pool",
               "persist", "flush", "write_latency_ns", "seed", "pin", "floor_prefetch"},
              &c.differences);
  Differences(old_doc, new_doc, "machine",
              {"cpu", "cores", "kernel", "build_type", "commit", "pool_kind"}, &c.differences);
  *out = std::move(c);
  return Status::OK();
}

std::string CompareText(const Comparison& c, const std::string& old_path,
                        const std::string& new_path) {
  size_t old_rounds = 0, new_rounds = 0;
  for (const CompareRow& r : c.rows) {
    old_rounds = std::max(old_rounds, r.old_mops.samples.size());
    new_rounds = std::max(new_rounds, r.new_mops.samples.size());
  }
  std::string out = "pmhash bench compare: OLD " + old_path + " (" +
                    std::to_string(old_rounds) + " round" + (old_rounds == 1 ? "" : "s") +
                    ") vs NEW " + new_path + " (" + std::to_string(new_rounds) + " round" +
                    (new_rounds == 1 ? "" : "s") + "); Mops/s, median (min-max)\n\n";
  std::vector<std::vector<std::string>> cells = {
      {"engine", "phase", "threads", "OLD", "NEW", "NEW/OLD", "verdict"}};
  bool runs = false;
  for (const CompareRow& r : c.rows) runs = runs || (!r.run.empty() && r.run != "main");
  if (runs) cells[0].insert(cells[0].begin(), "run");
  for (const CompareRow& r : c.rows) {
    std::string phase = r.phase;
    if (r.batch > 1) phase += " (batch " + std::to_string(r.batch) + ")";
    std::vector<std::string> row = {r.engine, phase, std::to_string(r.threads),
                                    Ranged("%.3f", r.old_mops), Ranged("%.3f", r.new_mops),
                                    Format("%.2f", r.ratio) + "x", VerdictName(r.verdict)};
    if (runs) row.insert(row.begin(), r.run);
    cells.push_back(std::move(row));
  }
  out += Grid(cells);
  out += "\nverdict: faster / slower when both files measured 2 rounds or more and the "
         "[min, max] ranges do not overlap (the difference exceeds the spread of either "
         "side); noise when they overlap; 1 round when a side has one round (its spread is "
         "unknown: rerun with --repeat 3 or more)\n";
  auto list = [&](const char* title, const std::vector<std::string>& items) {
    if (items.empty()) return;
    out += std::string(title);
    for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? " " : "; ") + items[i];
    out += "\n";
  };
  list("only in OLD:", c.only_old);
  list("only in NEW:", c.only_new);
  list("differs (compare like with like):", c.differences);
  return out;
}

int RunCompareArgs(const std::vector<std::string>& args, const BenchEnv& env) {
  static const char* kUsage =
      "usage: pmhash bench compare OLD.json NEW.json\n"
      "  Two result files of pmhash bench --json side by side per run, engine, thread count\n"
      "  and phase (and floor loop): Mops/s median (min-max), NEW/OLD of the medians, and\n"
      "  a verdict: faster / slower when both files have 2 rounds or more (--repeat) and\n"
      "  the [min, max] ranges do not overlap; noise when they overlap; 1 round when a\n"
      "  side has one round. Settings and machine fields that differ are listed.\n";
  auto usage = [&](const std::string& msg) {
    env.err("pmhash bench compare: " + msg + " (see pmhash bench compare --help)");
    return 2;
  };
  std::vector<std::string> files;
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") {
      env.out(kUsage);
      return 0;
    }
    if (a.size() > 1 && a[0] == '-') return usage("unknown option " + a);
    files.push_back(a);
  }
  if (files.size() != 2) return usage("expected two result files, OLD.json and NEW.json");
  Json docs[2];
  for (int i = 0; i < 2; ++i) {
    std::ifstream in(files[i]);
    if (!in) return usage("cannot read " + files[i]);
    std::stringstream text;
    text << in.rdbuf();
    Status s = Json::Parse(text.str(), &docs[i]);
    if (!s.ok()) return usage(files[i] + ": " + std::string(s.message()));
  }
  Comparison c;
  Status s = CompareResults(docs[0], docs[1], &c);
  if (!s.ok()) return usage(std::string(s.message()));
  env.out(CompareText(c, files[0], files[1]));
  return 0;
}

}  // namespace pmhash::bench
