// `pmhash bench compare OLD.json NEW.json`: two result files of `pmhash bench --json`
// (e.g. before and after a change) side by side, per run, engine, thread count and phase
// (and each floor loop), as Mops/s median (min-max), the ratio of the medians new / old,
// and a verdict:
//
//   faster / slower  both sides measured 2 rounds or more (--repeat) and their ranges
//                    [min, max] do not overlap: the difference exceeds the spread of
//                    either side;
//   noise            the ranges overlap: the difference is within the noise;
//   1 round          a side has a single round, so its spread is unknown and no
//                    difference can be told from noise.
//
// The settings and the machines of the two files are compared too, and differences are
// listed, since a faster figure on another machine or workload proves nothing.
#pragma once

#include <string>
#include <vector>

#include "bench/json.h"
#include "bench/runner.h"
#include "bench/summary.h"
#include "pmhash/status.h"

namespace pmhash::bench {

enum class Verdict { kFaster, kSlower, kNoise, kOneRound };
const char* VerdictName(Verdict v);

struct CompareRow {
  std::string run, engine, phase;  // engine "floor": a floor loop named by phase
  int threads = 1;
  int phase_index = -1;
  uint32_t batch = 1;
  Spread old_mops, new_mops;
  double ratio = 0;  // new median / old median (0 when the old median is 0)
  Verdict verdict = Verdict::kOneRound;
};

struct Comparison {
  std::vector<CompareRow> rows;  // in the new file's order
  std::vector<std::string> only_old, only_new;  // rows without a match ("group search t1")
  std::vector<std::string> differences;  // settings and machine fields that differ
};

// Compares two parsed result files. InvalidArgument naming OLD or NEW when a document is
// not a pmhash bench result file (no results array, or a row without engine, phase,
// threads or a numeric mops), or when no engine is in both, or no row is.
Status CompareResults(const Json& old_doc, const Json& new_doc, Comparison* out);

// The comparison as a table, with the rule, the unmatched rows and the differences.
std::string CompareText(const Comparison& c, const std::string& old_path,
                        const std::string& new_path);

// `pmhash bench compare` without the process around it: `args` follow the word
// "compare". Prints through env.out / env.err; returns 0, or 2 on a bad command line or
// input file (one line on env.err).
int RunCompareArgs(const std::vector<std::string>& args, const BenchEnv& env);

}  // namespace pmhash::bench
