// Tests of `pmhash bench compare` on saved result files (src/bench/testdata/): the
// verdict rule (ranges that do not overlap, a change inside the noise, one round), the
// ratio of medians, unmatched rows and differing settings, and bad input.
#include "bench/compare.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "bench/driver.h"

namespace pmhash::bench {
namespace {

std::string TestData(const std::string& name) {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/testdata/" + name;
}

Json Load(const std::string& name) {
  std::ifstream in(TestData(name));
  std::stringstream text;
  text << in.rdbuf();
  Json doc;
  EXPECT_TRUE(Json::Parse(text.str(), &doc).ok()) << name;
  return doc;
}

const CompareRow* Row(const Comparison& c, const std::string& engine, const std::string& phase) {
  for (const CompareRow& r : c.rows) {
    if (r.engine == engine && r.phase == phase) return &r;
  }
  return nullptr;
}

struct CapturedOutput {
  std::string out, err;
};

BenchEnv CaptureEnv(CapturedOutput* cap) {
  BenchEnv env;
  env.out = [cap](const std::string& s) { cap->out += s; };
  env.err = [cap](const std::string& s) { cap->err += s + "\n"; };
  return env;
}

TEST(Compare, VerdictIsBySpreadNotByMedianAlone) {
  Comparison c;
  ASSERT_TRUE(CompareResults(Load("compare_old.json"), Load("compare_new.json"), &c).ok());
  // group load: 1.20-1.30 before, 1.45-1.55 after: the ranges do not overlap.
  const CompareRow* faster = Row(c, "group", "load");
  ASSERT_NE(faster, nullptr);
  EXPECT_EQ(faster->verdict, Verdict::kFaster);
  EXPECT_DOUBLE_EQ(faster->ratio, 1.50 / 1.25);
  EXPECT_EQ(faster->old_mops.samples.size(), 3u);
  // group search: median 6.2 -> 6.3, ranges 6.0-6.5 and 6.1-6.4 overlap: inside the noise.
  const CompareRow* noise = Row(c, "group", "search");
  ASSERT_NE(noise, nullptr);
  EXPECT_EQ(noise->verdict, Verdict::kNoise);
  EXPECT_GT(noise->ratio, 1);
  // linear load: 2.4-2.6 before, 2.0-2.2 after.
  EXPECT_EQ(Row(c, "linear", "load")->verdict, Verdict::kSlower);
  // The floor loops are compared too (the machine itself may have changed).
  ASSERT_NE(Row(c, "floor", "insert"), nullptr);
  EXPECT_EQ(Row(c, "floor", "insert")->verdict, Verdict::kNoise);
  // Rows in one file only, and what differs between the runs, are listed.
  EXPECT_EQ(c.only_old, (std::vector<std::string>{"linear search t1"}));
  EXPECT_EQ(c.only_new, (std::vector<std::string>{"smartht load t1"}));
  EXPECT_EQ(c.differences, (std::vector<std::string>{"machine.commit: abc1234 vs def5678"}));
  const std::string text = CompareText(c, "old.json", "new.json");
  EXPECT_NE(text.find("faster"), std::string::npos) << text;
  EXPECT_NE(text.find("do not overlap"), std::string::npos) << text;
  EXPECT_NE(text.find("only in NEW: smartht load t1"), std::string::npos) << text;
}

TEST(Compare, OneRoundCannotBeToldFromNoise) {
  Comparison c;
  ASSERT_TRUE(CompareResults(Load("compare_v1.json"), Load("compare_new.json"), &c).ok());
  const CompareRow* load = Row(c, "group", "load");
  ASSERT_NE(load, nullptr);  // an older file: no run, phase_index or batch, one round
  EXPECT_EQ(load->verdict, Verdict::kOneRound);
  EXPECT_NEAR(load->ratio, 1.50 / 1.3333, 1e-9);
  EXPECT_EQ(load->old_mops.samples.size(), 1u);
}

TEST(Compare, CommandLineAndBadInput) {
  CapturedOutput ok;
  EXPECT_EQ(RunCompareArgs({TestData("compare_old.json"), TestData("compare_new.json")},
                           CaptureEnv(&ok)),
            0)
      << ok.err;
  EXPECT_NE(ok.out.find("NEW/OLD"), std::string::npos) << ok.out;
  CapturedOutput help;
  EXPECT_EQ(RunCompareArgs({"--help"}, CaptureEnv(&help)), 0);
  EXPECT_NE(help.out.find("do not overlap"), std::string::npos);

  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  const std::string other = dir + "/pmhash-compare-other-" + std::to_string(::getpid());
  const std::string broken = dir + "/pmhash-compare-broken-" + std::to_string(::getpid());
  const std::string alone = dir + "/pmhash-compare-alone-" + std::to_string(::getpid());
  // Another format: the persistence micro-benchmark's JSON.
  std::ofstream(other) << R"({"benchmark": "persist-micro", "results": [{"ns_per_op": 1}]})";
  std::ofstream(broken) << R"({"results": [)";
  std::ofstream(alone) << R"({"results": [{"engine": "wophi", "threads": 1, "phase": "load",
                                         "mops": 2.0}]})";
  const std::string old_file = TestData("compare_old.json");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{old_file}, "two result files"},
      {{old_file, old_file, old_file}, "two result files"},
      {{"--bogus", old_file, old_file}, "--bogus"},
      {{old_file, "/nonexistent/new.json"}, "cannot read /nonexistent/new.json"},
      {{old_file, broken}, "JSON"},
      {{other, old_file}, "OLD is not a pmhash bench --json result file"},
      {{old_file, alone}, "no engine in common"},
  };
  for (const auto& [args, needle] : cases) {
    CapturedOutput cap;
    EXPECT_EQ(RunCompareArgs(args, CaptureEnv(&cap)), 2) << needle;
    EXPECT_EQ(std::count(cap.err.begin(), cap.err.end(), '\n'), 1) << cap.err;
    EXPECT_EQ(cap.err.rfind("pmhash bench compare: ", 0), 0u) << cap.err;
    EXPECT_NE(cap.err.find(needle), std::string::npos) << cap.err;
    EXPECT_TRUE(cap.out.empty()) << cap.out;
  }
  ::unlink(other.c_str());
  ::unlink(broken.c_str());
  ::unlink(alone.c_str());
}

// A file the driver wrote, against itself: every row matches, nothing is "faster".
TEST(Compare, DriverOutputAgainstItselfIsAllNoise) {
  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  const std::string path = dir + "/pmhash-compare-self-" + std::to_string(::getpid());
  CapturedOutput run;
  BenchEnv env = CaptureEnv(&run);
  env.engines = [] { return std::vector<std::string>{"linear"}; };
  const BenchEnv registered = DefaultEnv();
  env.open = registered.open;
  env.info = registered.info;
  ASSERT_EQ(RunBenchArgs({"--engine", "linear", "--records", "500", "--phases", "load,search",
                          "--pool", "dram", "--pool-size", "8M", "--repeat", "2", "--json",
                          path, "--quiet"},
                         env),
            0)
      << run.err;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path.c_str());
  Json doc;
  ASSERT_TRUE(Json::Parse(text.str(), &doc).ok());
  Comparison c;
  ASSERT_TRUE(CompareResults(doc, doc, &c).ok());
  ASSERT_EQ(c.rows.size(), 2u);
  for (const CompareRow& r : c.rows) {
    EXPECT_EQ(r.verdict, Verdict::kNoise);
    EXPECT_DOUBLE_EQ(r.ratio, 1.0);
    EXPECT_EQ(r.new_mops.samples.size(), 2u);
  }
  EXPECT_TRUE(c.only_old.empty() && c.only_new.empty() && c.differences.empty());
}

}  // namespace
}  // namespace pmhash::bench
