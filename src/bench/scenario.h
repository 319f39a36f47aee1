// Scenario files: bench/scenarios/NAME.json, one paper experiment (or the main job) each.
//
//   {
//     "name": "group-fig5",
//     "description": "one line",
//     "args": "--engine group,linear --write-latency-ns 300",  // flags for every run
//     "runs": [ {"label": "lf0.5", "args": "--load-factor 0.5"}, ... ],  // optional
//     "paper": ["what the paper reports, one claim per line", ...]
//   }
//
// "args" may be a string (split on spaces) or an array of strings. Flags given on the
// command line next to --scenario come last, so they override the file.
#pragma once

#include <string>
#include <vector>

#include "bench/json.h"
#include "pmhash/status.h"

namespace pmhash::bench {

struct ScenarioRun {
  std::string label;
  std::vector<std::string> args;
};

struct Scenario {
  std::string name, description, path;
  std::vector<std::string> args;
  std::vector<ScenarioRun> runs;
  std::vector<std::string> paper;
  Json raw;
};

Status ParseScenario(const std::string& text, const std::string& path, Scenario* out);
// Loads `dir`/NAME.json. NotFound listing the scenarios in `dir` if missing.
Status LoadScenario(const std::string& dir, const std::string& name, Scenario* out);
// Scenario names in `dir`, sorted.
std::vector<std::string> ListScenarios(const std::string& dir);
// --scenario-dir, else $PMHASH_SCENARIO_DIR, else bench/scenarios next to the source
// tree the executable was built in (../../bench/scenarios from build/<preset>/pmhash),
// else ./bench/scenarios. "" if none exists.
std::string FindScenarioDir(const std::string& flag);

}  // namespace pmhash::bench
