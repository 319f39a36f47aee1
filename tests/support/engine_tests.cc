#include "support/engine_tests.h"

#include <stdlib.h>

#include <filesystem>
#include <utility>

#include "util/hash.h"

namespace pmhash::testing {

std::string Key8(uint64_t i) { return Bytes(i, 8, '\0'); }

std::string Bytes(uint64_t i, size_t len, char tag) {
  std::string s(len, tag);
  for (size_t b = 0; b < len && b < 8; ++b) s[b] = static_cast<char>((i >> (8 * b)) & 0xff);
  return s;
}

std::vector<std::string> KeysWithHome(uint64_t home, uint64_t table_size, size_t n,
                                      uint64_t from) {
  std::vector<std::string> out;
  for (uint64_t i = from; out.size() < n; ++i) {
    std::string k = Key8(i);
    if (Reduce(HashKey(k, kTestHashSeed), table_size) == home) out.push_back(std::move(k));
  }
  return out;
}

std::vector<std::string> KeysDisplacedByOne(uint64_t table_size, size_t n) {
  std::vector<std::string> keys = KeysWithHome(0, table_size, 2, 1);
  for (uint64_t h = 1; keys.size() < n; ++h) {
    keys.push_back(KeysWithHome(h, table_size, 1, h * 100000 + 1)[0]);
  }
  return keys;
}

void ExpectMatches(Index* index, const Model& model) {
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(CheckIndex(index, model, nullptr), "");
  EXPECT_EQ(CheckInvariantsOf(index), "");
}

Options OptionsFor(const std::string& engine,
                   std::map<std::string, std::string> engine_options, uint64_t pool_size) {
  Options o;
  o.engine = engine;
  o.pool_size = pool_size;
  o.engine_options = std::move(engine_options);
  o.create_if_missing = true;
  o.hash_seed = kTestHashSeed;
  return o;
}

EngineDescription Registration(const std::string& name) {
  for (const EngineDescription& d : RegisteredEngines()) {
    if (d.name == name) return d;
  }
  ADD_FAILURE() << "no registered engine " << name;
  return {};
}

std::unique_ptr<Index> OpenOrDie(const Options& o) {
  std::unique_ptr<Index> index;
  const Status s = Open(o, &index);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return index;
}

uint64_t Counter(Index* index, const std::string& name) {
  const IndexStats stats = index->Stats();
  const auto it = stats.engine_counters.find(name);
  if (it == stats.engine_counters.end()) {
    ADD_FAILURE() << "the engine reports no counter " << name;
    return 0;
  }
  return it->second;
}

TempDir::TempDir(const std::string& name) {
  std::string pattern = std::filesystem::temp_directory_path() / ("pmhash-" + name + "-XXXXXX");
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr) << pattern;
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::add, ignored);
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace pmhash::testing
