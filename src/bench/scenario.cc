#include "bench/scenario.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "bench/config.h"

namespace pmhash::bench {

static Status Args(const Json* j, const std::string& where, std::vector<std::string>* out) {
  if (j == nullptr || j->is_null()) return Status::OK();
  if (j->is_string()) {
    for (const std::string& a : SplitList(j->string(), ' ')) out->push_back(a);
    return Status::OK();
  }
  if (j->is_array()) {
    for (const Json& a : j->items()) {
      if (!a.is_string()) return Status::InvalidArgument(where + ": args must be strings");
      out->push_back(a.string());
    }
    return Status::OK();
  }
  return Status::InvalidArgument(where + ": args must be a string or an array of strings");
}

Status ParseScenario(const std::string& text, const std::string& path, Scenario* out) {
  Json j;
  Status s = Json::Parse(text, &j);
  if (!s.ok()) return Status::InvalidArgument(path + ": " + std::string(s.message()));
  if (!j.is_object()) return Status::InvalidArgument(path + ": expected a JSON object");
  Scenario sc;
  sc.path = path;
  if (const Json* v = j.Find("name"); v != nullptr && v->is_string()) sc.name = v->string();
  if (const Json* v = j.Find("description"); v != nullptr && v->is_string()) {
    sc.description = v->string();
  }
  PMHASH_RETURN_IF_ERROR(Args(j.Find("args"), path, &sc.args));
  if (const Json* runs = j.Find("runs"); runs != nullptr) {
    if (!runs->is_array()) return Status::InvalidArgument(path + ": runs must be an array");
    for (const Json& r : runs->items()) {
      ScenarioRun run;
      if (const Json* l = r.Find("label"); l != nullptr && l->is_string()) run.label = l->string();
      if (run.label.empty()) run.label = "run" + std::to_string(sc.runs.size() + 1);
      PMHASH_RETURN_IF_ERROR(Args(r.Find("args"), path + " run " + run.label, &run.args));
      sc.runs.push_back(std::move(run));
    }
  }
  if (sc.runs.empty()) sc.runs.push_back({"main", {}});
  if (const Json* p = j.Find("paper"); p != nullptr) {
    if (p->is_string()) sc.paper.push_back(p->string());
    for (const Json& line : p->items()) {
      if (line.is_string()) sc.paper.push_back(line.string());
    }
  }
  sc.raw = std::move(j);
  *out = std::move(sc);
  return Status::OK();
}

std::vector<std::string> ListScenarios(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) {
        names.push_back(n.substr(0, n.size() - 5));
      }
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Status LoadScenario(const std::string& dir, const std::string& name, Scenario* out) {
  if (name.find('/') != std::string::npos) {
    // A path to a file works too.
    std::ifstream in(name);
    if (!in) return Status::NotFound("scenario file " + name + " cannot be read");
    std::stringstream ss;
    ss << in.rdbuf();
    return ParseScenario(ss.str(), name, out);
  }
  if (dir.empty()) {
    return Status::NotFound("no scenario directory found; pass --scenario-dir or set "
                            "PMHASH_SCENARIO_DIR");
  }
  const std::string path = dir + "/" + name + ".json";
  std::ifstream in(path);
  if (!in) {
    std::string known;
    for (const std::string& n : ListScenarios(dir)) known += (known.empty() ? "" : ", ") + n;
    return Status::NotFound("unknown scenario '" + name + "' (in " + dir +
                            ": " + (known.empty() ? "none" : known) + ")");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  Status s = ParseScenario(ss.str(), path, out);
  if (s.ok() && out->name.empty()) out->name = name;
  return s;
}

static bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string FindScenarioDir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("PMHASH_SCENARIO_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string dir(exe);
    // Walk up from the executable's directory: build/<preset>/pmhash -> repo root.
    for (int up = 0; up < 4; ++up) {
      const size_t slash = dir.rfind('/');
      if (slash == std::string::npos || slash == 0) break;
      dir.resize(slash);
      if (IsDir(dir + "/bench/scenarios")) return dir + "/bench/scenarios";
    }
  }
  if (IsDir("bench/scenarios")) return "bench/scenarios";
  return "";
}

}  // namespace pmhash::bench
