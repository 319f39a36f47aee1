#include "bench/trace.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "bench/messages.h"
#include "pmhash/index.h"

namespace pmhash::bench {
namespace {

using Kind = TraceOp::Kind;

bool KindOf(std::string_view word, Kind* kind) {
  static constexpr std::pair<const char*, Kind> kKinds[] = {
      {"INSERT", Kind::kInsert}, {"UPDATE", Kind::kUpdate}, {"READ", Kind::kRead},
      {"DELETE", Kind::kDelete}, {"SCAN", Kind::kScan}};
  for (const auto& [name, k] : kKinds) {
    if (word == name) {
      *kind = k;
      return true;
    }
  }
  return false;
}

// The next space-separated word of `rest` (which loses it and the spaces after it).
std::string_view NextWord(std::string_view* rest) {
  const size_t end = std::min(rest->find(' '), rest->size());
  std::string_view w = rest->substr(0, end);
  rest->remove_prefix(end);
  while (!rest->empty() && rest->front() == ' ') rest->remove_prefix(1);
  return w;
}

constexpr const char* kKindNames[] = {"INSERT", "UPDATE", "READ", "DELETE", "SCAN"};

}  // namespace

Status ParseTrace(std::string_view text, std::vector<TraceOp>* ops) {
  uint64_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(std::min(nl + 1, text.size()));
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    std::string_view rest = line;
    const std::string_view op = NextWord(&rest);
    TraceOp t{};
    t.line = line_no;
    if (!KindOf(op, &t.kind)) {
      return Status::InvalidArgument("trace line " + std::to_string(line_no) +
                                     ": unknown operation '" + std::string(op.substr(0, 40)) +
                                     "' (expected INSERT, UPDATE, READ, DELETE or SCAN)");
    }
    const size_t bracket = rest.find(" [");
    std::string_view first = NextWord(&rest);
    if (bracket != std::string_view::npos ||
        ((t.kind == Kind::kDelete || t.kind == Kind::kRead) && !rest.empty() &&
         rest.find(' ') == std::string_view::npos)) {
      // YCSB's basic binding: TABLE KEY [ FIELDS ] (SCAN: TABLE KEY COUNT [ FIELDS ]).
      first = NextWord(&rest);
      const size_t open = rest.find('[');
      const size_t close = rest.rfind(']');
      if (open != std::string_view::npos && close != std::string_view::npos && close > open) {
        std::string_view fields = rest.substr(open + 1, close - open - 1);
        while (!fields.empty() && fields.front() == ' ') fields.remove_prefix(1);
        while (!fields.empty() && fields.back() == ' ') fields.remove_suffix(1);
        t.value = std::string(fields);
      }
    } else {
      t.value = std::string(rest);
    }
    if (first.empty()) {
      return Status::InvalidArgument("trace line " + std::to_string(line_no) + ": " +
                                     std::string(op) + " without a key");
    }
    t.key = std::string(first);
    ops->push_back(std::move(t));
  }
  return Status::OK();
}

int RunTraceReplay(int argc, char** argv) {
  CLI::App app{"pmhash bench --trace: replay an operation trace, checked against a model"};
  app.name("pmhash bench");
  std::string trace, engine = "wophi", persist = "adr", pool;
  uint64_t pool_mib = 1024;
  std::vector<std::string> opts;
  app.add_option("--trace", trace, "The trace file (one operation a line)")->required();
  app.add_option("--engine", engine, "Engine (default wophi)");
  app.add_option("--opt", opts, "Engine option name=value (repeatable)");
  app.add_option("--persist", persist, "adr (default), eadr or none");
  app.add_option("--pool-size", pool_mib, "Pool size in MiB (default 1024)");
  app.add_option("--pool", pool,
                 "Pool file to create (default: a fresh file under /dev/shm, removed after)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return Fail(2, e.what());
  }
  std::ifstream in(trace, std::ios::binary);
  if (!in) return Fail(1, "--trace: cannot read " + trace);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<TraceOp> ops;
  if (Status s = ParseTrace(text.str(), &ops); !s.ok()) return Fail(2, std::string(s.message()));

  Options o;
  o.engine = engine;
  o.pool_size = pool_mib << 20;
  o.create_if_missing = true;
  o.error_if_exists = true;
  o.persist = persist == "eadr"   ? PersistMode::kEadr
              : persist == "none" ? PersistMode::kNone
                                  : PersistMode::kAdr;
  if (persist != "adr" && persist != "eadr" && persist != "none") {
    return Fail(2, "--persist: expected adr, eadr or none, not '" + persist + "'");
  }
  for (const std::string& kv : opts) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return Fail(2, "--opt '" + kv + "': expected name=value");
    o.engine_options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const bool temporary = pool.empty();
  o.path = temporary ? "/dev/shm/pmhash-trace-" + std::to_string(::getpid()) + ".pool" : pool;
  std::unique_ptr<Index> index;
  if (Status s = Open(o, &index); !s.ok()) return Fail(1, std::string(s.message()));

  std::unordered_map<std::string, std::string> model;
  std::array<uint64_t, 5> count{};
  std::vector<std::string> mismatches;
  std::string got;
  auto mismatch = [&](const TraceOp& t, const std::string& what) {
    if (mismatches.size() < 20) {
      mismatches.push_back("line " + std::to_string(t.line) + ": " + kKindNames[static_cast<int>(t.kind)] +
                           " " + t.key.substr(0, 60) + ": " + what);
    } else if (mismatches.size() == 20) {
      mismatches.push_back("(more mismatches not shown)");
    }
  };
  const auto start = std::chrono::steady_clock::now();
  for (const TraceOp& t : ops) {
    ++count[static_cast<int>(t.kind)];
    const auto it = model.find(t.key);
    const bool present = it != model.end();
    Status s;
    switch (t.kind) {
      case Kind::kInsert:
        s = index->Insert(t.key, t.value);
        if (present ? !s.IsAlreadyExists() : !s.ok()) mismatch(t, std::string(s.message()));
        if (!present && s.ok()) model.emplace(t.key, t.value);
        break;
      case Kind::kUpdate:
        s = index->Update(t.key, t.value);
        if (present ? !s.ok() : !s.IsNotFound()) mismatch(t, std::string(s.message()));
        if (present && s.ok()) it->second = t.value;
        break;
      case Kind::kRead:
        s = index->Get(t.key, &got);
        if (present ? !(s.ok() && got == it->second) : !s.IsNotFound()) {
          mismatch(t, s.ok() ? "a value other than the model's" : std::string(s.message()));
        }
        break;
      case Kind::kDelete:
        s = index->Delete(t.key);
        if (present ? !s.ok() : !s.IsNotFound()) mismatch(t, std::string(s.message()));
        if (present && s.ok()) model.erase(it);
        break;
      case Kind::kScan:
        break;  // a hash index has no key order
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (index->Count() != model.size()) {
    mismatches.push_back("Count() is " + std::to_string(index->Count()) + ", the model holds " +
                         std::to_string(model.size()));
  }
  const Status closed = index->Close();
  index.reset();
  if (temporary) ::unlink(o.path.c_str());
  std::printf("pmhash bench --trace %s: engine %s, %zu operations in %.3f s (%.3f Mops/s, one "
              "thread, each answer checked)\n",
              trace.c_str(), engine.c_str(), ops.size(), seconds,
              seconds > 0 ? static_cast<double>(ops.size()) / seconds / 1e6 : 0.0);
  for (int k = 0; k < 5; ++k) {
    std::printf("  %-7s %10llu%s\n", kKindNames[k], static_cast<unsigned long long>(count[k]),
                k == 4 && count[k] > 0 ? "  (skipped: a hash index has no key order)" : "");
  }
  std::printf("  keys at the end: %zu\n", model.size());
  if (!closed.ok()) return Fail(1, "closing the pool: " + std::string(closed.message()));
  if (!mismatches.empty()) {
    for (const std::string& m : mismatches) std::fprintf(stderr, "pmhash: mismatch: %s\n", m.c_str());
    return 1;
  }
  std::printf("  every answer matched the model\n");
  return 0;
}

}  // namespace pmhash::bench
