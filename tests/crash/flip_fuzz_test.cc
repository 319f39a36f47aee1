// Damaged pool files: random byte flips (and truncation, extension, zeroed pages) in
// pools of every registered engine, after a clean close and after a crash. Each damaged
// file is given to `pmhash pool check` and then opened and used, each in a child with a
// time limit. Required:
//   * never a crash or a hang, in `check` or in the library;
//   * every flip in a byte whose region is marked checked (Engine::DescribeLayout: a
//     checksum, a sealed word, bytes that must be zero) is found by `check`;
//   * when `check` says OK, the index agrees with itself: iteration and Count() agree, and
//     Get finds every key iteration returns, with its value (a flip `check` misses may
//     change data, e.g. an inline value, but never leave an index that contradicts
//     itself);
//   * a truncated file is always refused.
// It reports, by region, how many flips `check` found and how many it missed that changed
// the data (docs/reliability.md). Flips are chosen region by region (uniform over the
// regions present, then over the bytes of the region), plus one flip in each checked
// metadata structure (roots, table and block headers, allocator and undo-log words).
//
// Short by default (make test); PMHASH_FLIP_FUZZ=N flips N bytes per region per pool
// (default 2), as `make flip-fuzz` does for the figures in docs/reliability.md.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "engines/engine.h"
#include "pm/regions.h"
#include "support/harness.h"

// GCC 12 warns falsely on "literal" + std::string (GCC bug 105651).
#pragma GCC diagnostic ignored "-Wrestrict"

namespace pmhash::testing {
namespace {

namespace fs = std::filesystem;
using pm::Region;

constexpr uint64_t kPoolSize = 4ull << 20;
constexpr int kChildSeconds = 20;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs fn in a child with a time limit: its exit code, or -1 with *how saying how it
// ended otherwise (a signal, a hang).
int InChild(const std::function<int()>& fn, std::string* how) {
  how->clear();
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    *how = "fork failed";
    return -1;
  }
  if (pid == 0) _exit(fn());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kChildSeconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      *how = "hung (killed after " + std::to_string(kChildSeconds) + " s)";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  if (WIFSIGNALED(status)) {
    *how = "crashed with signal " + std::to_string(WTERMSIG(status));
    return -1;
  }
  return WEXITSTATUS(status);
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

// PMHASH_FLIP_FUZZ, or 0 when unset (the short run).
uint64_t LongRun() {
  const char* env = std::getenv("PMHASH_FLIP_FUZZ");
  const long n = env == nullptr ? 0 : std::atol(env);
  return n > 0 ? static_cast<uint64_t>(n) : 0;
}
uint64_t FlipsPerRegion() { return std::max<uint64_t>(1, LongRun()); }
// Checked engine metadata structures that get a flip of their own: all in a long run.
constexpr size_t kShortRunStructures = 6;
// Live inline keys that get one damaged byte each (a key moved off its home).
constexpr int kKeyFlips = 2;

// A pool image before damage, and what each of its bytes is.
struct Image {
  bool clean = false;
  std::string bytes;
  std::vector<Region> region;             // per byte
  std::vector<bool> checked;              // per byte
  std::vector<std::pair<uint64_t, uint64_t>> structures;  // checked engine metadata
  uint64_t root_bytes = 0;  // the engine's root, at pm::kRootOffset
  Model model;
};

// What the outcomes were, by region and whether the byte is checked (index 2r + checked).
struct Tally {
  uint64_t flips = 0, detected = 0, silent = 0;  // silent: missed, and the data changed
};
using Tallies = std::array<Tally, 2 * pm::kRegionCount>;

// Every engine's figures, printed when the suite ends.
std::mutex g_totals_mu;
std::map<std::string, Tallies> g_totals;  // by "clean" / "crashed"
std::map<std::string, Tally> g_whole_file;  // truncation, extension, zeroed pages

std::string Table(const Tallies& t) {
  std::string out;
  char line[160];
  for (int i = 0; i < 2 * pm::kRegionCount; ++i) {
    if (t[i].flips == 0) continue;
    const std::string name =
        std::string(pm::RegionName(static_cast<Region>(i / 2))) + (i % 2 ? ", checked" : "");
    std::snprintf(line, sizeof(line),
                  "    %-32s %6llu flips  %6llu found (%5.1f%%)  %6llu missed and changed data\n",
                  name.c_str(), static_cast<unsigned long long>(t[i].flips),
                  static_cast<unsigned long long>(t[i].detected),
                  100.0 * static_cast<double>(t[i].detected) / static_cast<double>(t[i].flips),
                  static_cast<unsigned long long>(t[i].silent));
    out += line;
  }
  return out;
}

class FlipFuzzReport : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard<std::mutex> l(g_totals_mu);
    if (g_totals.empty()) return;
    std::printf("\nflip fuzz, all engines (PMHASH_FLIP_FUZZ=%llu flips per region per pool):\n",
                static_cast<unsigned long long>(FlipsPerRegion()));
    for (const auto& [state, t] : g_totals) {
      std::printf("  %s pools\n%s", state.c_str(), Table(t).c_str());
    }
    for (const auto& [what, t] : g_whole_file) {
      std::printf("  %-24s %6llu tries  %6llu found  %6llu missed and changed data\n",
                  what.c_str(), static_cast<unsigned long long>(t.flips),
                  static_cast<unsigned long long>(t.detected),
                  static_cast<unsigned long long>(t.silent));
    }
  }
};
const auto* const g_report = ::testing::AddGlobalTestEnvironment(new FlipFuzzReport);

// The i-th key and value of the population: inline (8-byte key and value), a long key,
// or a long value, in turn.
std::pair<std::string, std::string> Entry(uint64_t i) {
  char k[9];
  std::snprintf(k, sizeof(k), "k%07llu", static_cast<unsigned long long>(i));
  const std::string key(k, 8);
  switch (i % 3) {
    case 0:
      return {key, "v" + key.substr(1)};
    case 1:
      return {"a longer key, " + key, "v" + key.substr(1)};
    default:
      return {key, "a value stored out of line for " + key};
  }
}

class FlipFuzz : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    spec_ = FindSpec(GetParam());
    // Memory-backed when there is /dev/shm: every open and close syncs the pool, which on
    // a disk costs more than everything else the test does.
    const std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm/" : ::testing::TempDir();
    dir_ = base + "pmhash_flipfuzz_" + GtestName(spec_.name) + "_" + std::to_string(getpid());
    fs::create_directories(dir_);
    path_ = dir_ + "/pool";
    tool_ = ToolPath(&tool_problem_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Options BaseOptions() const {
    Options o;
    o.engine = spec_.name;
    o.path = path_;
    o.pool_size = kPoolSize;
    o.initial_capacity = 16;
    return o;
  }

  // A pool with inline and out-of-line keys, some deleted and some updated, closed
  // cleanly (and opened and closed once more, so that opening it allocates nothing new)
  // or dropped as a crash would, with no operation in flight.
  void Build(bool clean, Image* image) {
    image->clean = clean;
    fs::remove(path_);
    Options o = BaseOptions();
    o.create_if_missing = true;
    o.engine_options = spec_.test.crash_options;
    std::unique_ptr<engines::Engine> index;
    ASSERT_TRUE(engines::Open(o, &index).ok());
    Model& model = image->model;
    for (uint64_t i = 0; i < 360; ++i) {
      const auto [key, value] = Entry(i);
      ASSERT_TRUE(index->Insert(key, value).ok());
      model[key] = value;
    }
    for (uint64_t i = 0; i < 360; i += 7) {  // freed slots and records
      const std::string key = Entry(i).first;
      ASSERT_TRUE(index->Delete(key).ok());
      model.erase(key);
    }
    for (uint64_t i = 3; i < 360; i += 30) {  // inline -> record, record -> record
      const std::string key = Entry(i).first;
      if (model.count(key) == 0) continue;
      const std::string value = "an updated value of another length " + std::to_string(i);
      ASSERT_TRUE(index->Update(key, value).ok());
      model[key] = value;
    }
    index->WaitForBackgroundWork();
    if (clean) {
      ASSERT_TRUE(index->Close().ok());
      index.reset();
      Options again = BaseOptions();
      ASSERT_TRUE(engines::Open(again, &index).ok());
      index->WaitForBackgroundWork();
      ASSERT_TRUE(index->Close().ok());
    } else {
      index->Abandon();
    }
    image->bytes = ReadFile(path_);
    ASSERT_EQ(image->bytes.size(), kPoolSize);
  }

  // The region map, from the structures' own description on an opened copy.
  void Describe(Image* image) {
    WriteFile(path_, image->bytes);
    std::unique_ptr<engines::Engine> index;
    ASSERT_TRUE(engines::Open(BaseOptions(), &index).ok());
    index->WaitForBackgroundWork();
    image->region.assign(kPoolSize, Region::kFree);
    image->checked.assign(kPoolSize, false);
    std::string overlap;
    index->DescribeLayout([&](uint64_t off, uint64_t len, Region r, bool checked) {
      ASSERT_LE(off + len, kPoolSize) << pm::RegionName(r);
      for (uint64_t i = off; i < off + len; ++i) {
        if (image->region[i] != Region::kFree && overlap.empty()) {
          overlap = std::string(pm::RegionName(r)) + " over " +
                    pm::RegionName(image->region[i]) + " at pool offset " + std::to_string(i);
        }
        image->region[i] = r;
        image->checked[i] = checked;
      }
      if (checked && r == Region::kEngineMetadata) image->structures.push_back({off, len});
      if (off == pm::kRootOffset) image->root_bytes = len;
    });
    EXPECT_EQ(overlap, "") << "two structures describe the same byte";
    index->Abandon();
  }

  // `pmhash pool check` on `bytes`: 0 OK, 1 found damage; -1 (with *how) crashed or hung.
  int Check(const std::string& bytes, std::string* how) {
    WriteFile(path_, bytes);
    return InChild(
        [&] {
          const int devnull = open("/dev/null", O_WRONLY);
          dup2(devnull, 1);
          dup2(devnull, 2);
          execl(tool_.c_str(), tool_.c_str(), "pool", "check", path_.c_str(),
                static_cast<char*>(nullptr));
          return 127;
        },
        how);
  }

  // Opens and uses `bytes` through the library: 0 the index agrees with itself and holds
  // the model; 1 it agrees with itself and holds other data; 2 it contradicts itself; 3
  // the open was refused (with a message); -1 (with *how) crashed or hung.
  int Use(const std::string& bytes, const Model& model, std::string* how) {
    WriteFile(path_, bytes);
    return InChild(
        [&] {
          std::unique_ptr<Index> index;
          Status s = pmhash::Open(BaseOptions(), &index);
          if (!s.ok()) return s.message().empty() ? 4 : 3;
          Model seen;
          const std::string twice = Snapshot(*index, &seen);
          bool consistent = twice.empty() && seen.size() == index->Count();
          for (const auto& [k, v] : seen) {
            std::string got;
            consistent = consistent && index->Get(k, &got).ok() && got == v;
          }
          const bool same = seen == model;
          (void)index->Put("a key added after the damage", "and its value");
          (void)index->Close();
          return consistent ? (same ? 0 : 1) : 2;
        },
        how);
  }

  // One damaged file: checks the rules above, counts the outcome in `tally`.
  void Try(const Image& image, const std::string& bytes, const std::string& what, bool checked,
           bool must_detect, Tally* tally) {
    std::string how;
    const int check = Check(bytes, &how);
    ASSERT_TRUE(check == 0 || check == 1)
        << spec_.name << ": pmhash pool check on a pool with " << what << ": "
        << (check == -1 ? how : "exit " + std::to_string(check));
    const int use = Use(bytes, image.model, &how);
    ASSERT_NE(use, -1) << spec_.name << ": opening and using a pool with " << what << ": "
                       << how;
    ASSERT_NE(use, 4) << spec_.name << ": opening a pool with " << what
                      << " failed without a message";
    ASSERT_TRUE(use >= 0 && use <= 3) << spec_.name << ": opening and using a pool with " << what
                                      << " exited with " << use;
    ++tally->flips;
    if (check == 1) {
      ++tally->detected;
      return;
    }
    EXPECT_FALSE(checked || must_detect)
        << spec_.name << ": pmhash pool check missed " << what
        << " in a range that checks itself";
    EXPECT_TRUE(use == 0 || use == 1)
        << spec_.name << ": pmhash pool check said OK on a pool with " << what << ", but "
        << (use == 2 ? "the index contradicts itself (iteration, Count and Get disagree)"
                     : "opening it was refused");
    if (use == 1) ++tally->silent;
  }

  void Fuzz(Image& image) {
    const char* state = image.clean ? "clean" : "crashed";
    std::string how;
    ASSERT_EQ(Check(image.bytes, &how), 0)
        << spec_.name << ": pmhash pool check fails on the undamaged " << state << " pool";
    ASSERT_EQ(Use(image.bytes, image.model, &how), 0)
        << spec_.name << ": the undamaged " << state << " pool does not hold its data";

    std::mt19937_64 rng(std::hash<std::string>()(spec_.name) + (image.clean ? 1 : 2));
    std::vector<std::vector<uint32_t>> bytes_of(pm::kRegionCount);
    for (uint64_t i = 0; i < kPoolSize; ++i) {
      bytes_of[static_cast<int>(image.region[i])].push_back(static_cast<uint32_t>(i));
    }
    Tallies tallies{};
    auto flip = [&](uint64_t off) {
      std::string bytes = image.bytes;
      const auto mask = static_cast<char>(1 + rng() % 255);
      bytes[off] ^= mask;
      const Region r = image.region[off];
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", static_cast<unsigned>(static_cast<uint8_t>(mask)));
      const std::string what = std::string("byte ") + std::to_string(off) + " (" +
                               pm::RegionName(r) + (image.checked[off] ? ", checked" : "") +
                               ") flipped by " + hex + " (" + state + " pool)";
      Try(image, bytes, what, image.checked[off], false,
          &tallies[2 * static_cast<int>(r) + (image.checked[off] ? 1 : 0)]);
    };
    // One flip in each checked engine structure (root, table and block headers, saved
    // filter); the substrate's own structures have exhaustive unit tests.
    std::vector<std::pair<uint64_t, uint64_t>> structures = image.structures;
    std::shuffle(structures.begin(), structures.end(), rng);
    if (LongRun() == 0 && structures.size() > kShortRunStructures) {
      structures.resize(kShortRunStructures);
    }
    for (const auto& [off, len] : structures) {
      flip(off + rng() % len);
      if (HasFatalFailure()) return;
    }
    // The engine's root (the kit's header and the engine's own fields): every 4 bytes.
    for (uint64_t off = pm::kRootOffset; off < pm::kRootOffset + image.root_bytes; off += 4) {
      flip(off + rng() % 4);
      if (HasFatalFailure()) return;
    }
    // A damaged byte in live inline keys: the key now hashes elsewhere. An engine that
    // keeps an 8-byte key in another form (spash: its hash, a bijection of the key) gets
    // as many flips of live slot words instead, its keys' stored form.
    int keys = 0;
    if (spec_.info != nullptr && !spec_.info->capabilities.inline_keys_verbatim) {
      const std::vector<uint32_t>& slots = bytes_of[static_cast<int>(Region::kSlots)];
      for (; keys < kKeyFlips && !slots.empty(); ++keys) {
        flip(slots[rng() % slots.size()]);
        if (HasFatalFailure()) return;
      }
    }
    for (const auto& [key, value] : image.model) {
      if (keys == kKeyFlips) break;
      if (key.size() != 8 || value.size() != 8) continue;
      // Only a key stored in exactly one slot (copies elsewhere, such as bht's log, which
      // keeps a key's bytes after it is flipped, do not matter).
      size_t at = std::string::npos;
      int in_slots = 0;
      for (size_t p = image.bytes.find(key); p != std::string::npos;
           p = image.bytes.find(key, p + 1)) {
        if (image.region[p] != Region::kSlots) continue;
        if (in_slots++ == 0) at = p;
      }
      if (in_slots != 1) continue;
      flip(at + 7);
      if (HasFatalFailure()) return;
      ++keys;
    }
    EXPECT_EQ(keys, kKeyFlips) << "no inline key to damage";
    const uint64_t per_region = FlipsPerRegion();
    for (uint64_t n = 0; n < per_region; ++n) {
      for (int r = 0; r < pm::kRegionCount; ++r) {
        if (bytes_of[r].empty()) continue;
        flip(bytes_of[r][rng() % bytes_of[r].size()]);
        if (HasFatalFailure()) return;
      }
    }
    // Whole-file damage: truncation (always found: the header names the pool's size),
    // extension, a zeroed page.
    std::map<std::string, Tally> whole;
    for (uint64_t n = 0; n < std::max<uint64_t>(1, per_region / 2); ++n) {
      std::string bytes = image.bytes;
      bytes.resize(n == 0 ? 0 : rng() % kPoolSize);
      Try(image, bytes, "the file truncated to " + std::to_string(bytes.size()) + " bytes",
          false, /*must_detect=*/true, &whole["truncated"]);
      if (HasFatalFailure()) return;
      bytes = image.bytes + std::string(n == 0 ? 4096 : 1 + rng() % (1 << 20), '\0');
      Try(image, bytes, "the file extended to " + std::to_string(bytes.size()) + " bytes", false,
          false, &whole["extended"]);
      if (HasFatalFailure()) return;
      bytes = image.bytes;
      const uint64_t page = rng() % (kPoolSize / 4096);
      bytes.replace(page * 4096, 4096, 4096, '\0');
      Try(image, bytes, "page " + std::to_string(page) + " zeroed", false, false,
          &whole["zeroed page"]);
      if (HasFatalFailure()) return;
    }
    std::printf("%s, %s pool:\n%s", spec_.name.c_str(), state, Table(tallies).c_str());
    std::lock_guard<std::mutex> l(g_totals_mu);
    Tallies& total = g_totals[state];
    for (size_t i = 0; i < total.size(); ++i) {
      total[i].flips += tallies[i].flips;
      total[i].detected += tallies[i].detected;
      total[i].silent += tallies[i].silent;
    }
    for (const auto& [w, t] : whole) {
      g_whole_file[w].flips += t.flips;
      g_whole_file[w].detected += t.detected;
      g_whole_file[w].silent += t.silent;
    }
  }

  EngineSpec spec_;
  std::string dir_, path_, tool_, tool_problem_;
};

TEST_P(FlipFuzz, CheckFindsEveryDamagedCheckedByteAndNeverCrashes) {
  ASSERT_EQ(tool_problem_, "") << "pmhash pool check cannot be tested";
  for (bool clean : {true, false}) {
    Image image;
    Build(clean, &image);
    if (HasFatalFailure()) return;
    Describe(&image);
    if (HasFatalFailure()) return;
    Fuzz(image);
    if (HasFatalFailure()) return;
  }
}

std::vector<std::string> RegisteredNames() {
  std::vector<std::string> names;
  for (const EngineSpec& spec : ConformanceEngines()) {
    if (!spec.test_only) names.push_back(spec.name);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(Engines, FlipFuzz, ::testing::ValuesIn(RegisteredNames()),
                         [](const auto& info) { return GtestName(info.param); });

}  // namespace
}  // namespace pmhash::testing
