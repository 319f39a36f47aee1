#include "engines/engine_info.h"

#include <charconv>
#include <cstdio>

#include "pm/alloc.h"

namespace pmhash::engines {

// ---- Declarations -------------------------------------------------------------------

OptionSpec OptionSpec::Uint(std::string name, std::optional<uint64_t> fallback, uint64_t min,
                            uint64_t max, std::string help) {
  OptionSpec s;
  s.name = std::move(name);
  s.type = Type::kUint;
  s.has_default = fallback.has_value();
  s.uint_default = fallback.value_or(0);
  s.uint_min = min;
  s.uint_max = max;
  s.help = std::move(help);
  return s;
}

OptionSpec OptionSpec::Double(std::string name, double fallback, double min, double max,
                              std::string help) {
  OptionSpec s;
  s.name = std::move(name);
  s.type = Type::kDouble;
  s.has_default = true;
  s.double_default = fallback;
  s.double_min = min;
  s.double_max = max;
  s.help = std::move(help);
  return s;
}

OptionSpec OptionSpec::Bool(std::string name, bool fallback, std::string help) {
  OptionSpec s;
  s.name = std::move(name);
  s.type = Type::kBool;
  s.has_default = true;
  s.bool_default = fallback;
  s.help = std::move(help);
  return s;
}

namespace {

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// 1048576 and up as 2^N when a power of two (table sizes), else in digits.
std::string Whole(uint64_t v) {
  if (v >= (uint64_t{1} << 20) && (v & (v - 1)) == 0) {
    return "2^" + std::to_string(63 - __builtin_clzll(v));
  }
  return std::to_string(v);
}

bool ParseBool(const std::string& t, bool* v) {
  if (t == "on" || t == "true" || t == "1" || t == "yes") {
    *v = true;
  } else if (t == "off" || t == "false" || t == "0" || t == "no") {
    *v = false;
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::string OptionSpec::DefaultText() const {
  if (!has_default) return "auto";
  switch (type) {
    case Type::kUint: return std::to_string(uint_default);
    case Type::kDouble: return Number(double_default);
    case Type::kBool: return bool_default ? "on" : "off";
  }
  return "?";
}

std::string OptionSpec::RangeText() const {
  switch (type) {
    case Type::kUint: return Whole(uint_min) + ".." + Whole(uint_max);
    case Type::kDouble: return Number(double_min) + ".." + Number(double_max);
    case Type::kBool: return "on|off";
  }
  return "?";
}

std::span<const OptionSpec> CommonOptions() {
  static const std::vector<OptionSpec> common = {
      OptionSpec::Uint("multiget_depth", 8, 1, 64,
                       "keys MultiGet hashes and prefetches ahead of the one it finishes "
                       "(engines with pipelined MultiGet)"),
      OptionSpec::Uint("write_depth", 4, 1, 64,
                       "write ops Write hashes and prefetches ahead of the one it runs "
                       "(engines with a pipelined Write; Spash's Fig. 5a depth 4)"),
      OptionSpec::Uint("alloc_arenas", pm::AllocatorOptions{}.arenas, 1, pm::kMaxAllocArenas,
                       "allocator arenas per size class: threads take small blocks from "
                       "their own arena; 1 makes every thread reuse blocks any other freed "
                       "at once (the crash suite's shared-arena tests)"),
  };
  return common;
}

std::vector<OptionSpec> DeclaredOptions(const EngineInfo& info, bool with_common) {
  std::vector<OptionSpec> out = info.options;
  if (info.capabilities.resize_switch) {
    const EngineCapabilities& c = info.capabilities;
    out.push_back(OptionSpec::Bool(
        "resize", true,
        "on: " + (c.resize_when.empty() ? std::string("the table grows") : c.resize_when) +
            (c.refuses_when_full ? "; off: an insert that finds no place is refused (TableFull)"
                                 : "; off: the table keeps its size and chains grow instead "
                                   "(only a full pool refuses an insert)")));
  }
  if (with_common) out.insert(out.end(), CommonOptions().begin(), CommonOptions().end());
  return out;
}

// ---- EngineOptions ------------------------------------------------------------------

EngineOptions::EngineOptions(const std::map<std::string, std::string>& values,
                             std::span<const OptionSpec> declared)
    : values_(values) {
  for (const OptionSpec& s : declared) declared_.push_back(&s);
}

const OptionSpec* EngineOptions::Declared(std::string_view name, OptionSpec::Type type) {
  for (const OptionSpec* s : declared_) {
    if (s->name != name) continue;
    if (s->type == type) return s;
    errors_.push_back("engine bug: option " + std::string(name) + " is read as another type "
                      "than it is declared");
    return nullptr;
  }
  errors_.push_back("engine bug: option " + std::string(name) + " is read but not declared");
  return nullptr;
}

const std::string* EngineOptions::Text(std::string_view name) const {
  auto it = values_.find(std::string(name));
  return it == values_.end() ? nullptr : &it->second;
}

bool EngineOptions::Given(std::string_view name) const { return Text(name) != nullptr; }

uint64_t EngineOptions::Uint(std::string_view name) {
  const OptionSpec* s = Declared(name, OptionSpec::Type::kUint);
  if (s == nullptr) return 0;
  const std::string* text = Text(name);
  if (text == nullptr) return s->uint_default;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc() || end != text->data() + text->size()) {
    errors_.push_back("option " + s->name + "=" + *text + " is not a whole number");
    return s->uint_default;
  }
  if (v < s->uint_min || v > s->uint_max) {
    errors_.push_back("option " + s->name + "=" + *text + " is out of range [" +
                      std::to_string(s->uint_min) + ", " + std::to_string(s->uint_max) + "]");
    return s->uint_default;
  }
  return v;
}

double EngineOptions::Double(std::string_view name) {
  const OptionSpec* s = Declared(name, OptionSpec::Type::kDouble);
  if (s == nullptr) return 0;
  const std::string* text = Text(name);
  if (text == nullptr) return s->double_default;
  double v = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc() || end != text->data() + text->size()) {
    errors_.push_back("option " + s->name + "=" + *text + " is not a number");
    return s->double_default;
  }
  if (!(v >= s->double_min && v <= s->double_max)) {
    errors_.push_back("option " + s->name + "=" + *text + " is out of range [" +
                      Number(s->double_min) + ", " + Number(s->double_max) + "]");
    return s->double_default;
  }
  return v;
}

bool EngineOptions::Bool(std::string_view name) {
  const OptionSpec* s = Declared(name, OptionSpec::Type::kBool);
  if (s == nullptr) return false;
  const std::string* text = Text(name);
  if (text == nullptr) return s->bool_default;
  bool v = false;
  if (!ParseBool(*text, &v)) {
    errors_.push_back("option " + s->name + "=" + *text + " is not on/off");
    return s->bool_default;
  }
  return v;
}

Status EngineOptions::Finish() const {
  std::vector<std::string> errors = errors_;
  for (const auto& [name, value] : values_) {
    bool known = false;
    for (const OptionSpec* s : declared_) known = known || s->name == name;
    if (known) continue;
    std::string names;
    for (const OptionSpec* s : declared_) names += (names.empty() ? "" : ", ") + s->name;
    errors.push_back("unknown engine option '" + name + "' (this engine accepts: " +
                     (names.empty() ? "none" : names) + ")");
  }
  if (errors.empty()) return Status::OK();
  std::string msg = errors[0];
  for (size_t i = 1; i < errors.size(); ++i) msg += "; " + errors[i];
  return Status::InvalidArgument(msg);
}

}  // namespace pmhash::engines
