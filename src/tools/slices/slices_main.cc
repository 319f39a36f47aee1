// pmhash-slices: one side of `pmhash bench ab` in a process of its own, so that a side can
// be another build of the library (scripts/slices-at.sh builds this file against any
// commit's). It uses the public API and bench/ab_slices.h only, both of which compile
// against older trees.
//
//   pmhash-slices engine=E records=N seed=N threads=N lookups=get|u64 counters=on|off
//                 pool_size=N initial_capacity=N [path=FILE] [option=K=V ...]
//
// Opens a new index (path: a pool file that must not exist; none: a DRAM pool), builds
// the run's keys, then prints one line, "ready" or "error MESSAGE", and serves stdin:
//   run PHASE BEGIN END   ->  "ok SECONDS" or "error MESSAGE"  (ab_slices.h's operations)
//   quit (or end of input) ->  closes the index and exits 0.
// A bad argument prints "error ..." and exits 2. The pool file is the caller's to remove.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "bench/ab_slices.h"
#include "pmhash/index.h"
#include "pmhash/options.h"

namespace {

using pmhash::bench::ab::Lookup;
using pmhash::bench::ab::Phase;

// The hash seed, where this build's Options has one.
template <typename O>
void SetHashSeed(O& o, uint64_t seed) {
  if constexpr (requires { o.hash_seed = seed; }) o.hash_seed = seed;
}

bool ParseU64(const std::string& text, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9' || v > (UINT64_MAX - (c - '0')) / 10) return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

int Refuse(const std::string& message) {
  std::printf("error %s\n", message.c_str());
  std::fflush(stdout);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  pmhash::Options o;
  o.create_if_missing = true;
  o.error_if_exists = true;
  uint64_t records = 0, seed = 1, threads = 1;
  Lookup lookup = Lookup::kGet;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) return Refuse("'" + arg + "' is not KEY=VALUE");
    const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    bool good = true;
    if (key == "engine") {
      o.engine = value;
    } else if (key == "path") {
      o.path = value;
    } else if (key == "records") {
      good = ParseU64(value, &records) && records > 0 && records <= (uint64_t{1} << 32);
    } else if (key == "seed") {
      good = ParseU64(value, &seed);
    } else if (key == "threads") {
      good = ParseU64(value, &threads) && threads >= 1 && threads <= 64;
    } else if (key == "pool_size") {
      good = ParseU64(value, &o.pool_size);
    } else if (key == "initial_capacity") {
      good = ParseU64(value, &o.initial_capacity);
    } else if (key == "counters") {
      good = value == "on" || value == "off";
      o.count_stats = value == "on";
    } else if (key == "lookups") {
      good = value == "get" ||
             (value == "u64" && pmhash::bench::ab::kHasGetU64<pmhash::Index>);
      lookup = value == "u64" ? Lookup::kU64 : Lookup::kGet;
      if (!good) return Refuse("lookups=" + value + ": this build has " +
                               (pmhash::bench::ab::kHasGetU64<pmhash::Index> ? "get and u64" : "get only"));
    } else if (key == "option") {
      const size_t eq2 = value.find('=');
      good = eq2 != std::string::npos && eq2 > 0;
      if (good) o.engine_options[value.substr(0, eq2)] = value.substr(eq2 + 1);
    } else {
      return Refuse("unknown argument '" + key + "'");
    }
    if (!good) return Refuse("bad value in '" + arg + "'");
  }
  if (o.engine.empty() || records == 0) return Refuse("engine= and records= are required");
  SetHashSeed(o, seed);

  std::unique_ptr<pmhash::Index> index;
  pmhash::Status s = pmhash::Open(o, &index);
  if (!s.ok()) {
    std::printf("error %s\n", s.ToString().c_str());
    return 1;
  }
  const pmhash::bench::ab::Keys keys(records, seed);
  pmhash::bench::ab::SliceRunner<pmhash::Index> runner(&keys, lookup, static_cast<int>(threads));
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    std::istringstream in(line);
    std::string command, phase_name;
    uint64_t begin = 0, end = 0;
    Phase phase;
    in >> command >> phase_name >> begin >> end;
    if (!in || command != "run" || !pmhash::bench::ab::ParsePhase(phase_name, &phase) ||
        begin > end || (phase == Phase::kInsert && end > records) ||
        (phase == Phase::kDelete && end > records)) {
      std::printf("error bad command '%s'\n", line.substr(0, 80).c_str());
    } else {
      double seconds = 0;
      s = runner.Run(index.get(), phase, begin, end, &seconds);
      if (s.ok()) {
        std::printf("ok %.9f\n", seconds);
      } else {
        std::printf("error %s\n", s.ToString().c_str());
      }
    }
    std::fflush(stdout);
  }
  s = index->Close();
  return s.ok() ? 0 : 1;
}
