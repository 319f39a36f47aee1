#include "bench/ab.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "bench/json.h"
#include "bench/messages.h"
#include "engines/engine.h"

namespace pmhash::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The i-th key of the run: distinct for distinct i (an invertible mix of i and the seed).
uint64_t KeyAt(uint64_t i, uint64_t seed) {
  uint64_t x = i ^ (seed * 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string_view Bytes(const uint64_t& w) {
  return {reinterpret_cast<const char*>(&w), sizeof(w)};
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// s with `context` in front of its message, its code kept.
Status WithContext(const Status& s, const std::string& context) {
  const std::string m = context + std::string(s.message());
  switch (s.code()) {
    case Status::Code::kOk: return s;
    case Status::Code::kNotFound: return Status::NotFound(m);
    case Status::Code::kAlreadyExists: return Status::AlreadyExists(m);
    case Status::Code::kInvalidArgument: return Status::InvalidArgument(m);
    case Status::Code::kIOError: return Status::IOError(m);
    case Status::Code::kResourceExhausted: return Status::ResourceExhausted(m, s.subcode());
    case Status::Code::kBusy: return Status::Busy(m);
    default: return Status::Corruption(m);
  }
}

// One operation of `phase` on key k, checked.
Status RunOne(const std::string& phase, engines::Engine* index, uint64_t k) {
  if (phase == "insert") return index->Insert(Bytes(k), Bytes(k));
  if (phase == "search" || phase == "negative") {
    uint64_t v = 0;
    Status s = index->GetU64(k, &v);
    if (phase == "negative") {
      return s.IsNotFound() ? Status::OK()
                            : s.ok() ? Status::Corruption("ab: a negative search found a key") : s;
    }
    if (s.ok() && v != k) return Status::Corruption("ab: a search read the wrong value");
    return s;
  }
  return index->Delete(Bytes(k));
}

// Opens the two indexes of one order: places[0] and places[1] get the options of A and B
// (first = A in the first index).
Status OpenPair(const AbConfig& c, const BenchEnv& env, bool a_first,
                std::unique_ptr<engines::Engine> index[2], std::string paths[2]) {
  for (int i = 0; i < 2; ++i) {
    Options o;
    o.engine = c.engine;
    o.hash_seed = c.seed;
    o.create_if_missing = true;
    o.error_if_exists = true;
    // A bound no engine's PM per key comes near (sparse in tmpfs: only what is used).
    o.pool_size = std::max<uint64_t>(256ull << 20, c.records * 192);
    if (!c.dram_pool) {
      paths[i] = "/dev/shm/pmhash-ab-" + std::to_string(getpid()) + "-" + std::to_string(i);
      o.path = paths[i];
    }
    o.engine_options = c.common_options;
    const bool is_a = (i == 0) == a_first;
    for (const auto& [k, v] : is_a ? c.a_options : c.b_options) o.engine_options[k] = v;
    Status s = env.open(o, &index[i]);
    if (!s.ok()) return WithContext(s, is_a ? "A: " : "B: ");
  }
  return Status::OK();
}

}  // namespace

Status ValidateAb(const AbConfig& c) {
  if (c.engine.empty()) return Status::InvalidArgument("--engine is required");
  if (c.records == 0 || c.slice == 0 || c.ops == 0) {
    return Status::InvalidArgument("--records, --ops and --slice must be at least 1");
  }
  if (c.records > (uint64_t{1} << 32)) return Status::InvalidArgument("--records: at most 2^32");
  if (c.orders != 1 && c.orders != 2) return Status::InvalidArgument("--orders: 1 or 2");
  if (c.phases.empty() || c.phases[0] != "insert") {
    return Status::InvalidArgument("--phases: insert first (it loads both indexes)");
  }
  for (const std::string& p : c.phases) {
    if (p != "insert" && p != "search" && p != "negative" && p != "delete") {
      return Status::InvalidArgument("--phases: unknown phase '" + p.substr(0, 40) +
                                     "' (insert, search, negative, delete)");
    }
  }
  return Status::OK();
}

Status MeasureAb(const AbConfig& c, const BenchEnv& env, AbResult* result) {
  PMHASH_RETURN_IF_ERROR(ValidateAb(c));
  result->phases.clear();
  for (const std::string& p : c.phases) result->phases.push_back(AbPhase{p, {}, {}, {}, 0});
  std::vector<uint64_t> keys(c.records);
  for (uint64_t i = 0; i < c.records; ++i) keys[i] = KeyAt(i, c.seed);
  // Search and delete: `ops` keys in a shuffled order (delete: each once).
  std::vector<uint64_t> shuffled = keys;
  for (uint64_t i = shuffled.size() - 1; i > 0; --i) {
    std::swap(shuffled[i], shuffled[KeyAt(i, c.seed + 1) % (i + 1)]);
  }
  for (int order = 0; order < c.orders; ++order) {
    std::unique_ptr<engines::Engine> index[2];
    std::string paths[2];
    Status s = OpenPair(c, env, order == 0, index, paths);
    for (size_t p = 0; s.ok() && p < c.phases.size(); ++p) {
      const std::string& phase = c.phases[p];
      std::vector<uint64_t> picks;
      const std::vector<uint64_t>* run = &keys;
      if (phase != "insert") {
        const uint64_t n = phase == "delete" ? std::min(c.ops, c.records) : c.ops;
        picks.resize(n);
        for (uint64_t i = 0; i < n; ++i) {
          // Negative: keys past the inserted ones (KeyAt is one-to-one: none was inserted).
          picks[i] = phase == "negative" ? KeyAt(c.records + i, c.seed)
                                         : shuffled[i % shuffled.size()];
        }
        run = &picks;
      }
      std::vector<double> ratios, a_mops, b_mops;
      for (uint64_t begin = 0, k = 0; s.ok() && begin < run->size(); begin += c.slice, ++k) {
        const uint64_t end = std::min<uint64_t>(run->size(), begin + c.slice);
        double seconds[2] = {0, 0};
        for (int j = 0; j < 2 && s.ok(); ++j) {
          const int i = (k % 2 == 0) ? j : 1 - j;  // which index goes first alternates
          const auto t0 = Clock::now();
          for (uint64_t x = begin; x < end && s.ok(); ++x) s = RunOne(phase, index[i].get(), (*run)[x]);
          seconds[i] = std::chrono::duration<double>(Clock::now() - t0).count();
        }
        if (!s.ok()) break;
        const double a = seconds[order == 0 ? 0 : 1], b = seconds[order == 0 ? 1 : 0];
        const double n = static_cast<double>(end - begin) / 1e6;
        ratios.push_back(a / b);
        a_mops.push_back(n / a);
        b_mops.push_back(n / b);
      }
      if (!s.ok()) {
        s = WithContext(s, phase + ": ");
        break;
      }
      AbPhase& r = result->phases[p];
      r.ratios.push_back(std::move(ratios));
      r.a_mops.push_back(std::move(a_mops));
      r.b_mops.push_back(std::move(b_mops));
    }
    for (int i = 0; i < 2; ++i) {
      index[i].reset();
      if (!paths[i].empty()) unlink(paths[i].c_str());
    }
    PMHASH_RETURN_IF_ERROR(s);
  }
  for (AbPhase& r : result->phases) {
    double log_sum = 0;
    for (const std::vector<double>& v : r.ratios) log_sum += std::log(Quantile(v, 0.5));
    r.ratio = std::exp(log_sum / static_cast<double>(r.ratios.size()));
  }
  return Status::OK();
}

int RunAbArgs(const std::vector<std::string>& args, const BenchEnv& env) {
  CLI::App app{"Two configurations of one engine, measured slice by slice in one process "
               "(the ratio per slice is A's time over B's: above 1, B is faster)."};
  app.name("pmhash bench ab");
  AbConfig c;
  std::vector<std::string> a_opts, b_opts, opts;
  std::string phases = "insert,search,delete", pool = "shm", json;
  app.add_option("--engine", c.engine, "The engine")->required();
  app.add_option("--a", a_opts, "A's engine options, K=V (repeatable; none: the defaults)");
  app.add_option("--b", b_opts, "B's engine options, K=V (repeatable)");
  app.add_option("--opt", opts, "Both sides' engine options, K=V (repeatable)");
  app.add_option("--records", c.records, "Keys inserted (default 1000000)");
  app.add_option("--ops", c.ops, "Searches and deletes (default 2000000; deletes at most --records)");
  app.add_option("--slice", c.slice, "Operations per slice (default 100000)");
  app.add_option("--phases", phases,
                 "Comma-separated of insert, search, negative, delete; insert first (default "
                 "insert,search,delete)");
  app.add_option("--pool", pool, "shm (files in /dev/shm, default) or dram");
  app.add_option("--orders", c.orders, "2 (default): also with the two places swapped; 1: A first");
  app.add_option("--seed", c.seed, "Keys and hash seed (default 1)");
  app.add_option("--json", json, "Also write the per-slice figures to this JSON file");
  std::vector<std::string> argv_text = {"pmhash bench ab"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return Fail(2, std::string("bench ab: ") + e.what());
  }
  const auto parse_kv = [](const std::vector<std::string>& in,
                           std::map<std::string, std::string>* out, const char* flag) {
    for (const std::string& kv : in) {
      const size_t eq = kv.find('=');
      if (eq == 0 || eq == std::string::npos) {
        return Status::InvalidArgument(std::string(flag) + ": '" + kv.substr(0, 60) +
                                       "' is not KEY=VALUE");
      }
      (*out)[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    return Status::OK();
  };
  Status s = parse_kv(a_opts, &c.a_options, "--a");
  if (s.ok()) s = parse_kv(b_opts, &c.b_options, "--b");
  if (s.ok()) s = parse_kv(opts, &c.common_options, "--opt");
  if (!s.ok()) return Fail(2, "bench ab: " + std::string(s.message()));
  c.phases.clear();
  for (size_t at = 0; at <= phases.size();) {
    const size_t comma = std::min(phases.find(',', at), phases.size());
    c.phases.push_back(phases.substr(at, comma - at));
    at = comma + 1;
  }
  if (pool != "shm" && pool != "dram") {
    return Fail(2, "bench ab: --pool: '" + pool.substr(0, 40) + "' (shm or dram)");
  }
  c.dram_pool = pool == "dram";
  s = ValidateAb(c);
  if (!s.ok()) return Fail(2, "bench ab: " + std::string(s.message()));
  WarnIfDebugBuild();
  AbResult r;
  s = MeasureAb(c, env, &r);
  if (!s.ok()) return Fail(1, "bench ab: " + std::string(s.message()));

  auto join = [](const std::map<std::string, std::string>& m) {
    std::string t;
    for (const auto& [k, v] : m) t += (t.empty() ? "" : ",") + k + "=" + v;
    return t.empty() ? std::string("(defaults)") : t;
  };
  char line[512];
  std::snprintf(line, sizeof(line),
                "pmhash bench ab: %s, A %s, B %s%s%s; %llu keys, slices of %llu, %s pools, %d "
                "order%s\n",
                c.engine.c_str(), join(c.a_options).c_str(), join(c.b_options).c_str(),
                c.common_options.empty() ? "" : ", both ", c.common_options.empty() ? "" : join(c.common_options).c_str(),
                static_cast<unsigned long long>(c.records), static_cast<unsigned long long>(c.slice),
                c.dram_pool ? "DRAM" : "/dev/shm", c.orders, c.orders == 1 ? "" : "s");
  env.out(line);
  env.out("phase    order  slices  A Mops/s (IQR)        B Mops/s (IQR)        B/A per slice, median (IQR)\n");
  for (const AbPhase& p : r.phases) {
    for (size_t o = 0; o < p.ratios.size(); ++o) {
      std::snprintf(line, sizeof(line), "%-8s %-6s %6zu  %5.2f (%5.2f-%5.2f)   %5.2f (%5.2f-%5.2f)   %.3f (%.3f-%.3f)\n",
                    p.phase.c_str(), o == 0 ? "A, B" : "B, A", p.ratios[o].size(),
                    Quantile(p.a_mops[o], .5), Quantile(p.a_mops[o], .25), Quantile(p.a_mops[o], .75),
                    Quantile(p.b_mops[o], .5), Quantile(p.b_mops[o], .25), Quantile(p.b_mops[o], .75),
                    Quantile(p.ratios[o], .5), Quantile(p.ratios[o], .25), Quantile(p.ratios[o], .75));
      env.out(line);
    }
    std::snprintf(line, sizeof(line), "%-8s B/A %.3f%s\n", p.phase.c_str(), p.ratio,
                  p.ratios.size() == 2 ? " (geometric mean of the two orders' medians)" : "");
    env.out(line);
  }
  if (!json.empty()) {
    Json doc = Json::Object();
    doc.Set("engine", c.engine);
    doc.Set("a", join(c.a_options));
    doc.Set("b", join(c.b_options));
    doc.Set("both", join(c.common_options));
    doc.Set("records", c.records);
    doc.Set("ops", c.ops);
    doc.Set("slice", c.slice);
    doc.Set("seed", c.seed);
    Json phases_json = Json::Array();
    for (const AbPhase& p : r.phases) {
      Json phase = Json::Object();
      phase.Set("phase", p.phase);
      phase.Set("ratio", p.ratio);
      Json orders = Json::Array();
      for (size_t o = 0; o < p.ratios.size(); ++o) {
        auto list = [](const std::vector<double>& v) {
          Json a = Json::Array();
          for (double x : v) a.Push(x);
          return a;
        };
        Json order = Json::Object();
        order.Set("a_first", o == 0);
        order.Set("ratios", list(p.ratios[o]));
        order.Set("a_mops", list(p.a_mops[o]));
        order.Set("b_mops", list(p.b_mops[o]));
        orders.Push(std::move(order));
      }
      phase.Set("orders", std::move(orders));
      phases_json.Push(std::move(phase));
    }
    doc.Set("phases", std::move(phases_json));
    std::ofstream f(json);
    f << doc.Dump() << "\n";
    if (!f) return Fail(1, "bench ab: cannot write " + json);
  }
  return 0;
}

}  // namespace pmhash::bench
