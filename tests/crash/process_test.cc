// Real process crashes: SIGKILL of a child working on a file pool. (Damaged pool files:
// flip_fuzz_test.cc.)
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>

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

// One message from the child: an op it is about to run (intent) or has run (ack).
struct Record {
  uint8_t ack;
  uint8_t kind;
  uint8_t code;  // Status::Code of the result (ack)
  uint8_t key_len;
  uint8_t value_len;
  char key[16];
  char value[48];
};
static_assert(sizeof(Record) <= PIPE_BUF, "records must be written atomically");

Op ToOp(const Record& r) {
  return {static_cast<Op::Kind>(r.kind), std::string(r.key, r.key_len),
          std::string(r.value, r.value_len)};
}

// The i-th random op of a child's stream: a key of 300, a value of 8 or 10-47 bytes.
Record RandomRecord(std::mt19937_64& rng, uint64_t seed, uint64_t i) {
  Record r{};
  r.kind = static_cast<uint8_t>(rng() % 4);
  const std::string key = "key-" + std::to_string(rng() % 300);
  const size_t vlen = rng() % 4 ? 8 : 10 + rng() % 38;
  r.key_len = static_cast<uint8_t>(key.size());
  std::memcpy(r.key, key.data(), key.size());
  r.value_len = static_cast<uint8_t>(vlen);
  for (size_t j = 0; j < vlen; ++j) r.value[j] = static_cast<char>('a' + (seed + i + j) % 26);
  return r;
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

// Runs random ops on the pool forever, reporting each through `fd`.
[[noreturn]] void ChildLoop(const EngineSpec& spec, const std::string& path, const Options& o,
                            int fd, uint64_t seed) {
  std::unique_ptr<Index> index;
  if (!OpenFile(spec, path, o, &index).ok()) _exit(3);
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0;; ++i) {
    Record r = RandomRecord(rng, seed, i);
    if (write(fd, &r, sizeof(r)) != sizeof(r)) _exit(4);
    Status s = ApplyToIndex(ToOp(r), index.get());
    r.ack = 1;
    r.code = static_cast<uint8_t>(s.code());
    if (write(fd, &r, sizeof(r)) != sizeof(r)) _exit(4);
  }
}

class ProcessCrash : public ::testing::TestWithParam<std::string> {};

TEST_P(ProcessCrash, AcknowledgedOpsSurviveSigkill) {
  const EngineSpec spec = FindSpec(GetParam());
  const TestPool pool = NewTestPool(spec, "kill");
  const std::string& dir = pool.dir;
  const std::string& path = pool.path;
  const Options& o = pool.options;
  Model model;
  std::mt19937_64 rng(77);
  const int rounds = static_cast<int>(6 * SoakFactor());
  uint64_t acked_total = 0;
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const uint64_t seed = rng();
    fflush(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      ChildLoop(spec, path, o, fds[1], seed);
    }
    close(fds[1]);
    // Read the child's reports until a random moment, then kill it.
    std::vector<Record> records;
    auto read_some = [&](int timeout_ms) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return false;
      Record r;
      const ssize_t n = read(fds[0], &r, sizeof(r));
      if (n != sizeof(r)) return false;
      records.push_back(r);
      return true;
    };
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(5 + rng() % 60);
    while (std::chrono::steady_clock::now() < until) read_some(1);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    while (read_some(0)) {
    }
    close(fds[0]);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child stopped by itself, exit "
                                     << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    std::optional<Op> inflight;
    for (const Record& r : records) {
      const Op op = ToOp(r);
      if (!r.ack) {
        inflight = op;
        continue;
      }
      inflight.reset();
      ++acked_total;
      Status want = ApplyToModel(op, &model);
      ASSERT_EQ(static_cast<int>(want.code()), r.code) << Describe(op) << " in round " << round;
    }
    std::unique_ptr<Index> index;
    Status s = OpenFile(spec, path, o, &index);
    ASSERT_TRUE(s.ok()) << "recovery after SIGKILL failed (round " << round << ", seed " << seed
                        << "): " << s.ToString();
    EXPECT_TRUE(index->Stats().recovered);
    ASSERT_EQ(CheckIndex(index.get(), model, inflight ? &*inflight : nullptr), "")
        << "round " << round << ", child seed " << seed;
    ASSERT_EQ(Snapshot(*index, &model), "");  // the interrupted op's outcome, now settled
    Abandon(&index);  // leave it unclean: the next child recovers again
  }
  EXPECT_GT(acked_total, 0u);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Engines, ProcessCrash, ::testing::ValuesIn(Names(CrashConsistentEngines())),
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
  for (uint64_t i = 0;; ++i) {
    Record r = RandomRecord(rng, seed, i);
    r.ack = 1;
    r.code = static_cast<uint8_t>(ApplyToIndex(ToOp(r), index.get()).code());
    if (write(fd, &r, sizeof(r)) != sizeof(r)) _exit(4);
    if (rng() % 30 == 0) raise(SIGSTOP);  // between ops: the parent may kill us here
  }
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
  Model model;
  std::mt19937_64 rng(78);
  const int rounds = static_cast<int>(4 * SoakFactor());
  uint64_t acked_total = 0, stops_total = 0;
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
    std::vector<Record> records;
    auto drain = [&](int timeout_ms) {
      pollfd p{fds[0], POLLIN, 0};
      while (poll(&p, 1, timeout_ms) > 0) {
        Record r;
        if (read(fds[0], &r, sizeof(r)) != sizeof(r)) return;
        records.push_back(r);
        timeout_ms = 0;
      }
    };
    // Let it run through a few stops; kill it at a stop chosen at random.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool killed = false;
    int status = 0;
    while (!killed) {
      drain(1);
      const pid_t w = waitpid(pid, &status, WNOHANG | WUNTRACED);
      ASSERT_GE(w, 0);
      if (w == pid && !WIFSTOPPED(status)) break;  // it ended by itself: reported below
      const bool stopped = w == pid;
      if (!stopped && std::chrono::steady_clock::now() < deadline) continue;
      if (stopped) {
        ++stops_total;
        drain(0);  // everything it wrote before stopping
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
    drain(0);
    close(fds[0]);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child ended by itself, exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    for (const Record& r : records) {
      const Op op = ToOp(r);
      ++acked_total;
      Status want = ApplyToModel(op, &model);
      ASSERT_EQ(static_cast<int>(want.code()), r.code) << Describe(op) << " in round " << round;
    }
    std::unique_ptr<Index> index;
    Status s = OpenFile(spec, path, o, &index);
    ASSERT_TRUE(s.ok()) << "reopening after a kill between ops failed (round " << round
                        << ", child seed " << seed << "): " << s.ToString();
    EXPECT_TRUE(index->Stats().recovered);
    ASSERT_EQ(CheckIndex(index.get(), model, nullptr), "")
        << "round " << round << ", child seed " << seed;
    Abandon(&index);  // leave it unclean: the next child recovers again
  }
  EXPECT_GT(acked_total, 0u);
  EXPECT_GE(stops_total, static_cast<uint64_t>(rounds));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Engines, ProcessKill, ::testing::ValuesIn(Names(ConformanceEngines())),
                         [](const auto& info) { return GtestName(info.param); });

}  // namespace
}  // namespace pmhash::testing
