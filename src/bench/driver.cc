#include "bench/driver.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "bench/config.h"
#include "bench/pool_files.h"
#include "bench/report.h"
#include "bench/rounds.h"
#include "bench/runner.h"
#include "bench/scenario.h"
#include "bench/summary.h"
#include "bench/tables.h"

namespace pmhash::bench {

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// A progress bar on stderr: one line redrawn in place, cleared when a phase ends.
class ProgressBar {
 public:
  void Draw(const std::string& what, uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total && what == last_ && now - drawn_ < std::chrono::milliseconds(100)) return;
    drawn_ = now;
    last_ = what;
    if (done >= total) {
      std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
      return;
    }
    constexpr int kWidth = 30;
    const double frac = total == 0 ? 1 : static_cast<double>(done) / total;
    const int fill = static_cast<int>(frac * kWidth);
    std::string bar(fill, '#');
    bar += std::string(kWidth - fill, '.');
    std::fprintf(stderr, "\r\033[K%-28s [%s] %3.0f%%", what.c_str(), bar.c_str(), frac * 100);
    std::fflush(stderr);
  }

 private:
  std::string last_;
  std::chrono::steady_clock::time_point drawn_;
};

}  // namespace

int RunBenchArgs(const std::vector<std::string>& args, const BenchEnv& env) {
  auto usage = [&](const std::string& msg) {
    env.err("pmhash bench: " + msg + " (see pmhash bench --help)");
    return kExitUsage;
  };
  BenchConfig base;
  GlobalOptions global;
  Status s = ParseBenchArgs(args, &base, &global);
  if (!s.ok()) return usage(std::string(s.message()));
  if (global.help) {
    env.out(global.help_text);
    return kExitOk;
  }
  const std::string dir = FindScenarioDir(global.scenario_dir);
  if (global.list_scenarios) {
    for (const std::string& name : ListScenarios(dir)) {
      Scenario sc;
      std::string line = name;
      if (LoadScenario(dir, name, &sc).ok()) line += "\t" + sc.description;
      env.out(line + "\n");
    }
    return kExitOk;
  }

  if (global.list_engines) {
    for (const std::string& e : env.engines()) env.out(e + "\n");
    return kExitOk;
  }

  // The runs: one, or one per scenario run (scenario flags, then the command line's).
  std::vector<BenchConfig> runs;
  Scenario scenario;
  const bool is_scenario = !global.scenario.empty();
  if (is_scenario) {
    s = LoadScenario(dir, global.scenario, &scenario);
    if (!s.ok()) return usage(std::string(s.message()));
    for (const ScenarioRun& run : scenario.runs) {
      std::vector<std::string> all = scenario.args;
      all.insert(all.end(), run.args.begin(), run.args.end());
      all.insert(all.end(), args.begin(), args.end());
      BenchConfig config;
      GlobalOptions ignored;
      s = ParseBenchArgs(all, &config, &ignored);
      if (!s.ok()) return usage("scenario " + scenario.name + " run " + run.label + ": " +
                                std::string(s.message()));
      config.label = run.label;
      runs.push_back(std::move(config));
    }
  } else {
    runs.push_back(base);
  }

  const std::vector<std::string> registered = env.engines();
  if (registered.empty()) {
    env.err("pmhash bench: no engine is registered in this build");
    return kExitFailure;
  }
  for (BenchConfig& config : runs) {
    if (config.engines.empty()) config.engines = registered;
    std::vector<std::string> kept;
    for (const std::string& e : config.engines) {
      if (std::find(registered.begin(), registered.end(), EngineOf(e)) != registered.end()) {
        if (std::find(kept.begin(), kept.end(), e) == kept.end()) kept.push_back(e);
        continue;
      }
      if (!is_scenario) {
        return usage("unknown engine '" + e + "'; known engines: " + Join(registered, ", "));
      }
      // A scenario may name engines that are not built yet: run the others.
      if (env.warn) env.warn("scenario " + scenario.name + ": engine '" + e +
                             "' is not registered in this build; skipped");
    }
    if (kept.empty()) {
      env.err("pmhash bench: none of the engines of run " + config.label +
              " is registered (known: " + Join(registered, ", ") + ")");
      return kExitFailure;
    }
    config.engines = kept;
    s = ValidateConfig(config);
    if (!s.ok()) return usage(std::string(s.message()));
  }

  // --json: make sure the file can be written before spending the run on it (created
  // if missing; its old contents stay until the results replace them).
  if (!global.json_path.empty()) {
    const int fd = ::open(global.json_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return usage("--json " + global.json_path + ": cannot open for writing (" +
                   std::strerror(errno) + ")");
    }
    ::close(fd);
  }

  Json machine = MachineJson();
  if (!global.quiet) {
    env.out(HeaderText(machine, runs[0]));
    if (is_scenario) {
      env.out("  Scenario:   " + scenario.name + " — " + scenario.description + "\n");
    }
  }

  std::vector<RunSummary> summaries;
  int exit_code = kExitOk;
  uint64_t checksum = 0;
  for (const BenchConfig& config : runs) {
    if (!global.quiet && (runs.size() > 1 || is_scenario)) {
      env.out("\n### run " + config.label + "\n");
    }
    const RunOutcome outcome = RunRounds(config, env);
    if (outcome.failures > 0) exit_code = kExitFailure;
    for (const PhaseResult& r : outcome.rows) checksum += r.checksum;
    RunSummary summary = Summarize(config, outcome);
    if (!global.quiet) {
      env.out(PhaseTables(summary, config.engines) + FloorTable(summary) +
              SetupLine(summary));
    }
    summaries.push_back(std::move(summary));
  }
  if (!global.quiet) {
    if (is_scenario && !scenario.paper.empty()) {
      env.out("\nWhat the paper reports (compare with the tables above):\n");
      for (const std::string& line : scenario.paper) env.out("  - " + line + "\n");
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(checksum));
    env.out(std::string("\nchecksum of the values read: ") + buf + "\n");
    env.out(StabilityText(summaries));
  }

  // What the pools were (a DAX mapping shows only once opened), and the load now.
  std::string mapping;
  for (const RunSummary& run : summaries) {
    if (mapping.empty() && !run.rows.empty()) mapping = run.rows[0].median.mapping;
    if (mapping.empty() && !run.floors.empty()) mapping = run.floors[0].rounds[0].mapping;
  }
  machine.Set("pool_kind", PoolKind(runs[0], mapping));
  machine.Set("load_average_end", LoadAverage());

  if (!global.json_path.empty()) {
    Json config = runs[0].ToJson();
    if (is_scenario) {
      config.Set("scenario", scenario.name);
      config.Set("description", scenario.description);
      Json paper = Json::Array();
      for (const std::string& line : scenario.paper) paper.Push(line);
      config.Set("paper", paper);
      // The scenario's arguments as run, so a table written from this file
      // (scripts/bench-tables.py) names the command that made it.
      auto joined = [](const std::vector<std::string>& words) {
        std::string text;
        for (const std::string& w : words) text += (text.empty() ? "" : " ") + w;
        return text;
      };
      config.Set("scenario_args", joined(scenario.args));
      Json run_args = Json::Array();
      for (const ScenarioRun& r : scenario.runs) {
        Json one = Json::Object();
        one.Set("label", r.label);
        one.Set("args", joined(r.args));
        run_args.Push(one);
      }
      config.Set("scenario_runs", run_args);
      Json rs = Json::Array();
      for (const BenchConfig& c : runs) rs.Push(c.ToJson());
      config.Set("runs", rs);
    }
    const std::string text = ResultsJson(config, machine, summaries).Dump(2);
    std::ofstream out(global.json_path, std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      env.err("pmhash bench: cannot write --json " + global.json_path);
      return kExitFailure;
    }
  }
  return exit_code;
}

int RunBench(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  BenchEnv env = DefaultEnv();
  // The progress bar: only when stderr is a terminal (or forced), never in a pipe.
  bool progress = ::isatty(STDERR_FILENO) != 0;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--progress") progress = args[i + 1] == "on" || (args[i + 1] == "auto" && progress);
  }
  for (const std::string& a : args) {
    if (a == "--progress=on") progress = true;
    if (a == "--progress=off") progress = false;
  }
  auto bar = std::make_shared<ProgressBar>();
  if (progress) {
    env.progress = [bar](const std::string& what, uint64_t done, uint64_t total) {
      bar->Draw(what, done, total);
    };
  }
  InstallCleanupHandler();
  return RunBenchArgs(args, env);
}

}  // namespace pmhash::bench
