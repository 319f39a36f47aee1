// The `pmhash` command-line tool: engines, pool files, single operations, benchmarks.
//
// Exit codes: 0 success, 1 the operation failed, 2 the command line is wrong. Every error
// is exactly one line "pmhash: <message>" on stderr.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/commands.h"
#include "tools/text.h"

namespace pmhash::tools {
namespace {

void AddCommonOptions(CLI::App* sub, CommonOptions* c) {
  sub->add_option("--engine", c->engine,
                  "Engine of the pool (`pmhash engines`); optional for an existing pool, "
                  "where it must match");
  sub->add_flag("--create", c->create, "Create the pool if it is missing (needs --engine)");
  sub->add_option("--size", c->size,
                  "Size of a created pool, with K/M/G/T suffix (default 256M; 4M..1T)");
  sub->add_option("--persist", c->persist,
                  "Persist mode: adr (flush + fence, default), eadr (fences only), none "
                  "(volatile)");
  sub->add_option("--opt", c->opts, "Engine option name=value (repeatable)")
      ->allow_extra_args(false);
  sub->add_flag("--hex", c->hex, "Keys and values are given and printed as hex (binary data)");
}

int Main(int argc, char** argv) {
  // `bench` owns its arguments: the driver parses them itself, unparsed by us.
  if (argc >= 2 && std::strcmp(argv[1], "bench") == 0) return CmdBench(argc - 1, argv + 1);

  CLI::App app{"pmhash: persistent hash indexes on persistent memory"};
  app.name("pmhash");
  app.set_version_flag("--version", "pmhash 0.1.0");
  app.require_subcommand(1);
  app.footer("Exit status: 0 success, 1 the operation failed, 2 bad command line.");

  std::string engine_name;
  app.add_subcommand("engines",
                     "List the registered engines with their capabilities and options; "
                     "`pmhash engines NAME` shows one")
      ->add_option("NAME", engine_name, "An engine (default: all)");

  CLI::App* pool = app.add_subcommand("pool", "Create, inspect and check pool files");
  pool->require_subcommand(1);
  std::string path, engine, size = "256M";
  std::vector<std::string> opts;
  CLI::App* create = pool->add_subcommand(
      "create", "Create a pool file and format it for an engine (fails if PATH exists)");
  create->add_option("PATH", path, "Pool file to create")->required();
  create->add_option("--engine", engine, "Engine the pool is for (`pmhash engines`)")->required();
  create->add_option("--size", size, "Pool size with K/M/G/T suffix (default 256M; 4M..1T)");
  std::string hash_seed = "random";
  create->add_option("--hash-seed", hash_seed,
                     "The pool's key-hash seed, fixed for its life: random (default; keys "
                     "crafted to collide elsewhere do not collide here) or a whole number "
                     "0..2^64-1 (the same keys then land in the same places in every pool of "
                     "that seed; 0 is the unseeded hash of layout-3 pools)");
  create->add_option("--opt", opts, "Engine option name=value (repeatable)")
      ->allow_extra_args(false);
  CLI::App* info = pool->add_subcommand(
      "info", "Print every header field, the mapping an open would get and the clean flag "
              "(read-only)");
  info->add_option("PATH", path, "Pool file")->required();
  CLI::App* check = pool->add_subcommand(
      "check",
      "Validate the header, open the index, check the engine's structure (every key where "
      "its hash allows, none twice, counts, slot metadata, records, metadata checksums), "
      "count keys by iteration and compare with Count(), check that every allocated block "
      "is reachable exactly once, close. Opening RUNS RECOVERY (and so writes to the pool) "
      "if it was not closed cleanly.");
  check->add_option("PATH", path, "Pool file")->required();
  check->add_option("--engine", engine, "Expected engine (default: whatever the pool holds)");
  check->add_option("--opt", opts, "Engine option name=value (repeatable)")
      ->allow_extra_args(false);

  DataArgs data;
  auto add_data = [&](const char* name, const char* help, DataOp op) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->add_option("PATH", data.path, "Pool file")->required();
    if (op == DataOp::kPut || op == DataOp::kGet || op == DataOp::kDel) {
      sub->add_option("KEY", data.key, "Key (raw bytes, or hex with --hex)")->required();
    }
    if (op == DataOp::kPut) {
      sub->add_option("VALUE", data.value,
                      "Value (raw bytes, or hex with --hex). '-' reads the value from stdin "
                      "instead, byte for byte (binary-safe; with --hex, hex digits, whitespace "
                      "ignored): the way to pass values over ~128 KiB, the longest argument "
                      "Linux allows, up to the 1 MiB value limit. To store a literal '-': "
                      "printf %s - | pmhash put PATH KEY -")
          ->required();
    }
    if (op == DataOp::kDump) {
      sub->add_option("--limit", data.limit,
                      "Print at most N records (a whole number; default, or 0: all); when "
                      "records remain, say on stderr the --cursor that resumes after them");
      sub->add_option("--cursor", data.cursor,
                      "Resume a dump at this cursor (from a dump that stopped at --limit; "
                      "default 0: the start)");
    }
    AddCommonOptions(sub, &data.common);
    sub->callback([&data, op] { data.op = op; });
    return sub;
  };
  add_data("put", "Insert or update KEY -> VALUE", DataOp::kPut);
  add_data("get", "Print the value of KEY (exit 1 if absent)", DataOp::kGet);
  add_data("del", "Delete KEY (exit 1 if absent)", DataOp::kDel);
  add_data("count", "Print the number of keys", DataOp::kCount);
  add_data("dump",
           "Print every record as KEY<tab>VALUE, one per line (bytes escaped as \\xNN, or hex "
           "with --hex), in hash order. Pages through Index::Scan, 1024 keys a page, so "
           "memory stays bounded however large the pool; with --limit it stops after N "
           "records and names the --cursor that resumes there (Scan's contract: "
           "include/pmhash/index.h)",
           DataOp::kDump);

  ServeArgs serve;
  CLI::App* serve_cmd = app.add_subcommand(
      "serve",
      "Serve the pool over the Redis protocol (RESP2: GET, SET, DEL, EXISTS, MGET, MSET, "
      "SCAN, DBSIZE, INFO, ...; docs/serve.md) until SIGTERM, SIGINT or SHUTDOWN; every "
      "write is durable before its reply");
  serve_cmd->add_option("PATH", serve.path, "Pool file")->required();
  serve_cmd->add_option("--port", serve.port, "TCP port (default 6379; 0: any free port)");
  serve_cmd->add_option("--bind", serve.bind,
                        "Address to listen on (default 127.0.0.1: this machine only)");
  serve_cmd->add_option("--threads", serve.threads, "Event-loop threads (default 1)");
  serve_cmd->add_option("--requirepass", serve.requirepass,
                        "Clients must AUTH with this password first");
  serve_cmd->add_flag("--allow-flushall", serve.allow_flushall,
                      "Let FLUSHALL delete every key (refused otherwise)");
  serve_cmd->add_option("--max-request", serve.max_request,
                        "Largest request (command and arguments), K/M/G suffix (default "
                        "64M); a larger one closes the connection");
  serve_cmd->add_option("--idle-timeout", serve.idle_timeout,
                        "Close a connection idle this many seconds (default 300; 0: never)");
  serve_cmd->add_option("--max-clients", serve.max_clients,
                        "Connections at once (default 10000); more are refused");
  serve_cmd->add_flag("--counters", serve.counters,
                      "Count flushes, fences and PM bytes for INFO's persistence section "
                      "(off by default: counting slows every call)");
  AddCommonOptions(serve_cmd, &serve.common);

  app.add_subcommand(
      "bench",
      "Run benchmarks: `pmhash bench --help` for the driver; `pmhash bench compare OLD.json "
      "NEW.json` to set two result files side by side; `pmhash bench --micro persist "
      "[--iterations N] [--write-latency-ns N] [--json FILE]` for the counter-cost "
      "micro-benchmark");

  // CLI11 reports a mistyped command as "A subcommand is required"; name it instead.
  auto known = [](CLI::App* parent, const char* name) {
    for (const CLI::App* sub : parent->get_subcommands({})) {
      if (sub->get_name() == name) return true;
    }
    return false;
  };
  if (argc < 2) return Fail(kExitUsage, "a command is required (see pmhash --help)");
  if (argv[1][0] != '-' && !known(&app, argv[1])) {
    return Fail(kExitUsage, "unknown command " + Shown(argv[1]) + " (see pmhash --help)");
  }
  if (std::strcmp(argv[1], "pool") == 0 && argc == 2) {
    return Fail(kExitUsage, "pool needs a command: create, info or check");
  }
  if (std::strcmp(argv[1], "pool") == 0 && argc >= 3 && argv[2][0] != '-' &&
      !known(pool, argv[2])) {
    return Fail(kExitUsage,
                "unknown pool command " + Shown(argv[2]) + " (expected create, info or check)");
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return Fail(kExitUsage, e.what());
  }

  if (app.got_subcommand("engines")) return CmdEngines(engine_name);
  if (create->parsed()) return CmdPoolCreate(path, engine, size, hash_seed, opts);
  if (info->parsed()) return CmdPoolInfo(path);
  if (check->parsed()) return CmdPoolCheck(path, engine, opts);
  if (serve_cmd->parsed()) return CmdServe(serve);
  return CmdData(data);
}

}  // namespace
}  // namespace pmhash::tools

int main(int argc, char** argv) { return pmhash::tools::Main(argc, argv); }
