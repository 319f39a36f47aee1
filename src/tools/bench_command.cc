// `pmhash bench`: the persistence micro-benchmark (src/bench/micro.h), the trace replay
// (src/bench/trace.h), `pmhash bench compare` (src/bench/compare.h), `pmhash bench ab`
// (src/bench/ab.h), or the benchmark driver (src/bench/driver.h), which
// parses its own arguments.
#include <cstring>
#include <string>
#include <vector>

#include "bench/ab.h"
#include "bench/compare.h"
#include "bench/driver.h"
#include "bench/micro.h"
#include "bench/runner.h"
#include "bench/trace.h"
#include "tools/commands.h"

namespace pmhash::tools {

int CmdBench(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "ab") == 0) {
    return bench::RunAbArgs(std::vector<std::string>(argv + 2, argv + argc), bench::DefaultEnv());
  }
  if (argc > 1 && std::strcmp(argv[1], "compare") == 0) {
    return bench::RunCompareArgs(std::vector<std::string>(argv + 2, argv + argc),
                                 bench::DefaultEnv());
  }
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--micro") == 0 || std::strncmp(argv[i], "--micro=", 8) == 0) {
      return bench::RunMicroBench(argc, argv);
    }
    if (std::strcmp(argv[i], "--trace") == 0 || std::strncmp(argv[i], "--trace=", 8) == 0) {
      return bench::RunTraceReplay(argc, argv);
    }
  }
  // The driver sees argv[0] = "pmhash bench" and the rest untouched.
  std::string name = "pmhash bench";
  std::vector<char*> args(argv, argv + argc);
  args[0] = name.data();
  args.push_back(nullptr);
  return bench::RunBench(argc, args.data());
}

}  // namespace pmhash::tools
