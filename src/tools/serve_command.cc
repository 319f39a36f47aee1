// `pmhash serve`: the pool behind a Redis-protocol server (src/serve/, docs/serve.md).
#include <signal.h>

#include <cstdio>
#include <memory>

#include "serve/commands.h"
#include "serve/server.h"
#include "tools/commands.h"
#include "tools/options.h"

namespace pmhash::tools {
namespace {

serve::Server* g_server = nullptr;

void OnSignal(int) {
  if (g_server != nullptr) g_server->Stop();  // one write to an eventfd: signal-safe
}

}  // namespace

int CmdServe(const ServeArgs& args) {
  Options options;
  std::string error;
  if (!BuildOptions(args.path, args.common, &options, &error)) return Fail(kExitUsage, error);
  if (args.common.hex) return Fail(kExitUsage, "--hex does not apply to serve");
  options.count_stats = args.counters;
  if (args.threads < 1 || args.threads > 256) {
    return Fail(kExitUsage, "--threads: expected 1..256, got " + std::to_string(args.threads));
  }
  if (args.port > 65535) {
    return Fail(kExitUsage, "--port: expected 0..65535, got " + std::to_string(args.port));
  }
  serve::ServerOptions so;
  so.bind = args.bind;
  so.port = static_cast<uint16_t>(args.port);
  so.threads = args.threads;
  so.idle_timeout_seconds = args.idle_timeout;
  so.max_clients = args.max_clients;
  if (!args.max_request.empty() && !ParseSize(args.max_request, &so.max_request_bytes, &error)) {
    return Fail(kExitUsage, "--max-request: " + error);
  }
  if (so.max_request_bytes < 1024) {
    return Fail(kExitUsage, "--max-request: at least 1K (a request's key, value and framing)");
  }
  std::unique_ptr<Index> index;
  if (const int code = OpenPool(options, &index); code != kExitOk) return code;
  Status s;

  serve::CommandOptions co;
  co.requirepass = args.requirepass;
  co.allow_flushall = args.allow_flushall;
  serve::CommandHandler handler(index.get(), co);
  serve::Server server(&handler, so);
  s = server.Listen();
  if (!s.ok()) {
    (void)index->Close();  // the listen error is the one to report
    return Fail(kExitFailure, s.message());
  }
  g_server = &server;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  const IndexStats stats = index->Stats();
  std::printf("pmhash serve: ready on %s:%u (engine %s, %llu keys, %s%s)\n", args.bind.c_str(),
              static_cast<unsigned>(server.port()), stats.engine.c_str(),
              static_cast<unsigned long long>(stats.count),
              stats.recovered ? "recovered in " : "clean open",
              stats.recovered ? (std::to_string(stats.recovery_ms) + " ms").c_str() : "");
  std::fflush(stdout);
  server.Run();
  g_server = nullptr;
  s = index->Close();
  if (!s.ok()) return Fail(kExitFailure, "closing the pool: " + std::string(s.message()));
  std::printf("pmhash serve: closed cleanly (%s)\n",
              server.shutdown_requested() ? "SHUTDOWN" : "signal");
  return kExitOk;
}

}  // namespace pmhash::tools
