// The subcommands of the `pmhash` tool. main.cc parses the command line (CLI11) and
// calls these; each returns the process exit code and prints an error as exactly one
// line "pmhash: <message>" on stderr.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/index.h"

namespace pmhash::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the operation failed (I/O, bad pool, not found)
inline constexpr int kExitUsage = 2;    // the command line is wrong

// Prints "pmhash: <message>" (joined into one line) on stderr; returns code.
int Fail(int code, std::string_view message);

// Opens (or, with options.create_if_missing, creates) the pool for a command: kExitOk,
// or the exit code after printing why not (a missing pool names --create).
int OpenPool(const Options& options, std::unique_ptr<Index>* index);

// Options shared by the data commands (put, get, del, count, dump).
struct CommonOptions {
  std::string engine;               // empty: whatever the pool holds
  bool create = false;              // create the pool if missing (needs engine)
  std::string size = "256M";        // size of a created pool
  std::string persist = "adr";      // adr | eadr | none
  std::vector<std::string> opts;    // engine options, name=value
  bool hex = false;                 // keys/values given and printed as hex
};

// `pmhash engines`: the registered engines as a table, then each one's capabilities and
// options (default, range, help); `pmhash engines NAME`: that engine's alone. An unknown
// NAME is a usage error.
int CmdEngines(const std::string& name);

// `pmhash pool create PATH --engine E [--size S] [--hash-seed random|N] [--opt k=v]...`:
// creates and formats a pool through the engine, then closes it cleanly.
int CmdPoolCreate(const std::string& path, const std::string& engine, const std::string& size,
                  const std::string& hash_seed, const std::vector<std::string>& opts);

// `pmhash pool info PATH`: every header field, the mapping an open would get, the clean
// flag. Never writes to the file.
int CmdPoolInfo(const std::string& path);

// `pmhash pool check PATH [--engine E]`: validates the header, opens the index (which
// recovers it if it was not closed cleanly, verifying the undo log, the allocator's
// metadata and, during recovery, every record), compares iteration with Count(), checks
// the allocator against the blocks the engine reaches (Engine::VerifyBlocks), closes.
int CmdPoolCheck(const std::string& path, const std::string& engine,
                 const std::vector<std::string>& opts);

// `pmhash serve PATH [--port N] [--bind ADDR] [--threads N] [--requirepass P]
// [--allow-flushall] [--max-request SIZE] [--idle-timeout S] [--max-clients N] [common]`:
// the pool behind a RESP2 server (docs/serve.md) until SIGTERM, SIGINT or SHUTDOWN, then a
// clean close. Prints one "ready on ADDR:PORT" line when it accepts connections.
struct ServeArgs {
  std::string path;
  std::string bind = "127.0.0.1";
  unsigned port = 6379;
  unsigned threads = 1;
  std::string requirepass;
  bool allow_flushall = false;
  std::string max_request = "64M";
  unsigned idle_timeout = 300;
  unsigned max_clients = 10000;
  bool counters = false;  // Options::count_stats: INFO's persistence counters (slower)
  CommonOptions common;
};
int CmdServe(const ServeArgs& args);

enum class DataOp { kPut, kGet, kDel, kCount, kDump };

struct DataArgs {
  DataOp op = DataOp::kGet;
  std::string path, key, value;
  std::string limit;  // dump --limit as given: at most this many records (empty or 0: all)
  std::string cursor;  // dump --cursor as given: where to resume (empty or 0: the start)
  CommonOptions common;
};

// put / get / del / count / dump through pmhash::Open. A put VALUE of "-" is read from
// stdin (binary-safe; hex digits with --hex).
int CmdData(const DataArgs& args);

// `pmhash bench ...`: argv[0] is "bench". `compare OLD NEW` compares two result files
// (src/bench/compare.h); `--micro persist` runs the persistence micro-benchmark
// (src/bench/micro.h); anything else goes to the benchmark driver (src/bench/driver.h)
// unparsed.
int CmdBench(int argc, char** argv);

}  // namespace pmhash::tools
