// `pmhash engines [NAME]`: what the registry says about each engine (engines/engine_info.h).
#include <algorithm>
#include <cstdio>
#include <string>

#include "engines/engine.h"
#include "tools/commands.h"

namespace pmhash::tools {
namespace {

std::string Capabilities(const engines::EngineCapabilities& c) {
  std::string out;
  auto add = [&](const std::string& s) {
    if (!out.empty()) out += ", ";
    out += s;
  };
  if (c.resizes) add("resizes");
  if (c.resize_switch) {
    add(c.refuses_when_full ? "resize=off (then a full table refuses: TableFull)"
                            : "resize=off (chains grow instead; never refuses)");
  }
  if (c.background_work) add("background work");
  if (c.variable_size_keys) add("keys and values of any size");
  if (c.pipelined_multiget) add("pipelined MultiGet");
  std::string modes = "persist ";
  for (size_t i = 0; i < c.persist_modes.size(); ++i) {
    if (i > 0) modes += "/";
    modes += PersistModeName(c.persist_modes[i]);
  }
  add(modes);
  return out;
}

// One line per option: name=default, range, help.
void PrintOptions(const std::vector<engines::OptionSpec>& options) {
  size_t w = 0, rw = 0;
  for (const auto& o : options) {
    w = std::max(w, o.name.size() + 1 + o.DefaultText().size());
    rw = std::max(rw, o.RangeText().size());
  }
  for (const auto& o : options) {
    const std::string def = o.name + "=" + o.DefaultText();
    std::printf("    %-*s  %-*s  %s\n", static_cast<int>(w), def.c_str(), static_cast<int>(rw),
                o.RangeText().c_str(), o.help.c_str());
  }
}

void PrintDetails(const engines::EngineInfo& info) {
  const EngineDescription& d = info.description;
  std::printf("%s: %s\n", d.name.c_str(), d.summary.c_str());
  std::printf("  paper             %s\n", d.paper.c_str());
  std::printf("  crash-consistent  %s\n", d.crash_consistent ? "yes" : "no");
  std::printf("  capabilities      %s\n", Capabilities(info.capabilities).c_str());
  std::printf("  options (--opt name=value; default, range):\n");
  const std::vector<engines::OptionSpec> options = engines::DeclaredOptions(info, false);
  if (options.empty()) std::printf("    none\n");
  PrintOptions(options);
}

}  // namespace

int CmdEngines(const std::string& name) {
  const auto& registrations = engines::Registrations();
  if (!name.empty()) {
    const engines::EngineRegistration* reg = engines::FindEngine(name);
    if (reg == nullptr) return Fail(kExitUsage, engines::UnknownEngine(name).message());
    PrintDetails(reg->info);
  } else {
    if (registrations.empty()) {
      std::printf("no engines are registered in this build\n");
      return kExitOk;
    }
    size_t name_w = 4, paper_w = 5;
    for (const auto& [n, reg] : registrations) {
      name_w = std::max(name_w, n.size());
      paper_w = std::max(paper_w, reg.info.description.paper.size());
    }
    const int nw = static_cast<int>(name_w), pw = static_cast<int>(paper_w);
    std::printf("%-*s  %-16s  %-*s  %s\n", nw, "name", "crash-consistent", pw, "paper",
                "summary");
    for (const auto& [n, reg] : registrations) {
      const EngineDescription& e = reg.info.description;
      std::printf("%-*s  %-16s  %-*s  %s\n", nw, e.name.c_str(),
                  e.crash_consistent ? "yes" : "no", pw, e.paper.c_str(), e.summary.c_str());
    }
    for (const auto& [n, reg] : registrations) {
      std::printf("\n");
      PrintDetails(reg.info);
    }
  }
  std::printf("\nevery engine also accepts:\n");
  PrintOptions({engines::CommonOptions().begin(), engines::CommonOptions().end()});
  return kExitOk;
}

}  // namespace pmhash::tools
