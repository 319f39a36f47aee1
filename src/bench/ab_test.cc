// Tests of `pmhash bench ab` (src/bench/ab.h): the slices and orders it measures, that
// each side gets its own options, and bad input. Correctness only: nothing is timed.
#include "bench/ab.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "bench/json.h"

namespace pmhash::bench {
namespace {

AbConfig Small() {
  AbConfig c;
  c.engine = "cceh";
  c.records = 5000;
  c.ops = 3000;
  c.slice = 1000;
  c.dram_pool = true;
  return c;
}

TEST(BenchAb, MeasuresEverySliceOfEveryPhaseInBothOrders) {
  AbConfig c = Small();
  c.b_options = {{"first_try", "off"}};
  c.phases = {"insert", "search", "negative", "delete"};
  AbResult r;
  const Status s = MeasureAb(c, DefaultEnv(), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(r.phases.size(), 4u);
  const size_t slices[] = {5, 3, 3, 3};  // 5000 inserts, 3000 of each lookup, 3000 deletes
  for (size_t p = 0; p < 4; ++p) {
    EXPECT_EQ(r.phases[p].phase, c.phases[p]);
    ASSERT_EQ(r.phases[p].ratios.size(), 2u);
    for (int o = 0; o < 2; ++o) {
      ASSERT_EQ(r.phases[p].ratios[o].size(), slices[p]) << p;
      ASSERT_EQ(r.phases[p].a_mops[o].size(), slices[p]);
      for (size_t k = 0; k < slices[p]; ++k) {
        EXPECT_GT(r.phases[p].ratios[o][k], 0);
        // The ratio is A's time over B's: A's rate over B's, inverted.
        EXPECT_NEAR(r.phases[p].ratios[o][k],
                    r.phases[p].b_mops[o][k] / r.phases[p].a_mops[o][k], 1e-9);
      }
    }
    EXPECT_GT(r.phases[p].ratio, 0);
  }
}

TEST(BenchAb, TheJsonFileHoldsEverySlice) {
  // Written through bench/json.h (option values quoted as JSON strings), parsed back.
  const std::string path = ::testing::TempDir() + "ab_test.json";
  ASSERT_EQ(RunAbArgs({"--engine", "cceh", "--records", "2000", "--ops", "1000", "--slice",
                       "500", "--pool", "dram", "--b", "first_try=off", "--phases",
                       "insert,negative", "--json", path},
                      DefaultEnv()),
            0);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  Json doc;
  ASSERT_TRUE(Json::Parse(text.str(), &doc).ok()) << text.str();
  ASSERT_NE(doc.Find("phases"), nullptr);
  const std::vector<Json>& phases = doc.Find("phases")->items();
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[1].Find("phase")->string(), "negative");
  const std::vector<Json>& orders = phases[0].Find("orders")->items();
  ASSERT_EQ(orders.size(), 2u);
  EXPECT_EQ(orders[0].Find("ratios")->items().size(), 4u);  // 2000 inserts in slices of 500
  EXPECT_EQ(doc.Find("b")->string(), "first_try=off");
  std::remove(path.c_str());
}

TEST(BenchAb, EachSideOpensWithItsOwnOptions) {
  // An option only B's engine refuses names B; one only A's gets, A.
  AbConfig c = Small();
  c.orders = 1;
  c.b_options = {{"no_such_option", "1"}};
  AbResult r;
  Status s = MeasureAb(c, DefaultEnv(), &r);
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(std::string(s.message()).rfind("B: ", 0), 0u) << s.ToString();
  c.b_options.clear();
  c.a_options = {{"no_such_option", "1"}};
  s = MeasureAb(c, DefaultEnv(), &r);
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(std::string(s.message()).rfind("A: ", 0), 0u) << s.ToString();
}

TEST(BenchAb, EachSideRunsItsOwnEngine) {
  AbConfig c = Small();
  c.engine.clear();
  c.a_engine = "wophi";
  c.b_engine = "cceh";
  c.orders = 1;
  c.threads = 2;
  c.lookups = "get";
  c.phases = {"insert", "search", "delete"};
  AbResult r;
  Status s = MeasureAb(c, DefaultEnv(), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(r.phases.size(), 3u);
  EXPECT_EQ(r.phases[2].ratios[0].size(), 3u);
  // cceh knows first_try, wophi does not: B's option reaches B's engine only.
  c.b_options = {{"first_try", "off"}};
  EXPECT_TRUE(MeasureAb(c, DefaultEnv(), &r).ok());
  c.a_options = c.b_options;
  s = MeasureAb(c, DefaultEnv(), &r);
  EXPECT_EQ(std::string(s.message()).rfind("A: ", 0), 0u) << s.ToString();
}

// pmhash-slices, built beside the tool (ctest sets PMHASH_SLICES); without it the tests
// of a side in another process skip, loudly.
const char* SlicesPath() { return std::getenv("PMHASH_SLICES"); }
#define REQUIRE_SLICES()                                                                 \
  do {                                                                                   \
    if (SlicesPath() == nullptr) {                                                       \
      GTEST_SKIP() << "*** PMHASH_SLICES is not set: the tests of bench ab's server "     \
                      "sides DID NOT RUN (run them through ctest) ***";                  \
    }                                                                                    \
    ASSERT_EQ(access(SlicesPath(), X_OK), 0) << SlicesPath() << " is not executable";    \
  } while (0)

TEST(BenchAb, ASideInAServerProcessRunsTheSameSlices) {
  REQUIRE_SLICES();
  for (bool dram : {true, false}) {
    AbConfig c = Small();
    c.dram_pool = dram;
    c.a_server = SlicesPath();
    c.b_options = {{"first_try", "off"}};
    c.threads = 2;
    c.phases = {"insert", "search", "negative", "delete"};
    AbResult r;
    const Status s = MeasureAb(c, DefaultEnv(), &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(r.phases.size(), 4u);
    for (const AbPhase& p : r.phases) {
      ASSERT_EQ(p.ratios.size(), 2u);
      EXPECT_EQ(p.ratios[0].size(), p.phase == "insert" ? 5u : 3u) << p.phase;
      for (double x : p.a_mops[1]) EXPECT_GT(x, 0);
    }
    // The pool files are gone with the servers.
    if (!dram) {
      EXPECT_NE(access(("/dev/shm/pmhash-ab-" + std::to_string(getpid()) + "-0").c_str(), F_OK), 0);
    }
  }
}

TEST(BenchAb, AServerThatFailsNamesItsSide) {
  REQUIRE_SLICES();
  AbConfig c = Small();
  c.orders = 1;
  c.b_server = SlicesPath();
  c.b_options = {{"no_such_option", "1"}};
  AbResult r;
  Status s = MeasureAb(c, DefaultEnv(), &r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(std::string(s.message()).rfind("B: pmhash-slices: ", 0), 0u) << s.ToString();
  c.b_options.clear();
  c.b_server = "/nonexistent/pmhash-slices";
  s = MeasureAb(c, DefaultEnv(), &r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(std::string(s.message()).rfind("B: ", 0), 0u) << s.ToString();
  // A server refuses what its build cannot do, and the run says which side.
  c.b_server = SlicesPath();
  c.engine = "no-such-engine";
  s = MeasureAb(c, DefaultEnv(), &r);
  EXPECT_FALSE(s.ok());
}

TEST(BenchAb, AHungServerFailsTheRunAndIsKilled) {
  // A "server" that says ready, then never answers: the run fails after reply_seconds.
  const std::string script = ::testing::TempDir() + "ab_hung_server.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\necho ready\nexec sleep 120\n";
  }
  ASSERT_EQ(chmod(script.c_str(), 0700), 0);
  AbConfig c = Small();
  c.orders = 1;
  c.b_server = script;
  c.reply_seconds = 1;
  AbResult r;
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = MeasureAb(c, DefaultEnv(), &r);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(std::string(s.message()).find("B: pmhash-slices sent nothing for 1 s"),
            std::string::npos)
      << s.ToString();
  EXPECT_LT(seconds, 60) << "the sleeping server was waited for, not killed";
  std::remove(script.c_str());
}

TEST(BenchAb, TheServerAnswersEveryLine) {
  // Its protocol, through a shell pipe: one reply a line, a bad line an error, not an end.
  REQUIRE_SLICES();
  const std::string command = std::string("printf 'run scan 0 1\\nrun insert 0 10\\nrun "
                                          "insert 5 11\\nrun search 0 4\\nrun delete 9 3\\n"
                                          "run negative 0 2\\nquit\\n' | ") +
                              SlicesPath() + " engine=cceh records=10";
  FILE* p = popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::vector<std::string> lines;
  char line[512];
  while (std::fgets(line, sizeof(line), p) != nullptr) lines.emplace_back(line);
  EXPECT_EQ(pclose(p), 0);
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[0], "ready\n");
  EXPECT_EQ(lines[1].rfind("error bad command", 0), 0u) << lines[1];  // no phase "scan"
  EXPECT_EQ(lines[2].rfind("ok ", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("error bad command", 0), 0u) << lines[3];  // past records
  EXPECT_EQ(lines[4].rfind("ok ", 0), 0u) << lines[4];
  EXPECT_EQ(lines[5].rfind("error bad command", 0), 0u) << lines[5];  // begin past end
  EXPECT_EQ(lines[6].rfind("ok ", 0), 0u) << lines[6];
  // A bad argument: one error line, exit 2.
  p = popen((std::string(SlicesPath()) + " engine=cceh records=10 threads=0 </dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  ASSERT_NE(std::fgets(line, sizeof(line), p), nullptr);
  EXPECT_EQ(std::string(line).rfind("error bad value in 'threads=0'", 0), 0u) << line;
  int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
  // An argument that is not KEY=VALUE, an unknown key, and no engine: the same.
  const std::pair<const char*, const char*> refused[] = {
      {" engine=cceh records=10 bogus", "error 'bogus' is not KEY=VALUE"},
      {" engine=cceh records=10 colour=red", "error unknown argument 'colour'"},
      {" records=10", "error engine= and records= are required"}};
  for (const auto& [args, message] : refused) {
    p = popen((std::string(SlicesPath()) + args + " </dev/null").c_str(), "r");
    ASSERT_NE(p, nullptr);
    ASSERT_NE(std::fgets(line, sizeof(line), p), nullptr) << args;
    EXPECT_EQ(std::string(line).rfind(message, 0), 0u) << line;
    status = pclose(p);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << args << ": " << status;
  }
}

TEST(BenchAb, BadConfigsAreRefused) {
  AbConfig c = Small();
  c.engine.clear();
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.phases = {"search", "insert"};
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c.phases = {"insert", "scan"};
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.slice = 0;
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.orders = 3;
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.threads = 0;
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.lookups = "multi";
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.engine.clear();
  c.a_engine = "cceh";  // B has none
  EXPECT_TRUE(ValidateAb(c).IsInvalidArgument());
  c = Small();
  c.engine = "no-such-engine";
  AbResult r;
  EXPECT_FALSE(MeasureAb(c, DefaultEnv(), &r).ok());
  // The command line: bad arguments exit 2.
  EXPECT_EQ(RunAbArgs({"--engine", "cceh", "--a", "first_try"}, DefaultEnv()), 2);
  EXPECT_EQ(RunAbArgs({"--engine", "cceh", "--pool", "disk"}, DefaultEnv()), 2);
  EXPECT_EQ(RunAbArgs({"--engine", "cceh", "--counters", "maybe"}, DefaultEnv()), 2);
  EXPECT_EQ(RunAbArgs({"--a", "x=1"}, DefaultEnv()), 2);  // no engine
  EXPECT_EQ(RunAbArgs({"--engine", "cceh", "--phases", "delete"}, DefaultEnv()), 2);
  // Well-formed but refused by the engine: the run fails (exit 1), naming the side.
  EXPECT_EQ(RunAbArgs({"--engine", "cceh", "--records", "100", "--pool", "dram", "--b",
                       "first_try=\"x\\"},
                      DefaultEnv()),
            1);
}

}  // namespace
}  // namespace pmhash::bench
