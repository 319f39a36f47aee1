// Turning the tool's option strings into pmhash::Options (header-only, tested in
// cli_test.cc). Every failure is a usage error with a message naming the flag.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "pmhash/options.h"
#include "tools/commands.h"
#include "tools/text.h"

namespace pmhash::tools {

// "--opt name=value" strings into a map. False (with *error) on a missing '=' or name,
// or a name given twice.
inline bool ParseEngineOptions(const std::vector<std::string>& opts,
                               std::map<std::string, std::string>* out, std::string* error) {
  for (const std::string& o : opts) {
    std::string name, value;
    if (!SplitOption(o, &name, &value)) {
      *error = "--opt '" + o + "': expected name=value";
      return false;
    }
    if (!out->emplace(name, value).second) {
      *error = "--opt " + name + " given twice";
      return false;
    }
  }
  return true;
}

// The common data-command options into Options (path and engine included).
inline bool BuildOptions(const std::string& path, const CommonOptions& common, Options* options,
                         std::string* error) {
  if (common.create && common.engine.empty()) {
    *error = "--create needs --engine (the engine of the pool to create)";
    return false;
  }
  if (!ParseSize(common.size, &options->pool_size, error)) {
    *error = "--size: " + *error;
    return false;
  }
  if (!ParsePersistMode(common.persist, &options->persist)) {
    *error = "--persist: invalid mode '" + common.persist + "' (expected adr, eadr or none)";
    return false;
  }
  if (!ParseEngineOptions(common.opts, &options->engine_options, error)) return false;
  options->path = path;
  options->engine = common.engine;
  options->create_if_missing = common.create;
  return true;
}

}  // namespace pmhash::tools
