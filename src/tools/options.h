// Turning the tool's option strings into pmhash::Options (header-only, tested in
// cli_test.cc). Every failure is a usage error with a message naming the flag.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pm/pool.h"
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
      *error = "--opt " + Shown(o) + ": expected name=value";
      return false;
    }
    if (!out->emplace(name, value).second) {
      *error = "--opt " + Shown(name) + " given twice";
      return false;
    }
  }
  return true;
}

// "--size TEXT" into bytes, within the range a pool may have (pm::kMinPoolSize ..
// pm::kMaxPoolSize, 4 MiB .. 1 TiB); the error names the flag and the range.
inline bool ParsePoolSize(const std::string& text, uint64_t* bytes, std::string* error) {
  uint64_t v = 0;
  if (!ParseSize(text, &v, error)) {
    *error = "--size: " + *error;
    return false;
  }
  if (v < pm::kMinPoolSize || v > pm::kMaxPoolSize) {
    *error = "--size " + Shown(text) + " is out of range: a pool is " +
             HumanBytes(pm::kMinPoolSize) + " .. " + HumanBytes(pm::kMaxPoolSize) + " (" +
             std::to_string(pm::kMinPoolSize) + " .. " + std::to_string(pm::kMaxPoolSize) +
             " bytes)";
    return false;
  }
  *bytes = v;
  return true;
}

// "--hash-seed TEXT": "random" (unset: the pool draws one) or a whole number, the seed of
// the pool to create (Options::hash_seed); the error names the flag.
inline bool ParseHashSeed(const std::string& text, std::optional<uint64_t>* seed,
                          std::string* error) {
  if (text == "random") {
    seed->reset();
    return true;
  }
  uint64_t v = 0;
  if (!ParseCount(text, &v, error)) {
    *error = "--hash-seed: " + *error + " (expected random or 0.." + std::to_string(UINT64_MAX) +
             ")";
    return false;
  }
  *seed = v;
  return true;
}

// The common data-command options into Options (path and engine included).
inline bool BuildOptions(const std::string& path, const CommonOptions& common, Options* options,
                         std::string* error) {
  if (common.create && common.engine.empty()) {
    *error = "--create needs --engine (the engine of the pool to create)";
    return false;
  }
  if (!ParsePoolSize(common.size, &options->pool_size, error)) return false;
  if (!ParsePersistMode(common.persist, &options->persist)) {
    *error = "--persist: invalid mode " + Shown(common.persist) + " (expected adr, eadr or none)";
    return false;
  }
  if (!ParseEngineOptions(common.opts, &options->engine_options, error)) return false;
  options->path = path;
  options->engine = common.engine;
  options->create_if_missing = common.create;
  return true;
}

}  // namespace pmhash::tools
