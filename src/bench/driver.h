// The benchmark driver behind `pmhash bench` (flags and JSON: ../shared/DESIGN.md,
// "Benchmark driver contract"; `pmhash bench --help` lists every flag).
#pragma once

#include <string>
#include <vector>

namespace pmhash::bench { int RunBench(int argc, char** argv); }

namespace pmhash::bench {

struct BenchEnv;

// RunBench without a process around it (tests): `args` excludes the program name;
// output goes through env (tables to env.out, one-line errors to env.err). Returns the
// exit code: 0 success, 1 a run failed, 2 a usage error.
int RunBenchArgs(const std::vector<std::string>& args, const BenchEnv& env);

}  // namespace pmhash::bench
