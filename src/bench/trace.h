// `pmhash bench --trace FILE`: replays an operation trace against one engine in process,
// checking every answer against a model (docs/serve.md, "YCSB"; bench/README.md).
//
// A line is one operation, in either form:
//   OP KEY [VALUE]                      INSERT, UPDATE, READ, DELETE, SCAN; VALUE is the
//                                       rest of the line after one space
//   OP TABLE KEY [ FIELDS ]             as YCSB's basic binding (site.ycsb.BasicDB) prints
//                                       them; the text between the brackets is the value
// (a DELETE or READ of three words is the second form). Blank lines and lines starting
// with '#' are skipped. INSERT is Index::Insert, UPDATE Update (the record's new value
// whole, as YCSB with writeallfields), READ Get, DELETE Delete; SCAN is counted and
// skipped (a hash index has no key order). The model says what each call must return
// (AlreadyExists for an INSERT of a present key, NotFound for an absent one, the value a
// READ must find); a difference is a mismatch, reported with its line number.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/status.h"

namespace pmhash::bench {

struct TraceOp {
  enum class Kind : uint8_t { kInsert, kUpdate, kRead, kDelete, kScan };
  Kind kind;
  std::string key, value;
  uint64_t line;  // 1-based line number in the trace
};

// Parses a trace's text. InvalidArgument naming the line for an unknown operation or a
// line without a key.
Status ParseTrace(std::string_view text, std::vector<TraceOp>* ops);

// Command-line entry: argv holds "--trace FILE" and the replay's flags (--engine, --opt,
// --persist, --pool-size, --pool). Prints the counts per operation, the time and the
// mismatches; exit 0 when every answer matched the model, 1 on a mismatch or a failed
// run, 2 on a bad command line.
int RunTraceReplay(int argc, char** argv);

}  // namespace pmhash::bench
