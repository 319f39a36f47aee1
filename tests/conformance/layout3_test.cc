// Pools of the previous pool layout (3: no hash seed) open with this build: fixtures made
// by pmhash at commit 0129fda, one per engine that existed then
// (tests/fixtures/layout3/README.md). Keys hash with seed 0 there, as they did when the
// pool was made; the header says so, and is never rewritten.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engines/engine.h"
#include "pm/pool.h"
#include "support/engine_tests.h"

namespace pmhash::testing {
namespace {

namespace fs = std::filesystem;

fs::path FixtureDir() {
  return fs::path(__FILE__).parent_path().parent_path() / "fixtures/layout3";
}

// Writes the pool a fixture describes (README.md: `size N`, then `OFFSET HEX` lines).
void Decode(const fs::path& fixture, const std::string& out) {
  std::ifstream in(fixture);
  ASSERT_TRUE(in.good()) << fixture;
  std::string line, bytes;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string a, b;
    fields >> a >> b;
    if (a == "size") {
      bytes.assign(std::stoull(b), '\0');
      continue;
    }
    const size_t off = std::stoull(a, nullptr, 16);
    ASSERT_LE(off + b.size() / 2, bytes.size()) << line;
    for (size_t i = 0; i < b.size() / 2; ++i) {
      bytes[off + i] = static_cast<char>(std::stoi(b.substr(2 * i, 2), nullptr, 16));
    }
  }
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good());
}

// The 61 keys every fixture holds.
Model FixtureKeys() {
  Model m;
  for (int i = 0; i < 30; ++i) {
    char n[3];
    std::snprintf(n, sizeof(n), "%02d", i);
    m[std::string("key-") + n] = std::string("value-") + n;
    m[std::string("inline") + n] = std::string("val000") + n;
  }
  m["long-value"] = std::string(300, 'L');
  return m;
}

std::vector<fs::path> Fixtures() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(FixtureDir())) {
    if (e.path().string().ends_with(".pool.hex")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Layout3Pools, OpenWithSeedZeroAndKeepWorking) {
  const std::vector<fs::path> fixtures = Fixtures();
  ASSERT_EQ(fixtures.size(), 5u) << "group, linear, linear-log, smartht, wophi";
  TempDir dir("layout3");
  for (const fs::path& fixture : fixtures) {
    const std::string engine = fixture.filename().string().substr(
        0, fixture.filename().string().size() - std::string(".pool.hex").size());
    SCOPED_TRACE(engine);
    const std::string path = dir.File(engine + ".pool");
    Decode(fixture, path);
    pm::PoolInfo info;
    ASSERT_TRUE(pm::Pool::Inspect(path, &info).ok());
    EXPECT_EQ(info.layout_version, 3u);
    EXPECT_EQ(info.engine, engine);
    EXPECT_EQ(info.hash_seed, 0u);
    EXPECT_EQ(info.hash_seed_origin, pm::HashSeedOrigin::kNone);
    Options o;
    o.path = path;
    o.hash_seed = 5;  // not the pool's
    std::unique_ptr<engines::Engine> e;
    Status s = engines::Open(o, &e);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    o.hash_seed = 0;  // the pool's: seed 0
    s = engines::Open(o, &e);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(e->name(), engine);
    EXPECT_EQ(e->hash_seed(), 0u);
    EXPECT_FALSE(e->Stats().recovered);
    Model model = FixtureKeys();
    ExpectMatches(e.get(), model);
    // Scan, too, in pages.
    Model scanned;
    uint64_t cursor = 0;
    int calls = 0;
    do {
      ASSERT_TRUE(e->Scan(cursor, 8, [&](std::string_view k, std::string_view v) {
        scanned.emplace(std::string(k), std::string(v));
        return true;
      }, &cursor).ok());
      ASSERT_LT(++calls, 1000) << "61 keys in pages of 8: the cursor goes round";
    } while (cursor != 0);
    EXPECT_EQ(scanned, model);
    // Writes, enough to grow the table, then a reopen: still layout 3, seed 0.
    for (int i = 0; i < 2000; ++i) {
      const std::string k = "new-" + std::to_string(i);
      ASSERT_TRUE(e->Insert(k, k).ok()) << k;
      model[k] = k;
    }
    for (int i = 0; i < 30; i += 3) {
      char n[3];
      std::snprintf(n, sizeof(n), "%02d", i);
      ASSERT_TRUE(e->Delete(std::string("key-") + n).ok());
      model.erase(std::string("key-") + n);
    }
    ASSERT_TRUE(e->Close().ok());
    e.reset();
    o.hash_seed.reset();
    ASSERT_TRUE(engines::Open(o, &e).ok());
    ExpectMatches(e.get(), model);
    ASSERT_TRUE(e->Close().ok());
    e.reset();
    ASSERT_TRUE(pm::Pool::Inspect(path, &info).ok());
    EXPECT_EQ(info.layout_version, 3u) << "opening must never rewrite the header";
  }
}

}  // namespace
}  // namespace pmhash::testing
