// Real process crashes (SIGKILL of a child working on a file pool) and damaged pool
// files (flipped bytes, truncation) opened in a child with a time limit.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "crash/kill_soak.h"
#include "pm/pool.h"
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
  const std::string dir = TempDir("kill");
  SoakConfig config;
  config.threads = 1;
  config.rounds = static_cast<int>(6 * SoakFactor());
  config.recovery_kill_rate = 0;
  config.rounds_per_pool = config.rounds;
  config.keys_per_thread = 300;
  config.seed = SoakSeed(77);
  const SoakResult r = RunKillSoak(spec, dir, config);
  EXPECT_EQ(r.failure, "");
  EXPECT_GT(r.acked, 0u);
  fs::remove_all(dir);
}

// The kill -9 soak: four worker threads on a pool that grows from 16 keys (a fresh pool
// every 3 rounds), killed at random moments, also while opening (recovering) the pool;
// reopens killed in the middle of their recovery; checks in a child with a deadline (a
// recovery that hangs fails). PMHASH_SOAK_SECONDS runs it that long (`make soak`),
// PMHASH_SOAK_SEED replays a seed.
TEST_P(ProcessCrash, SoakWithThreadsAndKilledRecoveries) {
  const EngineSpec spec = FindSpec(GetParam());
  const std::string dir = TempDir("soak");
  SoakConfig config;
  config.seconds = SoakSeconds();
  config.seed = SoakSeed(1);
  const SoakResult r = RunKillSoak(spec, dir, config);
  EXPECT_EQ(r.failure, "");
  std::printf("%s: %llu rounds in %.1f s (seed %llu), %llu acknowledged ops and %llu in flight "
              "checked, %llu workers killed while opening, %llu of %llu reopens killed while "
              "opening, %llu fresh pools\n",
              spec.name.c_str(), static_cast<unsigned long long>(r.rounds), r.seconds,
              static_cast<unsigned long long>(config.seed),
              static_cast<unsigned long long>(r.acked),
              static_cast<unsigned long long>(r.inflight),
              static_cast<unsigned long long>(r.killed_opening),
              static_cast<unsigned long long>(r.recovery_kills_in_open),
              static_cast<unsigned long long>(r.recovery_kills),
              static_cast<unsigned long long>(r.fresh_pools));
  EXPECT_GT(r.acked, 0u);
  EXPECT_GT(r.inflight, 0u) << "no kill caught an op in flight";
  fs::remove_all(dir);
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

// ---- Damaged files -------------------------------------------------------------------

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs fn in a child with a time limit. "" if it exited 0; else how it ended.
std::string InChild(const std::function<int()>& fn, int seconds) {
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) _exit(fn());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return "hung (killed after " + std::to_string(seconds) + " s)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFSIGNALED(status)) return "crashed with signal " + std::to_string(WTERMSIG(status));
  if (WEXITSTATUS(status) != 0) return "exited with " + std::to_string(WEXITSTATUS(status));
  return "";
}

// The `pmhash` tool: $PMHASH_TOOL (ctest sets it), else the one built beside this test
// binary. "" and *problem set if there is none to run.
std::string ToolPath(std::string* problem) {
  problem->clear();
  if (const char* env = std::getenv("PMHASH_TOOL")) {
    if (access(env, X_OK) == 0) return env;
    *problem = std::string("PMHASH_TOOL=") + env + " is not an executable";
    return "";
  }
  std::error_code ec;
  const fs::path sibling = fs::read_symlink("/proc/self/exe", ec).parent_path() / "pmhash";
  if (!ec && access(sibling.c_str(), X_OK) == 0) return sibling.string();
  *problem = "PMHASH_TOOL is not set and " + sibling.string() +
             " does not exist (build the pmhash target, or set PMHASH_TOOL)";
  return "";
}

class DamagedFile : public ::testing::TestWithParam<std::string> {};

// Flipped bytes in the header, the clean flag, the engine's root and heap, and
// truncation: opening gives a clear error or a working index, never a crash or hang.
TEST_P(DamagedFile, OpenGivesAClearErrorOrWorks) {
  const EngineSpec spec = FindSpec(GetParam());
  const std::string dir = TempDir("damage");
  const std::string path = dir + "/pool";
  Options o;
  o.pool_size = 4ull << 20;
  o.initial_capacity = 16;
  std::vector<std::string> bases;
  for (bool clean : {true, false}) {
    fs::remove(path);
    std::unique_ptr<Index> index;
    ASSERT_TRUE(OpenFile(spec, path, o, &index).ok());
    for (int i = 0; i < 300; ++i) {
      ASSERT_TRUE(index->Put("k" + std::to_string(i), std::string(i % 2 ? 8 : 33, 'v')).ok());
    }
    if (clean) {
      ASSERT_TRUE(index->Close().ok());
    } else {
      Abandon(&index);
    }
    bases.push_back(ReadFile(path));
  }
  const auto* header = reinterpret_cast<const pm::PoolHeader*>(bases[0].data());
  const uint64_t heap = header->heap_offset, heap_size = header->heap_size;
  ASSERT_TRUE(heap > 0 && heap_size > (256 << 10) && heap + heap_size <= bases[0].size());
  std::mt19937_64 rng(GetParam().size() * 31 + 5);
  std::string tool_problem;
  const std::string tool = ToolPath(&tool_problem);
  EXPECT_EQ(tool_problem, "") << "pmhash pool check is not tested";
  const int mutations = static_cast<int>(24 * SoakFactor());
  for (int m = 0; m < mutations; ++m) {
    std::string bytes = bases[m % 2];
    std::string what;
    switch (m % 6) {
      case 0:  // header
      case 1: {
        const size_t off = rng() % 256;
        bytes[off] ^= static_cast<char>(1 + rng() % 255);
        what = "header byte " + std::to_string(off);
        break;
      }
      case 2: {  // the header's checksum and state word, and the root area
        const size_t off = m % 4 == 0 ? pm::kPoolStateOffset - 8 + rng() % 16 : 4096 + rng() % 4096;
        bytes[off] ^= static_cast<char>(1 + rng() % 255);
        what = "byte " + std::to_string(off);
        break;
      }
      case 3:
      case 4: {  // the engine's structures: dense at the start of the heap, then anywhere
        what = "bytes";
        for (int i = 0; i < 8; ++i) {
          const size_t off = heap + rng() % (m % 6 == 3 ? (256 << 10) : heap_size);
          bytes[off] ^= static_cast<char>(1 + rng() % 255);
          what += " " + std::to_string(off);
        }
        break;
      }
      default: {
        const size_t len = rng() % 3 == 0 ? rng() % 4096 : rng() % bytes.size();
        bytes.resize(len);
        what = "truncated to " + std::to_string(len);
      }
    }
    what += m % 2 ? " (crashed pool)" : " (clean pool)";
    WriteFile(path, bytes);
    const std::string outcome = InChild(
        [&] {
          std::unique_ptr<Index> index;
          Status s = OpenFile(spec, path, o, &index);
          if (!s.ok()) return s.message().empty() ? 3 : 0;  // a clear error
          Model seen;
          (void)Snapshot(*index, &seen);
          (void)index->Count();
          std::string v;
          for (int i = 0; i < 20; ++i) (void)index->Get("k" + std::to_string(i), &v);
          (void)index->Put("new-key", "new-val!");
          (void)index->Close();
          return 0;
        },
        20);
    EXPECT_EQ(outcome, "") << "engine " << spec.name << ", mutation #" << m
                           << " of this deterministic test: opening a pool with " << what;
    if (!tool.empty()) {
      WriteFile(path, bytes);
      const std::string check = InChild(
          [&] {
            const int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 1);
            dup2(devnull, 2);
            execl(tool.c_str(), tool.c_str(), "pool", "check", path.c_str(),
                  static_cast<char*>(nullptr));
            return 127;  // exec failed: the tool did not run
          },
          20);
      EXPECT_TRUE(check.rfind("crashed", 0) != 0 && check.rfind("hung", 0) != 0 &&
                  check != "exited with 127")
          << "pmhash pool check (" << tool << ") on a pool with " << what << ": " << check;
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Engines, DamagedFile, ::testing::ValuesIn(Names(ConformanceEngines())),
                         [](const auto& info) { return GtestName(info.param); });

}  // namespace
}  // namespace pmhash::testing
