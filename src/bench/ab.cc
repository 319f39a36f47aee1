#include "bench/ab.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "bench/ab_slices.h"
#include "bench/json.h"
#include "bench/messages.h"
#include "engines/engine.h"

namespace pmhash::bench {
namespace {

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

// One side of a run: its index and the slices run on it.
class Side {
 public:
  virtual ~Side() = default;
  virtual Status Run(ab::Phase phase, uint64_t begin, uint64_t end, double* seconds) = 0;
};

// The index in this process.
class LocalSide final : public Side {
 public:
  LocalSide(std::unique_ptr<engines::Engine> index, const ab::Keys* keys, ab::Lookup lookup,
            int threads)
      : index_(std::move(index)), runner_(keys, lookup, threads) {}
  Status Run(ab::Phase phase, uint64_t begin, uint64_t end, double* seconds) override {
    return runner_.Run(index_.get(), phase, begin, end, seconds);
  }

 private:
  std::unique_ptr<engines::Engine> index_;
  ab::SliceRunner<engines::Engine> runner_;
};

// The index in a pmhash-slices process (src/tools/slices), spoken to through a socket
// that is its stdin and stdout (a socket, so that a write to a server that has exited is
// an error, not a SIGPIPE). A server silent for AbConfig::reply_seconds is taken for hung:
// the run fails and the server is killed, so a hang in the measured build never hangs
// the run.
class ServerSide final : public Side {
 public:
  explicit ServerSide(int reply_seconds) : reply_seconds_(reply_seconds) {}
  ~ServerSide() override {
    if (fd_ >= 0) {
      if (!hung_) Send("quit\n");
      close(fd_);
    }
    if (pid_ > 0) {
      if (hung_) kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  static Status Start(const std::string& binary, const std::vector<std::string>& args,
                      int reply_seconds, std::unique_ptr<Side>* out) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      return Status::IOError("socketpair: " + std::string(std::strerror(errno)));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::vector<std::string> argv_text = {binary};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    auto side = std::make_unique<ServerSide>(reply_seconds);
    const int err = posix_spawn(&side->pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    side->fd_ = fds[0];
    if (err != 0) {
      side->pid_ = 0;
      return Status::IOError("cannot start " + binary + ": " + std::strerror(err));
    }
    std::string reply;
    PMHASH_RETURN_IF_ERROR(side->ReadReply(&reply));
    if (reply != "ready") return Status::IOError("pmhash-slices: unexpected '" + reply + "'");
    *out = std::move(side);
    return Status::OK();
  }

  Status Run(ab::Phase phase, uint64_t begin, uint64_t end, double* seconds) override {
    static constexpr const char* kNames[] = {"insert", "search", "negative", "delete"};
    char command[128];
    std::snprintf(command, sizeof(command), "run %s %llu %llu\n", kNames[static_cast<int>(phase)],
                  static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end));
    if (!Send(command)) return Status::IOError("pmhash-slices exited");
    std::string reply;
    PMHASH_RETURN_IF_ERROR(ReadReply(&reply));
    char* rest = nullptr;
    if (reply.rfind("ok ", 0) == 0) *seconds = std::strtod(reply.c_str() + 3, &rest);
    if (rest == nullptr || *rest != '\0' || !(*seconds >= 0)) {
      return Status::IOError("pmhash-slices: unexpected '" + reply.substr(0, 80) + "'");
    }
    return Status::OK();
  }

 private:
  bool Send(std::string_view text) {
    while (!text.empty()) {
      const ssize_t n = send(fd_, text.data(), text.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      text.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // The next line; an "error ..." line, the end of output or a silent server is an error.
  Status ReadReply(std::string* reply) {
    size_t eol;
    while ((eol = pending_.find('\n')) == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      const int ready = poll(&p, 1, reply_seconds_ * 1000);
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        hung_ = true;
        return Status::IOError("pmhash-slices sent nothing for " + std::to_string(reply_seconds_) +
                               " s: taken for hung, killed");
      }
      char chunk[512];
      const ssize_t n = ready < 0 ? -1 : read(fd_, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status::IOError("pmhash-slices exited without a reply");
      pending_.append(chunk, static_cast<size_t>(n));
    }
    *reply = pending_.substr(0, eol);
    pending_.erase(0, eol + 1);
    if (reply->rfind("error ", 0) == 0) return Status::IOError("pmhash-slices: " + reply->substr(6));
    return Status::OK();
  }

  const int reply_seconds_;
  pid_t pid_ = 0;
  int fd_ = -1;
  bool hung_ = false;
  std::string pending_;  // read past the last line taken
};

const std::string& EngineOf(const AbConfig& c, bool a) {
  const std::string& e = a ? c.a_engine : c.b_engine;
  return e.empty() ? c.engine : e;
}

// Opens the two sides of one order: places[0] and places[1] get A and B (first = A in
// the first place).
Status OpenPair(const AbConfig& c, const BenchEnv& env, const ab::Keys& keys, bool a_first,
                std::unique_ptr<Side> side[2], std::string paths[2]) {
  const ab::Lookup lookup = c.lookups == "get" ? ab::Lookup::kGet : ab::Lookup::kU64;
  for (int i = 0; i < 2; ++i) {
    const bool is_a = (i == 0) == a_first;
    Options o;
    o.engine = EngineOf(c, is_a);
    o.hash_seed = c.seed;
    o.create_if_missing = true;
    o.error_if_exists = true;
    o.count_stats = c.counters;
    o.initial_capacity = c.initial_capacity;
    // A bound no engine's PM per key comes near (sparse in tmpfs: only what is used).
    o.pool_size = std::max<uint64_t>(256ull << 20, c.records * 192);
    if (!c.dram_pool) {
      paths[i] = "/dev/shm/pmhash-ab-" + std::to_string(getpid()) + "-" + std::to_string(i);
      o.path = paths[i];
    }
    o.engine_options = c.common_options;
    for (const auto& [k, v] : is_a ? c.a_options : c.b_options) o.engine_options[k] = v;
    const std::string& server = is_a ? c.a_server : c.b_server;
    Status s;
    if (server.empty()) {
      std::unique_ptr<engines::Engine> index;
      s = env.open(o, &index);
      if (s.ok()) side[i] = std::make_unique<LocalSide>(std::move(index), &keys, lookup, c.threads);
    } else {
      std::vector<std::string> args = {
          "engine=" + o.engine, "records=" + std::to_string(c.records),
          "seed=" + std::to_string(c.seed), "threads=" + std::to_string(c.threads),
          "lookups=" + c.lookups, std::string("counters=") + (c.counters ? "on" : "off"),
          "pool_size=" + std::to_string(o.pool_size),
          "initial_capacity=" + std::to_string(o.initial_capacity)};
      if (!o.path.empty()) args.push_back("path=" + o.path);
      for (const auto& [k, v] : o.engine_options) args.push_back("option=" + k + "=" + v);
      s = ServerSide::Start(server, args, c.reply_seconds, &side[i]);
    }
    if (!s.ok()) return WithContext(s, is_a ? "A: " : "B: ");
  }
  return Status::OK();
}

}  // namespace

Status ValidateAb(const AbConfig& c) {
  if (EngineOf(c, true).empty() || EngineOf(c, false).empty()) {
    return Status::InvalidArgument("--engine is required (or both --a-engine and --b-engine)");
  }
  if (c.records == 0 || c.slice == 0 || c.ops == 0) {
    return Status::InvalidArgument("--records, --ops and --slice must be at least 1");
  }
  if (c.records > (uint64_t{1} << 32)) return Status::InvalidArgument("--records: at most 2^32");
  if (c.orders != 1 && c.orders != 2) return Status::InvalidArgument("--orders: 1 or 2");
  if (c.threads < 1 || c.threads > 64) return Status::InvalidArgument("--threads: 1 to 64");
  if (c.lookups != "get" && c.lookups != "u64") return Status::InvalidArgument("--lookups: get or u64");
  if (c.phases.empty() || c.phases[0] != "insert") {
    return Status::InvalidArgument("--phases: insert first (it loads both indexes)");
  }
  for (const std::string& p : c.phases) {
    ab::Phase phase;
    if (!ab::ParsePhase(p, &phase)) {
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
  const ab::Keys keys(c.records, c.seed);
  for (int order = 0; order < c.orders; ++order) {
    std::unique_ptr<Side> side[2];
    std::string paths[2];
    Status s = OpenPair(c, env, keys, order == 0, side, paths);
    for (size_t p = 0; s.ok() && p < c.phases.size(); ++p) {
      ab::Phase phase;
      ab::ParsePhase(c.phases[p], &phase);
      const uint64_t n = phase == ab::Phase::kInsert   ? c.records
                         : phase == ab::Phase::kDelete ? std::min(c.ops, c.records)
                                                       : c.ops;
      std::vector<double> ratios, a_mops, b_mops;
      for (uint64_t begin = 0, k = 0; s.ok() && begin < n; begin += c.slice, ++k) {
        const uint64_t end = std::min<uint64_t>(n, begin + c.slice);
        double seconds[2] = {0, 0};
        for (int j = 0; j < 2 && s.ok(); ++j) {
          const int i = (k % 2 == 0) ? j : 1 - j;  // which side goes first alternates
          s = WithContext(side[i]->Run(phase, begin, end, &seconds[i]),
                          (i == 0) == (order == 0) ? "A: " : "B: ");
        }
        if (!s.ok()) break;
        const double a = seconds[order == 0 ? 0 : 1], b = seconds[order == 0 ? 1 : 0];
        const double m = static_cast<double>(end - begin) / 1e6;
        ratios.push_back(a / b);
        a_mops.push_back(m / a);
        b_mops.push_back(m / b);
      }
      if (!s.ok()) {
        s = WithContext(s, c.phases[p] + ": ");
        break;
      }
      AbPhase& r = result->phases[p];
      r.ratios.push_back(std::move(ratios));
      r.a_mops.push_back(std::move(a_mops));
      r.b_mops.push_back(std::move(b_mops));
    }
    for (int i = 0; i < 2; ++i) {
      side[i].reset();
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
  std::string counters = "off";
  app.add_option("--engine", c.engine, "Both sides' engine");
  app.add_option("--a-engine", c.a_engine, "A's engine (default --engine)");
  app.add_option("--b-engine", c.b_engine, "B's engine (default --engine)");
  app.add_option("--a", a_opts, "A's engine options, K=V (repeatable; none: the defaults)");
  app.add_option("--b", b_opts, "B's engine options, K=V (repeatable)");
  app.add_option("--opt", opts, "Both sides' engine options, K=V (repeatable)");
  app.add_option("--a-server", c.a_server,
                 "Run A in a pmhash-slices process of this path (another build: "
                 "scripts/slices-at.sh)");
  app.add_option("--b-server", c.b_server, "Run B in a pmhash-slices process of this path");
  app.add_option("--threads", c.threads, "Threads per slice, per side (default 1)");
  app.add_option("--lookups", c.lookups,
                 "u64 (Index::GetU64, default) or get (Index::Get, pmhash bench's default)");
  app.add_option("--initial-capacity", c.initial_capacity,
                 "Options::initial_capacity (default 0; pmhash bench passes --records)");
  app.add_option("--counters", counters, "off (default) or on: Options::count_stats");
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
  if (counters != "on" && counters != "off") {
    return Fail(2, "bench ab: --counters: '" + counters.substr(0, 40) + "' (on or off)");
  }
  c.counters = counters == "on";
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
  // "engine opts [in SERVER]" of a side.
  auto describe = [&](bool a) {
    const std::string& server = a ? c.a_server : c.b_server;
    return EngineOf(c, a) + " " + join(a ? c.a_options : c.b_options) +
           (server.empty() ? "" : " in " + server);
  };
  char line[1024];
  std::snprintf(line, sizeof(line),
                "pmhash bench ab: A %s, B %s%s%s; %llu keys, slices of %llu, %d thread%s, "
                "lookups %s, %s pools, %d order%s\n",
                describe(true).c_str(), describe(false).c_str(),
                c.common_options.empty() ? "" : ", both ", c.common_options.empty() ? "" : join(c.common_options).c_str(),
                static_cast<unsigned long long>(c.records), static_cast<unsigned long long>(c.slice),
                c.threads, c.threads == 1 ? "" : "s", c.lookups.c_str(),
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
    doc.Set("a_engine", EngineOf(c, true));
    doc.Set("b_engine", EngineOf(c, false));
    doc.Set("a", join(c.a_options));
    doc.Set("b", join(c.b_options));
    doc.Set("a_server", c.a_server);
    doc.Set("b_server", c.b_server);
    doc.Set("threads", static_cast<uint64_t>(c.threads));
    doc.Set("lookups", c.lookups);
    doc.Set("initial_capacity", c.initial_capacity);
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
