// Real process crashes: SIGKILL of a child working on a file pool. (Damaged pool files:
// flip_fuzz_test.cc.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>

#include "crash/kill_soak.h"
#include "support/harness.h"

// GCC 12 warns falsely on "literal" + std::string (GCC bug 105651).
#pragma GCC diagnostic ignored "-Wrestrict"

namespace pmhash::testing {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& what) {
  std::string dir = ::testing::TempDir() + "pmhash_" + what + "_" + std::to_string(getpid());
  fs::create_directories(dir);
  return dir;
}

// ---- Kills at random moments (kill_soak.h) ---------------------------------------------

class ProcessCrash : public ::testing::TestWithParam<std::string> {};

// One worker thread (so at most one op in flight), 6 rounds on one pool, killed while
// opening it (one round in 4) or 0-60 ms into its ops.
TEST_P(ProcessCrash, AcknowledgedOpsSurviveSigkill) {
  const EngineSpec spec = FindSpec(GetParam());
  for (const uint64_t seed : TestSeeds({77})) {
    SCOPED_TRACE(SeedNote(seed));
    const std::string dir = TempDir("kill");
    SoakConfig config;
    config.threads = 1;
    config.rounds = static_cast<int>(6 * SoakFactor());
    config.recovery_kill_rate = 0;
    config.rounds_per_pool = config.rounds;
    config.keys_per_thread = 300;
    config.seed = seed;
    const SoakResult r = RunKillSoak(spec, dir, config);
    EXPECT_EQ(r.failure, "");
    EXPECT_GT(r.acked, 0u);
    fs::remove_all(dir);
  }
}

// The kill -9 soak: four worker threads on a pool that grows from 16 keys (a fresh pool
// every 3 rounds), killed at random moments, also while opening (recovering) the pool;
// reopens killed in the middle of their recovery; checks in a child with a deadline (a
// recovery that hangs fails). PMHASH_SOAK_SECONDS runs it that long (`make soak`); the
// seed (TestSeeds) draws the op streams and every choice of the run.
TEST_P(ProcessCrash, SoakWithThreadsAndKilledRecoveries) {
  const EngineSpec spec = FindSpec(GetParam());
  for (const uint64_t seed : TestSeeds({1})) {
    SCOPED_TRACE(SeedNote(seed));
    const std::string dir = TempDir("soak");
    SoakConfig config;
    config.seconds = SoakSeconds();
    config.seed = seed;
    const SoakResult r = RunKillSoak(spec, dir, config);
    EXPECT_EQ(r.failure, "");
    std::printf("%s: %llu rounds in %.1f s (seed %llu), %llu acknowledged ops and %llu in "
                "flight checked, %llu workers killed while opening, %llu of %llu reopens "
                "killed while opening, %llu fresh pools\n",
                spec.name.c_str(), static_cast<unsigned long long>(r.rounds), r.seconds,
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(r.acked),
                static_cast<unsigned long long>(r.inflight),
                static_cast<unsigned long long>(r.killed_opening),
                static_cast<unsigned long long>(r.recovery_kills_in_open),
                static_cast<unsigned long long>(r.recovery_kills),
                static_cast<unsigned long long>(r.fresh_pools));
    EXPECT_GT(r.acked, 0u);
    EXPECT_GT(r.inflight, 0u) << "no kill caught an op in flight";
    fs::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, ProcessCrash,
                         ::testing::ValuesIn(Names(CrashConsistentEngines())),
                         [](const auto& info) { return GtestName(info.param); });

// ---- A kill between operations --------------------------------------------------------

// Runs random ops on the pool forever, reporting each acknowledged one through `fd`,
// and stops itself (SIGSTOP) after about one op in 30: the parent then kills it or lets
// it continue. Exits 3 if the pool does not open, 4 if the pipe breaks.
[[noreturn]] void PausingChildLoop(const EngineSpec& spec, const std::string& path,
                                   const Options& o, int fd, uint64_t seed) {
  std::unique_ptr<Index> index;
  if (!OpenFile(spec, path, o, &index).ok()) _exit(3);
  std::mt19937_64 rng(seed);
  OpStream ops(seed, 0, 300);
  for (;;) {
    const Op op = ops.Next();
    const Status s = ApplyToIndex(op, index.get());
    if (!WriteRecord(fd, Record::Of(Record::kAck, 0, op, s.code()))) _exit(4);
    if (rng() % 30 == 0) raise(SIGSTOP);  // between ops: the parent may kill us here
  }
}

// A fresh, cleanly closed pool of `spec` in a temporary directory named for `what`.
struct TestPool {
  std::string dir, path;
  Options options;
};
TestPool NewTestPool(const EngineSpec& spec, const std::string& what) {
  TestPool t;
  t.dir = TempDir(what);
  t.path = t.dir + "/" + GtestName(spec.name) + ".pool";
  fs::remove(t.path);
  t.options.pool_size = 8ull << 20;
  t.options.initial_capacity = 16;
  std::unique_ptr<Index> index;
  EXPECT_TRUE(OpenFile(spec, t.path, t.options, &index).ok());
  if (index != nullptr) {
    EXPECT_TRUE(index->Close().ok());
  }
  return t;
}

class ProcessKill : public ::testing::TestWithParam<std::string> {};

// Every engine, crash-consistent or not: a process killed between operations loses
// nothing (the page cache survives the process), so the reopened pool recovers and
// holds every acknowledged op. The child stops itself at random points between ops;
// the parent kills it while stopped (or lets it go on), reopens and checks.
TEST_P(ProcessKill, ReopensAfterAKillBetweenOps) {
  const EngineSpec spec = FindSpec(GetParam());
  const TestPool pool = NewTestPool(spec, "stop");
  const std::string& dir = pool.dir;
  const std::string& path = pool.path;
  const Options& o = pool.options;
  Acked acked;
  std::mt19937_64 rng(78);
  const int rounds = static_cast<int>(4 * SoakFactor());
  uint64_t stops_total = 0;
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const uint64_t seed = rng();
    fflush(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      PausingChildLoop(spec, path, o, fds[1], seed);
    }
    close(fds[1]);
    RecordReader reader(fds[0]);
    std::vector<Record> records;
    // Let it run through a few stops; kill it at a stop chosen at random.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool killed = false;
    int status = 0;
    while (!killed) {
      reader.Read(1, &records);
      const pid_t w = waitpid(pid, &status, WNOHANG | WUNTRACED);
      ASSERT_GE(w, 0);
      if (w == pid && !WIFSTOPPED(status)) break;  // it ended by itself: reported below
      const bool stopped = w == pid;
      if (!stopped && std::chrono::steady_clock::now() < deadline) continue;
      if (stopped) {
        ++stops_total;
        reader.Read(0, &records);  // everything it wrote before stopping
      }
      if (stopped && rng() % 3 != 0) {
        kill(pid, SIGCONT);
        continue;
      }
      kill(pid, SIGKILL);  // stopped between ops (or out of time: then mid-op, see below)
      waitpid(pid, &status, 0);
      killed = stopped;
      if (!stopped) FAIL() << "the child did not stop within 10 s (round " << round << ")";
    }
    reader.Drain(&records);
    close(fds[0]);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child ended by itself, exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    ASSERT_EQ(acked.Apply(records), "") << "round " << round;
    std::unique_ptr<Index> index;
    Status s = OpenFile(spec, path, o, &index);
    ASSERT_TRUE(s.ok()) << "reopening after a kill between ops failed (round " << round
                        << ", child seed " << seed << "): " << s.ToString();
    EXPECT_TRUE(index->Stats().recovered);
    ASSERT_EQ(CheckIndex(index.get(), acked.model(), nullptr), "")
        << "round " << round << ", child seed " << seed;
    Abandon(&index);  // leave it unclean: the next child recovers again
  }
  EXPECT_GT(acked.acked(), 0u);
  EXPECT_GE(stops_total, static_cast<uint64_t>(rounds));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Engines, ProcessKill, ::testing::ValuesIn(Names(ConformanceEngines())),
                         [](const auto& info) { return GtestName(info.param); });

}  // namespace
}  // namespace pmhash::testing
