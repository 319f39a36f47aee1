// The engine kit itself: the template method (checks, one hash, the virtuals called),
// pipelined MultiGet, option declarations, the root header, the registry.
#include "engines/engine.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "util/hash.h"

namespace pmhash::engines {
namespace {

// An engine whose data lives in a std::map (nothing in PM but the kit's root header),
// recording what the kit calls.
class RecordingEngine : public Engine {
 public:
  uint64_t Count() const override { return data_.size(); }
  Status ForEach(const Visitor& fn) const override {
    for (const auto& [k, v] : data_) {
      if (!fn(k, v)) break;
    }
    return Status::OK();
  }
  Status CheckInvariants() const override { return Status::OK(); }

  std::vector<std::string> calls;   // "get", "write", "delete", "prefetch" in order
  std::vector<uint64_t> hashes;     // the hash each call was given
  uint64_t option_value = 0;

 protected:
  Status DoGet(std::string_view key, uint64_t hash, std::string* value) override {
    Note("get", hash);
    auto it = data_.find(std::string(key));
    if (it == data_.end()) return Status::NotFound();
    *value = it->second;
    return Status::OK();
  }
  Status DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                 WriteMode mode) override {
    Note("write", hash);
    const bool present = data_.count(std::string(key)) != 0;
    if (present && mode == WriteMode::kInsert) return Status::AlreadyExists();
    if (!present && mode == WriteMode::kUpdate) return Status::NotFound();
    data_[std::string(key)] = value;
    return Status::OK();
  }
  Status DoDelete(std::string_view key, uint64_t hash) override {
    Note("delete", hash);
    return data_.erase(std::string(key)) ? Status::OK() : Status::NotFound();
  }
  void Prefetch(uint64_t hash) const override {
    const_cast<RecordingEngine*>(this)->Note("prefetch", hash);
  }
  Status Configure(EngineOptions& options, const Options&) override {
    if (info().options.size() == 1) option_value = options.Uint("size");
    return Status::OK();
  }
  Status Create() override {
    // One fixed root field after the kit's header, covered by its check.
    persister().Store(&root<RecordingRoot>()->fixed, kFixed);
    CreateRoot(kLayout, /*table=*/pm::kCacheLine, /*table_bytes=*/0);
    return Status::OK();
  }
  Status Recover(bool) override {
    uint64_t table = 0, count = 0;
    return OpenRoot(kLayout, 8, &table, &count);
  }
  Status EnumerateBlocks(const pm::Allocator::LiveBlockVisitor&) const override {
    uint64_t table = 0, count = 0;
    return ValidateRoot(kLayout, 8, &table, &count);
  }
  void FillStats(IndexStats*) const override {}
  void DescribeEngineLayout(const pm::RegionVisitor&) const override {}  // nothing in PM
  // One home: every page is the whole map.
  Status DoScan(ScanPage* page) const override {
    page->CollectHomes(1, 1, [&](uint64_t, uint64_t, std::vector<ScanEntry>* out) {
      for (const auto& [k, v] : data_) out->push_back({KeyHash(k), k, v});
    });
    return Status::OK();
  }

 public:
  static constexpr uint64_t kMagic = 0x5453455454494b21ull;
  static constexpr uint64_t kFixed = 0x0123456789abcdefull;
  struct RecordingRoot {
    EngineRoot header;
    uint64_t fixed;
  };
  static constexpr RootLayout kLayout{kMagic, 3, sizeof(RecordingRoot), sizeof(uint64_t)};

 protected:
  std::map<std::string, std::string> data_;

  void Note(const char* what, uint64_t hash) {
    calls.push_back(what);
    hashes.push_back(hash);
  }
};

// A RecordingEngine with a quick delete: an 8-byte key it holds is deleted there (kFound),
// one it lacks is kAbsent, "retry---" goes on to DoDelete (kRetry).
class QuickDeletingEngine : public RecordingEngine {
 public:
  static uint64_t Word(std::string_view key) {
    uint64_t w = 0;
    std::memcpy(&w, key.data(), sizeof(w));
    return w;
  }

 protected:
  Status Configure(EngineOptions& options, const Options& index_options) override {
    SetQuickDelete(true);
    return RecordingEngine::Configure(options, index_options);
  }
  Optimistic QuickDelete(uint64_t hash, uint64_t key_word) override {
    Note("quick-delete", hash);
    if (key_word == Word("retry---")) return Optimistic::kRetry;
    const std::string key(reinterpret_cast<const char*>(&key_word), sizeof(key_word));
    return data_.erase(key) != 0 ? Optimistic::kFound : Optimistic::kAbsent;
  }
};

EngineInfo Info(bool pipelined) {
  EngineInfo info;
  info.description = {"kit-test", "test-only", "none", true};
  info.capabilities.pipelined_multiget = pipelined;
  return info;
}

// Opens a RecordingEngine described by `info` on a fresh DRAM pool.
Status OpenRecording(const EngineInfo& info, const Options& options,
                     std::unique_ptr<Engine>* engine) {
  std::unique_ptr<pm::Pool> pool;
  PMHASH_RETURN_IF_ERROR(pm::Pool::CreateDram("kit-test", 8ull << 20, &pool, options.hash_seed));
  return OpenEngine(MakeEngine<RecordingEngine>(info), std::move(pool), true, options, nullptr,
                    engine);
}

RecordingEngine* Recording(const std::unique_ptr<Engine>& e) {
  return dynamic_cast<RecordingEngine*>(e.get());
}

TEST(EngineKit, EachOperationChecksHashesOnceAndCallsItsVirtual) {
  const EngineInfo info = Info(false);
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenRecording(info, {}, &e).ok());
  RecordingEngine* r = Recording(e);
  ASSERT_TRUE(e->Insert("k", "v").ok());
  EXPECT_TRUE(e->Insert("k", "v").IsAlreadyExists());
  ASSERT_TRUE(e->Update("k", "w").ok());
  EXPECT_TRUE(e->Update("absent", "w").IsNotFound());
  ASSERT_TRUE(e->Put("p", "1").ok());
  std::string v;
  ASSERT_TRUE(e->Get("k", &v).ok());
  EXPECT_EQ(v, "w");
  ASSERT_TRUE(e->Delete("k").ok());
  EXPECT_EQ(r->calls, (std::vector<std::string>{"write", "write", "write", "write", "write",
                                                "get", "delete"}));
  for (size_t i = 0; i < r->calls.size(); ++i) {
    const char* key = i < 2 || i == 2 || i >= 5 ? "k" : i == 3 ? "absent" : "p";
    EXPECT_EQ(r->hashes[i], e->KeyHash(key)) << i;
  }
  // Over the limits: refused before the engine is called.
  r->calls.clear();
  const std::string big_key(kMaxKeySize + 1, 'k'), big_value(kMaxValueSize + 1, 'v');
  EXPECT_TRUE(e->Insert(big_key, "v").IsInvalidArgument());
  EXPECT_TRUE(e->Update("k", big_value).IsInvalidArgument());
  EXPECT_TRUE(e->Put("k", big_value).IsInvalidArgument());
  EXPECT_TRUE(e->Get(big_key, &v).IsInvalidArgument());
  EXPECT_TRUE(e->Delete(big_key).IsInvalidArgument());
  EXPECT_TRUE(r->calls.empty());
}

TEST(EngineKit, AnEightByteKeysDeleteTakesTheQuickDeleteFirst) {
  const EngineInfo info = Info(false);
  auto open = [&](const Options& options, std::unique_ptr<Engine>* e) {
    std::unique_ptr<pm::Pool> pool;
    ASSERT_TRUE(pm::Pool::CreateDram("kit-test", 8ull << 20, &pool, options.hash_seed).ok());
    ASSERT_TRUE(OpenEngine(MakeEngine<QuickDeletingEngine>(info), std::move(pool), true, options,
                           nullptr, e)
                    .ok());
  };
  std::unique_ptr<Engine> e;
  open({}, &e);
  RecordingEngine* r = Recording(e);
  for (const char* k : {"present-", "retry---", "short"}) ASSERT_TRUE(e->Insert(k, "v").ok());
  r->calls.clear();
  r->hashes.clear();
  // Answered by the quick delete alone, with the key's hash.
  EXPECT_TRUE(e->Delete("present-").ok());
  EXPECT_TRUE(e->Delete("present-").IsNotFound());
  EXPECT_TRUE(e->Delete("absent--").IsNotFound());
  // Anything else goes on to DoDelete, hashed once.
  EXPECT_TRUE(e->Delete("retry---").ok());
  EXPECT_TRUE(e->Delete("short").ok());
  EXPECT_EQ(r->calls, (std::vector<std::string>{"quick-delete", "quick-delete", "quick-delete",
                                                "quick-delete", "delete", "delete"}));
  const std::vector<std::string> keys{"present-", "present-", "absent--", "retry---",
                                      "retry---", "short"};
  ASSERT_EQ(r->hashes.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(r->hashes[i], e->KeyHash(keys[i])) << i;
  EXPECT_EQ(e->Count(), 0u);
  ASSERT_TRUE(e->Close().ok());

  // A counted operation is bracketed (DeleteChecked): no quick delete.
  Options counted;
  counted.count_stats = true;
  open(counted, &e);
  r = Recording(e);
  ASSERT_TRUE(e->Insert("present-", "v").ok());
  r->calls.clear();
  EXPECT_TRUE(e->Delete("present-").ok());
  EXPECT_EQ(r->calls, (std::vector<std::string>{"delete"}));
  ASSERT_TRUE(e->Close().ok());
}

TEST(EngineKit, MultiGetPrefetchesDepthKeysAheadWhenTheEngineCan) {
  const EngineInfo info = Info(true);
  for (const uint64_t depth : {1, 3, 8}) {
    SCOPED_TRACE(depth);
    Options o;
    o.engine_options = {{"multiget_depth", std::to_string(depth)}};
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(OpenRecording(info, o, &e).ok());
    RecordingEngine* r = Recording(e);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(e->Insert("k" + std::to_string(i), "v").ok());
    r->calls.clear();
    r->hashes.clear();
    const std::string big(kMaxKeySize + 1, 'x');
    std::vector<std::string> owned = {"k0", "k1", "absent", big, "k2", "k1", "k3", "k4"};
    std::vector<std::string_view> keys(owned.begin(), owned.end());
    std::vector<std::string> values(keys.size());
    std::vector<Status> statuses(keys.size());
    e->MultiGet(keys, values, statuses);
    // Key i + depth is prefetched before key i is finished; the overlong key is neither.
    std::vector<std::string> want;
    std::vector<uint64_t> want_hashes;
    std::vector<size_t> valid;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] != big) valid.push_back(i);
    }
    size_t ahead = 0;
    auto prefetch_to = [&](size_t end) {
      for (; ahead < keys.size() && ahead < end; ++ahead) {
        if (keys[ahead] == big) continue;
        want.push_back("prefetch");
        want_hashes.push_back(e->KeyHash(keys[ahead]));
      }
    };
    prefetch_to(depth);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] != big) {
        want.push_back("get");
        want_hashes.push_back(e->KeyHash(keys[i]));
      }
      prefetch_to(i + 1 + depth);
    }
    EXPECT_EQ(r->calls, want);
    EXPECT_EQ(r->hashes, want_hashes);
    EXPECT_TRUE(statuses[0].ok());
    EXPECT_EQ(values[1], "v");
    EXPECT_TRUE(statuses[2].IsNotFound());
    EXPECT_TRUE(statuses[3].IsInvalidArgument());
    EXPECT_TRUE(statuses[5].ok());
  }
}

TEST(EngineKit, MultiGetWithoutThePipelineIsGetAfterGet) {
  const EngineInfo info = Info(false);
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenRecording(info, {}, &e).ok());
  std::vector<std::string_view> keys = {"a", "b", "c"};
  std::vector<std::string> values(3);
  std::vector<Status> statuses(3);
  e->MultiGet(keys, values, statuses);
  EXPECT_EQ(Recording(e)->calls, (std::vector<std::string>{"get", "get", "get"}));
}

TEST(EngineKit, OptionsComeFromTheDeclarations) {
  EngineInfo info = Info(false);
  info.options = {OptionSpec::Uint("size", 42, 10, 100, "a size")};
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenRecording(info, {}, &e).ok());
  EXPECT_EQ(Recording(e)->option_value, 42u);  // the declared default
  Options o;
  o.engine_options = {{"size", "77"}};
  ASSERT_TRUE(OpenRecording(info, o, &e).ok());
  EXPECT_EQ(Recording(e)->option_value, 77u);
  for (const char* bad : {"9", "101", "ten", ""}) {
    o.engine_options = {{"size", bad}};
    const Status s = OpenRecording(info, o, &e);
    EXPECT_TRUE(s.IsInvalidArgument()) << bad << ": " << s.ToString();
    EXPECT_NE(s.message().find("size"), std::string::npos) << s.ToString();
  }
  o.engine_options = {{"sise", "50"}};
  const Status s = OpenRecording(info, o, &e);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("unknown engine option 'sise' (this engine accepts: size, "
                             "multiget_depth, write_depth, alloc_arenas)"),
            std::string::npos)
      << s.ToString();
}

TEST(EngineKit, ReadingAnUndeclaredOptionIsAnEngineBug) {
  const std::map<std::string, std::string> none;
  const std::vector<OptionSpec> declared = {OptionSpec::Bool("flag", true, "a flag")};
  EngineOptions options(none, declared);
  EXPECT_TRUE(options.Bool("flag"));
  (void)options.Uint("flag");      // the wrong type
  (void)options.Double("other");   // not declared
  const Status s = options.Finish();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("engine bug: option flag is read as another type"),
            std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("engine bug: option other is read but not declared"),
            std::string::npos) << s.ToString();
}

TEST(EngineKit, ResizeSwitchIsDeclaredFromTheCapability) {
  EngineInfo info = Info(false);
  EXPECT_TRUE(DeclaredOptions(info, false).empty());
  info.capabilities.resize_switch = true;
  info.capabilities.resize_when = "it doubles";
  info.capabilities.refuses_when_full = true;
  std::vector<OptionSpec> d = DeclaredOptions(info, true);
  ASSERT_EQ(d.size(), 1 + CommonOptions().size());
  EXPECT_EQ(d[0].name, "resize");
  EXPECT_EQ(d[0].DefaultText(), "on");
  EXPECT_NE(d[0].help.find("on: it doubles; off: an insert that finds no place is refused"),
            std::string::npos) << d[0].help;
  EXPECT_EQ(d[1].name, "multiget_depth");
  EXPECT_EQ(d[1].RangeText(), "1..64");
}

TEST(EngineKit, PersistModesTheEngineDoesNotDeclareAreRefused) {
  EngineInfo info = Info(false);
  info.capabilities.persist_modes = {PersistMode::kEadr};
  Options o;
  std::unique_ptr<Engine> e;
  o.persist = PersistMode::kAdr;
  const Status s = OpenRecording(info, o, &e);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("does not support persist mode adr"), std::string::npos);
  o.persist = PersistMode::kEadr;
  EXPECT_TRUE(OpenRecording(info, o, &e).ok());
}

// Every key hash is xxh3 under the pool's seed, read at open; an open asking for another
// seed than the pool's is refused; a test hash replaces the pool's for that object alone.
TEST(EngineKit, KeysHashWithThePoolsSeed) {
  const EngineInfo info = Info(false);
  Options o;
  o.hash_seed = 0x5eed;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenRecording(info, o, &e).ok());
  EXPECT_EQ(e->hash_seed(), 0x5eedu);
  EXPECT_EQ(e->KeyHash("k"), HashKey("k", 0x5eed));
  EXPECT_NE(e->KeyHash("k"), HashKey("k", 0));
  ASSERT_TRUE(e->Insert("k", "v").ok());
  ASSERT_TRUE(e->Delete("k").ok());
  EXPECT_EQ(Recording(e)->hashes, (std::vector<uint64_t>{HashKey("k", 0x5eed),
                                                         HashKey("k", 0x5eed)}));

  std::unique_ptr<pm::Pool> pool;
  ASSERT_TRUE(pm::Pool::CreateDram("kit-test", 8ull << 20, &pool, 7).ok());
  o.hash_seed = 8;
  Status s = OpenEngine(MakeEngine<RecordingEngine>(info), std::move(pool), true, o, nullptr, &e);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("options.hash_seed 8 does not match the seed 7"), std::string::npos)
      << s.ToString();

  std::unique_ptr<Engine> tested = MakeEngine<RecordingEngine>(info);
  tested->SetKeyHashForTesting([](std::string_view) { return uint64_t{42}; });
  ASSERT_TRUE(pm::Pool::CreateDram("kit-test", 8ull << 20, &pool).ok());
  ASSERT_TRUE(OpenEngine(std::move(tested), std::move(pool), true, {}, nullptr, &e).ok());
  ASSERT_TRUE(e->Insert("k", "v").ok());
  EXPECT_EQ(Recording(e)->hashes, std::vector<uint64_t>{42});
  EXPECT_EQ(e->KeyHash("anything"), 42u);
}

TEST(EngineKit, AnEngineMadeWithoutItsRegistryDataIsRefused) {
  // Not through MakeEngine: no EngineInfo.
  class Bare : public RecordingEngine {};
  std::unique_ptr<pm::Pool> pool;
  ASSERT_TRUE(pm::Pool::CreateDram("kit-test", 8ull << 20, &pool).ok());
  std::unique_ptr<Engine> e;
  const Status s = OpenEngine(std::make_unique<Bare>(), std::move(pool), true, {}, nullptr, &e);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("MakeEngine"), std::string::npos) << s.ToString();
}

// The root header: CreateRoot writes it, Close stores the count, a reopen validates it
// and names the engine when the magic or the version is not its own; every other damaged
// byte of the root area is Corruption naming its pool offset.
TEST(EngineKit, RootHeaderIsCreatedValidatedAndCountedAtClose) {
  const EngineInfo info = Info(false);
  char dir[] = "/tmp/pmhash-kit-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/kit.pool";
  std::unique_ptr<pm::Pool> pool;
  ASSERT_TRUE(pm::Pool::Create(path, "kit-test", 8ull << 20, &pool).ok());
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenEngine(MakeEngine<RecordingEngine>(info), std::move(pool), true, {}, nullptr,
                         &e).ok());
  ASSERT_TRUE(e->Insert("a", "1").ok());
  ASSERT_TRUE(e->Insert("b", "2").ok());
  const EngineRoot* live = static_cast<const EngineRoot*>(e->pool().root());
  EXPECT_EQ(live->version, 3u);
  EXPECT_NE(live->check, 0u);
  uint64_t table = 0, count = 0;
  EXPECT_TRUE(UnsealWord(live->table, pm::kRootOffset + offsetof(EngineRoot, table), &table));
  EXPECT_EQ(table, pm::kCacheLine);
  EXPECT_TRUE(UnsealWord(live->count, pm::kRootOffset + offsetof(EngineRoot, count), &count));
  EXPECT_EQ(count, 0u);  // in DRAM until Close
  ASSERT_TRUE(e->Close().ok());
  e.reset();
  // The root area as the file holds it, and a way to change it.
  using Area = std::array<char, pm::kRootSize>;
  auto area_in_file = [&](Area* a, bool write) {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fseek(f, pm::kRootOffset, SEEK_SET), 0);
    if (write) {
      ASSERT_EQ(std::fwrite(a->data(), a->size(), 1, f), 1u);
    } else {
      ASSERT_EQ(std::fread(a->data(), a->size(), 1, f), 1u);
    }
    std::fclose(f);
  };
  Area good{};
  area_in_file(&good, false);
  EngineRoot root{};
  std::memcpy(&root, good.data(), sizeof(root));
  EXPECT_TRUE(UnsealWord(root.count, pm::kRootOffset + offsetof(EngineRoot, count), &count));
  EXPECT_EQ(count, 2u);
  auto reopen = [&]() {
    std::unique_ptr<pm::Pool> p;
    Status s = pm::Pool::Open(path, "kit-test", &p);
    if (s.ok()) {
      s = OpenEngine(MakeEngine<RecordingEngine>(info), std::move(p), false, {}, nullptr, &e);
    }
    if (e != nullptr) (void)e->Close();
    e.reset();
    return s;
  };
  EXPECT_TRUE(reopen().ok());
  area_in_file(&good, false);  // as the clean reopen left it
  Area bad = good;
  root.version = 4;
  std::memcpy(bad.data(), &root, sizeof(root));
  area_in_file(&bad, true);
  Status s = reopen();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("kit-test: root layout version 4 (this build reads 3)"),
            std::string::npos) << s.ToString();
  bad = good;
  bad[0] ^= 1;
  area_in_file(&bad, true);
  s = reopen();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("kit-test: root magic at pool offset 4096 is wrong"),
            std::string::npos) << s.ToString();
  // Every byte of the check, the sealed table and count and the fixed field, and bytes
  // of the zero tail: Corruption naming the pool offset of what is damaged.
  std::vector<size_t> offsets;
  for (size_t i = 12; i < sizeof(RecordingEngine::RecordingRoot); ++i) offsets.push_back(i);
  for (size_t i = sizeof(RecordingEngine::RecordingRoot); i < pm::kRootSize; i += 331) {
    offsets.push_back(i);
  }
  offsets.push_back(pm::kRootSize - 1);
  for (size_t i : offsets) {
    bad = good;
    bad[i] ^= 0x40;
    area_in_file(&bad, true);
    s = reopen();
    EXPECT_TRUE(s.IsCorruption()) << "root byte " << i << ": " << s.ToString();
    const size_t named = i < 16   ? pm::kRootOffset + 12
                         : i < 24 ? pm::kRootOffset + 16
                         : i < 32 ? pm::kRootOffset + 24
                         : i < 40 ? pm::kRootOffset + 12  // the fixed field: the check fails
                                  : pm::kRootOffset + i;
    EXPECT_NE(s.message().find("pool offset " + std::to_string(named)), std::string::npos)
        << "root byte " << i << ": " << s.ToString();
  }
  area_in_file(&good, true);
  EXPECT_TRUE(reopen().ok());
  std::remove(path.c_str());
  ::rmdir(dir);
}

// Registration survives static linking: this test binary links the library as a plain
// static archive (no --whole-archive), and every engine folder's engines are there.
TEST(EngineRegistry, EveryEngineFolderIsRegisteredWithoutWholeArchive) {
  const std::set<std::string> expected = {"group", "linear", "linear-log", "smartht", "wophi"};
  std::set<std::string> got;
  for (const auto& [name, reg] : Registrations()) {
    got.insert(name);
    EXPECT_EQ(reg.info.description.name, name);
    EXPECT_FALSE(reg.info.description.summary.empty()) << name;
    EXPECT_FALSE(reg.info.description.paper.empty()) << name;
    EXPECT_TRUE(reg.make != nullptr) << name;
    // A table that refuses when full must have the switch that makes it refuse.
    EXPECT_TRUE(!reg.info.capabilities.refuses_when_full || reg.info.capabilities.resize_switch)
        << name;
  }
  for (const std::string& name : expected) EXPECT_EQ(got.count(name), 1u) << name;
  EXPECT_EQ(FindEngine("no-such-engine"), nullptr);
  const std::string unknown(UnknownEngine("x").message());
  EXPECT_EQ(unknown.rfind("unknown engine 'x'; known engines: ", 0), 0u) << unknown;
  for (const std::string& name : got) EXPECT_NE(unknown.find(name), std::string::npos) << name;
}


// A library open counts nothing unless asked (Options::count_stats, off by default: the
// counting path is 1.1x-2.0x slower a call); IndexStats::counted says which it is.
TEST(EngineKit, AnOpenCountsOnlyWhenAsked) {
  EXPECT_FALSE(Options{}.count_stats);
  for (const bool count : {false, true}) {
    Options o;
    o.engine = "wophi";
    o.pool_size = 16ull << 20;
    o.count_stats = count;
    std::unique_ptr<Index> index;
    ASSERT_TRUE(Open(o, &index).ok());
    ASSERT_TRUE(index->Insert("key", "value").ok());
    const IndexStats st = index->Stats();
    EXPECT_EQ(st.counted, count);
    if (count) {
      EXPECT_GE(st.persist.flushes, 1u);  // the insert's persist
      EXPECT_GE(st.persist.fences, 1u);
      EXPECT_GT(st.persist.bytes_stored, 0u);
    } else {
      EXPECT_EQ(st.persist.flushes, 0u);
      EXPECT_EQ(st.persist.fences, 0u);
      EXPECT_EQ(st.persist.bytes_stored, 0u);
    }
  }
}

// The kit's validation of a search with no lock (OptimisticRead::Valid over a
// VersionedRwLock): a try that a writer overlapped is discarded and tried again, never
// returned, by SearchOptimistically; FirstTry hands it to the full path (kRetry). The
// writer is made to come in between the try's read and its validation, so this holds
// deterministically (the mutation "optimistic-read-unvalidated" goes red here; the
// conformance race test checks the engines under real threads).
TEST(OptimisticRead, ATryAWriterOverlappedIsNeverReturned) {
  std::unique_ptr<pm::Persister> persister;
  ASSERT_TRUE(pm::Persister::Make(pm::PersistConfig{}, &persister).ok());
  VersionedRwLock mu;
  uint64_t stored = 0x1111111111111111ull;  // what a writer changes under `mu`
  int tries = 0;
  const auto find = [&](OptimisticRead* read) {
    if (!read->Begin(mu)) return Optimistic::kRetry;
    read->value_word = __atomic_load_n(&stored, __ATOMIC_ACQUIRE);
    if (tries++ == 0) {  // a writer comes in after the read, before the validation
      mu.lock();
      __atomic_store_n(&stored, 0x2222222222222222ull, __ATOMIC_RELEASE);
      mu.unlock();
    }
    return read->Valid(mu) ? Optimistic::kFound : Optimistic::kRetry;
  };
  const std::string key = "8bytekey";
  std::string value(8, '\0');
  EXPECT_EQ(SearchOptimistically(*persister, key, &value, find), Optimistic::kFound);
  EXPECT_EQ(tries, 2) << "the overlapped try was kept";
  uint64_t got = 0;
  std::memcpy(&got, value.data(), 8);
  EXPECT_EQ(got, 0x2222222222222222ull) << "a value read before the writer came in";

  tries = 0;
  value.assign(8, '\0');
  EXPECT_EQ(FirstTry(*persister, key, &value, find), Optimistic::kRetry);
  EXPECT_EQ(value, std::string(8, '\0')) << "FirstTry stored an overlapped try's value";
  // Unchallenged, the first try stands.
  EXPECT_EQ(FirstTry(*persister, key, &value, find), Optimistic::kFound);
  std::memcpy(&got, value.data(), 8);
  EXPECT_EQ(got, 0x2222222222222222ull);
}

}  // namespace
}  // namespace pmhash::engines
