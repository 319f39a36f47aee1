#include "support/engine_tests.h"

#include <stdlib.h>

#include <cstdio>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
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

std::vector<std::string> KeysWithHashBits(uint64_t low_mask, uint64_t low, unsigned top_bits,
                                          uint64_t top, size_t n, uint64_t from) {
  std::vector<std::string> out;
  for (uint64_t i = from; out.size() < n; ++i) {
    std::string k = Key8(i);
    const uint64_t h = HashKey(k, kTestHashSeed);
    if ((h & low_mask) == low && (top_bits == 0 || h >> (64 - top_bits) == top)) {
      out.push_back(std::move(k));
    }
  }
  return out;
}

void ExpectThreadsAgreeWithTheirModels(Index* index, int threads, uint64_t per_thread,
                                       uint64_t put_every) {
  std::atomic<int> failures{0};
  std::mutex first_mu;
  std::string first_failure;  // the first failed call, so that a rare failure says which
  const auto fail = [&](int t, uint64_t i, const char* op, const Status& s) {
    if (failures++ == 0) {
      std::lock_guard<std::mutex> g(first_mu);
      first_failure = "thread " + std::to_string(t) + ", operation " + std::to_string(i) +
                      ": " + op + " returned " + s.ToString();
    }
  };
  std::vector<Model> models(threads);
  auto work = [&](int t) {
    std::mt19937_64 rng(t);
    Model& m = models[t];
    for (uint64_t i = 0; i < per_thread; ++i) {
      const uint64_t id = t * 1000000 + i;
      const std::string k = i % 3 == 0 ? Bytes(id, 16, 't') : Key8(id);
      const std::string v = Key8(rng());
      const bool put = put_every != 0 && i % put_every == 0;
      if (Status s = put ? index->Put(k, v) : index->Insert(k, v); !s.ok()) {
        fail(t, i, put ? "Put" : "Insert", s);
      }
      m[k] = v;  // whatever it returned: a failed write then shows as a missing key too
      if (i % 4 == 0) {
        std::string got;
        const uint64_t other = ((t + 1) % threads) * 1000000 + rng() % (i + 1);
        Status s = index->Get(Key8(other), &got);
        if (!s.ok() && !s.IsNotFound()) fail(t, i, "Get", s);
      }
      if (i % 10 == 5) {
        if (Status s = index->Delete(k); !s.ok()) fail(t, i, "Delete", s);
        m.erase(k);
      }
      if (i % 10 == 7) {
        const std::string nv = Bytes(i, 12, 'u');
        if (Status s = index->Put(k, nv); !s.ok()) fail(t, i, "Put", s);
        m[k] = nv;
      }
    }
  };
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) running.emplace_back(work, t);
  for (auto& th : running) th.join();
  EXPECT_EQ(failures.load(), 0) << "first: " << first_failure;
  Model all;
  for (const Model& m : models) all.insert(m.begin(), m.end());
  ExpectMatches(index, all);
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
  o.count_stats = true;  // the unit tests read the persistence counters
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

void ReadFromFile(const std::string& path, uint64_t offset, void* out, size_t len) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr) << path;
  const bool ok = std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0 &&
                  std::fread(out, len, 1, f) == 1;
  std::fclose(f);
  ASSERT_TRUE(ok) << "cannot read " << len << " bytes at " << offset << " of " << path;
}

void FlipByteInFile(const std::string& path, uint64_t offset, uint8_t mask) {
  uint8_t b = 0;
  ReadFromFile(path, offset, &b, 1);
  b ^= mask;
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr) << path;
  const bool ok = std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0 &&
                  std::fwrite(&b, 1, 1, f) == 1;
  std::fclose(f);
  ASSERT_TRUE(ok) << "cannot write the byte at " << offset << " of " << path;
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

std::vector<std::thread> SplittingWriters(Index* index, uint64_t n, std::atomic<uint64_t>* bad,
                                          std::atomic<int>* writing) {
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([=] {
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t k = 1'000'000 * (t + 1) + i;
        if (!index->Insert(Key8(k), Key8(k)).ok()) bad->fetch_add(1);
        if (i % 3 == 0 && !index->Delete(Key8(k)).ok()) bad->fetch_add(1);
      }
      writing->fetch_sub(1);
    });
  }
  return writers;
}

uint64_t ReadWhileWritersSplit(Index* index, uint64_t stable, uint64_t n) {
  std::atomic<uint64_t> bad{0};
  for (uint64_t i = 0; i < stable; ++i) {
    if (!index->Insert(Key8(i), Key8(~i)).ok()) bad.fetch_add(1);
  }
  std::atomic<int> writing{2};
  std::vector<std::thread> writers = SplittingWriters(index, n, &bad, &writing);
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::string v;
      while (writing.load() > 0) {
        const uint64_t i = rng() % stable;
        if (!index->Get(Key8(i), &v).ok() || v != Key8(~i)) bad.fetch_add(1);
        if (!index->Get(Key8(500'000 + i), &v).IsNotFound()) bad.fetch_add(1);
      }
    });
  }
  for (auto& th : writers) th.join();
  for (auto& th : readers) th.join();
  return bad.load();
}

}  // namespace pmhash::testing
