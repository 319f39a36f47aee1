// Tests of the benchmark driver: argument validation, the JSON shape of the contract,
// and the consistency of the figures, run against a tiny test-only engine (not
// registered, so no other suite sees it). Nothing here is timed.
#include "bench/driver.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <span>
#include <sstream>

#include <gtest/gtest.h>

#include "bench/json.h"
#include "bench/runner.h"
#include "bench/scenario.h"
#include "bench/threads.h"
#include "util/hash.h"
#include "engines/engine.h"

namespace pmhash::bench {
namespace {

// How the test engine behaves beyond its plain fixed table.
struct EngineMode {
  bool knows_resize = true;      // accepts --opt resize=on|off
  bool grows = false;            // reports key slots that grow with inserts (as chained)
  bool background = false;       // each insert leaves 1 persist for WaitForBackgroundWork
  bool redundant_delete = false; // Delete persists its line twice (1 redundant flush+fence)
  bool filter = false;           // counts filter_negatives / filter_false_positives (1 in 8)
  bool identity_slots = false;   // a key's home slot is its first 8 bytes (sequential keys
                                 // fill sequential slots), not its hash
  uint64_t oracle = 0;           // HotKeyOracleSize: counts the updates of the keys named
};

// Linear probing over 64-byte PM slots, one mutex, no resizing: an insert into a full
// table is ResourceExhausted. Keys up to 16 bytes, values up to 40.
//   slot = { u8 state (0 empty, 1 used, 2 deleted); u8 klen; u16 vlen; u32 pad;
//            char key[16]; char value[40]; }
// Insert: copy key/value, persist, store state=1, persist (2 flushes, 2 fences).
class TestEngine : public engines::Engine {
 public:
  explicit TestEngine(EngineMode mode) : mode_(mode) {}

  void WaitForBackgroundWork() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (; pending_ > 0; --pending_) {
      persister().Store(&root<Root>()->scratch, pending_);
      persister().Persist(&root<Root>()->scratch, 8);
    }
  }

  uint64_t HotKeyOracleSize() const override { return mode_.oracle; }
  void SetHotKeyOracle(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    oracle_keys_ = std::set<std::string>(keys.begin(), keys.end());
  }
  Status CheckInvariants() const override {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t used = 0;
    for (uint64_t i = 0; i < slots_; ++i) used += table()[i].state == 1;
    return used == count_ ? Status::OK() : Status::Corruption("test engine: count is off");
  }

 protected:
  Status DoWrite(std::string_view key, std::string_view value, uint64_t /*hash*/,
                 engines::WriteMode mode) override {
    if (mode == engines::WriteMode::kPut) puts_.fetch_add(1, std::memory_order_relaxed);
    if (mode == engines::WriteMode::kUpdate && mode_.oracle != 0) {
      std::lock_guard<std::mutex> lock(mu_);
      oracle_updates_ += oracle_keys_.count(std::string(key));
    }
    if (mode != engines::WriteMode::kInsert) {
      Status s = UpdateValue(key, value);
      if (mode == engines::WriteMode::kUpdate || !s.IsNotFound()) return s;
    }
    PMHASH_RETURN_IF_ERROR(Check(key, value));
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t free_slot = ~0ull;
    if (Find(key, &free_slot) != ~0ull) return Status::AlreadyExists("key exists");
    if (free_slot == ~0ull) return Status::TableFull("test engine: table full");
    Slot* s = &table()[free_slot];
    Slot tmp{};
    tmp.klen = static_cast<uint8_t>(key.size());
    tmp.vlen = static_cast<uint16_t>(value.size());
    std::memcpy(tmp.key, key.data(), key.size());
    std::memcpy(tmp.value, value.data(), value.size());
    persister().Copy(&s->klen, &tmp.klen, sizeof(Slot) - 1);
    persister().Persist(s, sizeof(Slot));
    persister().Store(&s->state, uint8_t{1});
    persister().Persist(&s->state, 1);
    ++count_;
    if (mode_.background) ++pending_;
    return Status::OK();
  }
  Status UpdateValue(std::string_view key, std::string_view value) {
    PMHASH_RETURN_IF_ERROR(Check(key, value));
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t unused = 0;
    const uint64_t at = Find(key, &unused);
    if (at == ~0ull) return Status::NotFound("no such key");
    Slot* s = &table()[at];
    persister().Copy(s->value, value.data(), value.size());
    persister().Store(&s->vlen, static_cast<uint16_t>(value.size()));
    persister().Persist(s, sizeof(Slot));
    return Status::OK();
  }
  Status DoGet(std::string_view key, uint64_t /*hash*/, std::string* value) override {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t unused = 0;
    const uint64_t at = Find(key, &unused);
    if (at == ~0ull) {
      ((KeyHash(key) >> 7) % 8 == 0 ? false_positives_ : negatives_) += 1;
      return Status::NotFound("no such key");
    }
    value->assign(table()[at].value, table()[at].vlen);
    return Status::OK();
  }
  // Pipelined MultiGet prefetches every key it looks up; Get never does, so the count
  // shows which lookups went through MultiGet (--batch).
  void Prefetch(uint64_t /*hash*/) const override {
    std::lock_guard<std::mutex> lock(mu_);
    ++prefetched_keys_;
  }
  Status DoDelete(std::string_view key, uint64_t /*hash*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t unused = 0;
    const uint64_t at = Find(key, &unused);
    if (at == ~0ull) return Status::NotFound("no such key");
    persister().Store(&table()[at].state, uint8_t{2});
    persister().Persist(&table()[at].state, 1);
    if (mode_.redundant_delete) persister().Persist(&table()[at].state, 1);
    --count_;
    return Status::OK();
  }

 public:
  uint64_t Count() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }
  Status ForEach(const Visitor& fn) const override {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t i = 0; i < slots_; ++i) {
      const Slot& s = table()[i];
      if (s.state == 1 && !fn({s.key, s.klen}, {s.value, s.vlen})) break;
    }
    return Status::OK();
  }

 protected:
  Status Configure(engines::EngineOptions& options, const Options& index_options) override {
    if (mode_.knows_resize) (void)options.Bool("resize");
    slots_ = std::max<uint64_t>(64, 2 * index_options.initial_capacity);
    return Status::OK();
  }
  Status Create() override {
    Result<uint64_t> block = allocator().Allocate(slots_ * sizeof(Slot));
    if (!block.ok()) return block.status();
    persister().Zero(pool().At<char>(*block), slots_ * sizeof(Slot));
    persister().Persist(pool().At<char>(*block), slots_ * sizeof(Slot));
    Root* r = root<Root>();
    persister().Store(&r->slots, slots_);
    persister().Store(&r->table, *block);
    persister().Persist(r, sizeof(Root));
    return Status::OK();
  }
  Status Recover(bool) override {
    slots_ = root<Root>()->slots;
    count_ = 0;
    for (uint64_t i = 0; i < slots_; ++i) count_ += table()[i].state == 1;
    return Status::OK();
  }
  Status EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const override {
    visit(root<Root>()->table);
    return Status::OK();
  }
  void FillStats(IndexStats* stats) const override {
    std::lock_guard<std::mutex> lock(mu_);
    stats->count = count_;
    // Growing: slots "allocated on demand", as a chained table reports them.
    stats->key_slots = mode_.grows ? slots_ / 2 + count_ : slots_;
    stats->dram_bytes = 0;
    stats->engine_counters["prefetched_keys"] = prefetched_keys_;
    stats->engine_counters["puts"] = puts_.load(std::memory_order_relaxed);
    stats->engine_counters["hash_seed"] = hash_seed();
    if (mode_.oracle != 0) {
      stats->engine_counters["oracle_keys"] = oracle_keys_.size();
      stats->engine_counters["oracle_updates"] = oracle_updates_;
    }
    if (mode_.filter) {
      stats->engine_counters["filter_negatives"] = negatives_;
      stats->engine_counters["filter_false_positives"] = false_positives_;
    }
  }
  void DescribeEngineLayout(const pm::RegionVisitor& mark) const override {
    mark(root<Root>()->table, slots_ * sizeof(Slot), pm::Region::kSlots, false);
  }
  // One home: every page is the whole table.
  Status DoScan(engines::ScanPage* page) const override {
    std::lock_guard<std::mutex> lock(mu_);
    page->CollectHomes(1, 1, [&](uint64_t, uint64_t, std::vector<engines::ScanEntry>* out) {
      for (uint64_t i = 0; i < slots_; ++i) {
        const Slot& s = table()[i];
        if (s.state != 1) continue;
        const std::string key(s.key, s.klen);
        out->push_back({KeyHash(key), key, std::string(s.value, s.vlen)});
      }
    });
    return Status::OK();
  }

 private:
  struct Root {
    uint64_t table;
    uint64_t slots;
    uint64_t scratch;  // what the "background work" stores
  };
  struct Slot {
    uint8_t state;
    uint8_t klen;
    uint16_t vlen;
    uint32_t pad;
    char key[16];
    char value[40];
  };
  static_assert(sizeof(Slot) == 64, "one slot per cache line");

  static Status Check(std::string_view key, std::string_view value) {
    if (key.size() > 16 || value.size() > 40) return Status::InvalidArgument("too long");
    return Status::OK();
  }
  Slot* table() const { return pool().At<Slot>(root<Root>()->table); }
  // Slot of key or ~0; *free_slot: the first reusable slot on the probe path.
  uint64_t Find(std::string_view key, uint64_t* free_slot) const {
    uint64_t first = 0;
    std::memcpy(&first, key.data(), std::min<size_t>(8, key.size()));
    const uint64_t h = (mode_.identity_slots ? first : KeyHash(key)) % slots_;
    for (uint64_t n = 0; n < slots_; ++n) {
      const uint64_t i = (h + n) % slots_;
      const Slot& s = table()[i];
      if (s.state == 0) {
        if (*free_slot == ~0ull) *free_slot = i;
        return ~0ull;
      }
      if (s.state == 2) {
        if (*free_slot == ~0ull) *free_slot = i;
        continue;
      }
      if (s.klen == key.size() && std::memcmp(s.key, key.data(), key.size()) == 0) return i;
    }
    return ~0ull;
  }

  EngineMode mode_;
  mutable std::mutex mu_;
  uint64_t slots_ = 0;
  uint64_t count_ = 0;
  uint64_t pending_ = 0;
  uint64_t negatives_ = 0, false_positives_ = 0;
  mutable uint64_t prefetched_keys_ = 0;
  std::atomic<uint64_t> puts_{0};
  std::set<std::string> oracle_keys_;
  uint64_t oracle_updates_ = 0;
};

// The registry data of the test engine in `mode`: it declares resize=on|off if it
// knows it, and refuses when full unless it reports slots that grow (as chained).
const engines::EngineInfo& InfoFor(EngineMode mode) {
  auto make = [](bool knows_resize, bool grows) {
    engines::EngineInfo info;
    info.description = {"bench-test", "test-only fixed table", "none", true};
    info.capabilities.resize_switch = knows_resize;  // the kit declares resize=on|off
    info.capabilities.refuses_when_full = !grows;
    info.capabilities.pipelined_multiget = true;
    info.capabilities.pipelined_write = true;
    return info;
  };
  static const engines::EngineInfo infos[2][2] = {{make(false, false), make(false, true)},
                                                  {make(true, false), make(true, true)}};
  return infos[mode.knows_resize][mode.grows];
}

std::unique_ptr<engines::Engine> MakeTestEngine(EngineMode mode) {
  return engines::MakeEngine<TestEngine>(InfoFor(mode), mode);
}

Status TestOpen(const Options& o, std::unique_ptr<engines::Engine>* index, EngineMode mode) {
  std::unique_ptr<pm::Pool> pool;
  bool fresh = true;
  if (o.path.empty()) {
    PMHASH_RETURN_IF_ERROR(pm::Pool::CreateDram(o.engine, o.pool_size, &pool, o.hash_seed));
  } else if (::access(o.path.c_str(), F_OK) == 0) {
    PMHASH_RETURN_IF_ERROR(pm::Pool::Open(o.path, o.engine, &pool));
    fresh = false;
  } else {
    PMHASH_RETURN_IF_ERROR(pm::Pool::Create(o.path, o.engine, o.pool_size, &pool, o.hash_seed));
  }
  Status s = engines::OpenEngine(MakeTestEngine(mode), std::move(pool), fresh, o, nullptr,
                                 index);
  if (!s.ok() && fresh && !o.path.empty()) ::unlink(o.path.c_str());
  return s;
}

struct Captured {
  std::string out, err, warn;
};

BenchEnv TestEnv(Captured* cap, EngineMode mode = {}) {
  BenchEnv env;
  env.open = [mode](const Options& o, std::unique_ptr<engines::Engine>* index) {
    return TestOpen(o, index, mode);
  };
  env.info = [mode](const std::string&) { return &InfoFor(mode); };
  env.open_on_pool = [mode](const Options& o, std::unique_ptr<pm::Pool> pool,
                            pm::PersistObserver* observer,
                            std::unique_ptr<engines::Engine>* index) {
    return engines::OpenEngine(MakeTestEngine(mode), std::move(pool), true, o, observer,
                               index);
  };
  env.engines = [] { return std::vector<std::string>{"bench-test", "bench-test2"}; };
  env.out = [cap](const std::string& s) { cap->out += s; };
  env.err = [cap](const std::string& s) { cap->err += s + "\n"; };
  env.warn = [cap](const std::string& s) { cap->warn += s + "\n"; };
  return env;
}

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/pmhash-bench-test-" +
         std::to_string(::getpid()) + "-" + name;
}

// Runs the driver with a JSON file and returns the parsed document.
Json RunJson(std::vector<std::string> args, Captured* cap, int* code, EngineMode mode = {}) {
  const std::string path = TempPath("out.json");
  args.push_back("--json");
  args.push_back(path);
  *code = RunBenchArgs(args, TestEnv(cap, mode));
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  ::unlink(path.c_str());
  Json doc;
  EXPECT_TRUE(Json::Parse(ss.str(), &doc).ok()) << ss.str();
  return doc;
}

// The row of (engine, phase, threads, batch) in `doc`, or nullptr.
const Json* Result(const Json& doc, const std::string& engine, const std::string& phase,
                   int threads = 1, uint64_t batch = 1) {
  const Json* rs = doc.Find("results");
  if (rs == nullptr) return nullptr;
  for (const Json& r : rs->items()) {
    if (r.Find("engine")->string() == engine && r.Find("phase")->string() == phase &&
        r.Find("threads")->number() == threads && r.Find("batch")->uint() == batch) {
      return &r;
    }
  }
  return nullptr;
}

// ---- Argument validation ------------------------------------------------------------

TEST(BenchArgs, RejectsBadFlagsWithOneLineNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus"}, "--bogus"},
      {{"--threads", "0"}, "--threads"},
      {{"--threads", "1,x"}, "--threads"},
      {{"--dist", "zipf"}, "--dist"},
      {{"--dist", "zipfian:1.5"}, "zipfian"},
      {{"--value-size", "10-5"}, "--value-size"},
      {{"--mix", "search=50"}, "--mix"},
      {{"--mix", "scan=100"}, "scan"},
      {{"--load-factor", "1.5"}, "--load-factor"},
      {{"--persist", "sometimes"}, "--persist"},
      {{"--flush", "wbinvd"}, "--flush"},
      {{"--phases", "load,scan"}, "scan"},
      {{"--phases", "search"}, "load"},
      {{"--engine", "nosuch"}, "nosuch"},
      {{"--engine", "nosuch@label"}, "nosuch@label"},
      {{"--hash-seed", "-1"}, "--hash-seed"},
      {{"--hash-seed", "bench-test:often"}, "--hash-seed"},
      {{"--hash-seed", "18446744073709551616"}, "--hash-seed"},
      {{"--dist", "crafted:17"}, "crafted"},
      {{"--key-size", "4"}, "--key-size"},
      {{"--opt", "novalue"}, "--opt"},
      {{"--records", "abc"}, "--records"},
      {{"--pool-size", "12Q"}, "--pool-size"},
      {{"--batch", "0"}, "--batch"},
      {{"--batch", "x"}, "--batch"},
      {{"--batch", "4097"}, "--batch"},
      {{"--repeat", "0"}, "--repeat"},
      {{"--repeat", "three"}, "--repeat"},
      {{"--repeat", "-1"}, "--repeat"},
      {{"--max-spread", "0.9"}, "--max-spread"},
      {{"--max-spread", "wide"}, "--max-spread"},
      {{"--max-spread", "nan"}, "--max-spread"},
      {{"--floor-prefetch", "0"}, "--floor-prefetch"},
      {{"--floor", "--redundancy"}, "--floor"},
      // Persistence settings: the ranges of pm::PersistConfig::Validate, named by flag.
      {{"--write-latency-ns", "100001"}, "--write-latency-ns must be at most 100000"},
      {{"--write-latency-ns", "5000000000"}, "--write-latency-ns '5000000000'"},
      {{"--write-latency-ns", "-3"}, "--write-latency-ns"},
      {{"--read-latency-ns", "100001"}, "--read-latency-ns must be at most 100000"},
      {{"--read-latency-ns", "fast"}, "--read-latency-ns 'fast'"},
      {{"--persist", "none", "--write-latency-ns", "300"}, "--write-latency-ns: persist mode none"},
      {{"--persist", "none", "--read-latency-ns", "300"}, "--read-latency-ns: persist mode none"},
      {{"--media-model", "off", "--write-latency-ns", "300"}, "needs the media model"},
      {{"--media-model", "maybe"}, "--media-model 'maybe'"},
      {{"--media-dimms", "0"}, "--media-dimms must be between 1 and 64"},
      {{"--media-dimms", "65"}, "--media-dimms"},
      {{"--media-interleave", "3000"}, "--media-interleave must be a power of two"},
      {{"--media-interleave", "8G"}, "--media-interleave '8G'"},
      {{"--media-buffer", "300"}, "--media-buffer must be a multiple of 256"},
      {{"--media-buffer", "2M"}, "--media-buffer"},
      {{"--eadr-cache", "1000"}, "--eadr-cache must be 0 or a multiple of 1 KiB"},
      {{"--eadr-cache", "1G"}, "--eadr-cache"},
      {{"--eadr-cache", "lots"}, "--eadr-cache 'lots'"},
      {{"--eadr-write-back", "sometimes"}, "--eadr-write-back 'sometimes'"},
      {{"--counters", "maybe"}, "--counters 'maybe'"},
      {{"--inserts", "upsert"}, "--inserts must be insert or put"},
      {{"--lookups", "words"}, "--lookups 'words'"},
      {{"--lookups", "u64", "--value-size", "16"}, "--lookups u64"},
      {{"--lookups", "u64", "--key-size", "16"}, "--lookups u64"},
      {{"--counters", "off", "--redundancy"}, "--counters off"},
      {{"--floor", "--read-latency-ns", "100"}, "--floor cannot be combined with --read-latency-ns"},
      {{"--records", "10", "--ops", "20", "--phases", "load,delete"}, "delete"},
      {{"--scenario", "no-such-scenario", "--scenario-dir", "/nonexistent"}, "no-such-scenario"},
  };
  for (const auto& [args, needle] : cases) {
    Captured cap;
    const int code = RunBenchArgs(args, TestEnv(&cap));
    EXPECT_EQ(code, 2) << args[0];
    EXPECT_EQ(cap.err.rfind("pmhash bench: ", 0), 0u) << cap.err;
    EXPECT_EQ(std::count(cap.err.begin(), cap.err.end(), '\n'), 1) << cap.err;
    EXPECT_NE(cap.err.find(needle), std::string::npos) << cap.err;
    EXPECT_TRUE(cap.out.empty()) << cap.out;
  }
}

TEST(BenchArgs, HelpAndListsSucceed) {
  Captured cap;
  EXPECT_EQ(RunBenchArgs({"--help"}, TestEnv(&cap)), 0);
  EXPECT_NE(cap.out.find("--write-latency-ns"), std::string::npos);
  for (const char* flag : {"--repeat", "--max-spread", "--floor", "--floor-prefetch", "--pin",
                           "--batch", "pmhash bench compare"}) {
    EXPECT_NE(cap.out.find(flag), std::string::npos) << flag;
  }
  Captured cap2;
  EXPECT_EQ(RunBenchArgs({"--list-engines"}, TestEnv(&cap2)), 0);
  EXPECT_EQ(cap2.out, "bench-test\nbench-test2\n");
}

TEST(BenchArgs, NoEngineRegisteredIsAnError) {
  Captured cap;
  BenchEnv env = TestEnv(&cap);
  env.engines = [] { return std::vector<std::string>{}; };
  EXPECT_EQ(RunBenchArgs({"--records", "10"}, env), 1);
  EXPECT_NE(cap.err.find("no engine is registered"), std::string::npos);
}

// ---- JSON shape and consistency -----------------------------------------------------

const char* const kResultFields[] = {
    "engine", "threads", "phase", "ops", "seconds", "mops", "latency_ns", "flushes_per_op",
    "fences_per_op", "pm_bytes_written_per_op", "media_writes_per_op", "media_write_amp",
    "pm_lines_read_per_op", "load_factor", "pm_bytes", "dram_bytes", "recovery_ms"};

TEST(BenchJson, EveryContractFieldPresentNullWhereUnknown) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "2000", "--ops", "1000",
                      "--phases", "load,search,negative,update,mixed,delete,fill", "--pool",
                      "dram", "--pool-size", "8M", "--threads", "1,2"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  ASSERT_TRUE(doc.is_object());
  ASSERT_TRUE(doc.Find("config") != nullptr && doc.Find("config")->is_object());
  ASSERT_TRUE(doc.Find("machine") != nullptr && doc.Find("machine")->is_object());
  const Json* results = doc.Find("results");
  ASSERT_TRUE(results != nullptr && results->is_array());
  EXPECT_EQ(results->items().size(), 14u);  // 7 phases x 2 thread counts
  for (const char* key : {"engines", "threads", "records", "ops", "phases", "mix", "dist",
                          "key_size", "value_size", "load_factor", "opt", "pool", "persist",
                          "flush", "write_latency_ns", "seed"}) {
    EXPECT_TRUE(doc.Find("config")->Has(key)) << key;
  }
  for (const Json& r : results->items()) {
    for (const char* field : kResultFields) EXPECT_TRUE(r.Has(field)) << field;
    const Json* lat = r.Find("latency_ns");
    ASSERT_TRUE(lat->is_object());
    for (const char* p : {"p50", "p90", "p99", "p999", "p9999"}) {
      ASSERT_TRUE(lat->Has(p)) << p;
      EXPECT_TRUE(lat->Find(p)->is_number()) << p;
    }
    EXPECT_LE(lat->Find("p50")->number(), lat->Find("p99")->number());
    EXPECT_LE(lat->Find("p99")->number(), lat->Find("p9999")->number());
    // A DRAM pool cannot be reopened: no recovery time, rather than a made-up one.
    EXPECT_TRUE(r.Find("recovery_ms")->is_null());
    // The test engine does not report PM reads.
    EXPECT_TRUE(r.Find("pm_lines_read_per_op")->is_null());
    EXPECT_TRUE(r.Find("media_reads_per_op")->is_null());
    EXPECT_EQ(r.Find("errors")->number(), 0) << r.Dump(-1);
  }
  // No bytes stored by lookups: write amplification is undefined, so null.
  EXPECT_TRUE(Result(doc, "bench-test", "search")->Find("media_write_amp")->is_null());
  EXPECT_TRUE(Result(doc, "bench-test", "load")->Find("media_write_amp")->is_number());
}

TEST(BenchJson, OpsEqualWhatWasAskedAndFiguresAreConsistent) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "3000", "--ops", "1000",
                      "--phases", "load,search,negative,update,mixed,delete", "--pool", "dram",
                      "--pool-size", "8M", "--mix", "search=50,update=25,insert=25"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  EXPECT_EQ(Result(doc, "bench-test", "load")->Find("ops")->number(), 3000);
  for (const char* phase : {"search", "negative", "update", "mixed", "delete"}) {
    EXPECT_EQ(Result(doc, "bench-test", phase)->Find("ops")->number(), 1000) << phase;
  }
  for (const Json& r : doc.Find("results")->items()) {
    const double lf = r.Find("load_factor")->number();
    EXPECT_GT(lf, 0) << r.Find("phase")->string();
    EXPECT_LE(lf, 1) << r.Find("phase")->string();
    EXPECT_GT(r.Find("mops")->number(), 0);
    EXPECT_GT(r.Find("latency_ns")->Find("samples")->number(), 0);
  }
  // The test engine's insert is exactly 2 flushes + 2 fences; lookups cost none.
  const Json* load = Result(doc, "bench-test", "load");
  EXPECT_DOUBLE_EQ(load->Find("flushes_per_op")->number(), 2.0);
  EXPECT_DOUBLE_EQ(load->Find("fences_per_op")->number(), 2.0);
  EXPECT_DOUBLE_EQ(Result(doc, "bench-test", "search")->Find("flushes_per_op")->number(), 0.0);
  EXPECT_DOUBLE_EQ(Result(doc, "bench-test", "delete")->Find("flushes_per_op")->number(), 1.0);
  // Keys stored: 3000 loaded, + about 250 mixed inserts (25% of 1000), - 1000 deleted.
  const double after_mixed = Result(doc, "bench-test", "mixed")->Find("count")->number();
  EXPECT_GT(after_mixed, 3150);
  EXPECT_LT(after_mixed, 3350);
  EXPECT_EQ(Result(doc, "bench-test", "delete")->Find("count")->number(), after_mixed - 1000);
  // Lookups read values, and the checksum says so.
  EXPECT_NE(Result(doc, "bench-test", "search")->Find("checksum")->number(), 0);
  EXPECT_EQ(Result(doc, "bench-test", "negative")->Find("checksum")->number(), 0);
}

TEST(BenchJson, InsertsPutWritesNewKeysWithPut) {
  for (const bool put : {false, true}) {
    Captured cap;
    int code = -1;
    std::vector<std::string> args = {"--engine", "bench-test", "--records", "500", "--ops",
                                     "100", "--phases", "load", "--pool", "dram",
                                     "--pool-size", "8M"};
    if (put) args.insert(args.end(), {"--inserts", "put"});
    Json doc = RunJson(args, &cap, &code);
    ASSERT_EQ(code, 0) << cap.err;
    EXPECT_EQ(doc.Find("config")->Find("inserts")->string(), put ? "put" : "insert");
    const Json* load = Result(doc, "bench-test", "load");
    EXPECT_EQ(load->Find("count")->number(), 500);
    EXPECT_EQ(load->Find("engine_counters")->Find("puts")->number(), put ? 500 : 0);
  }
}

// --lookups u64: search and negative phases call GetU64 and read what Get reads (the same
// checksum, no errors) and say so in their rows' notes (its refusals: BadArguments...).
TEST(BenchJson, LookupsThroughGetU64ReadWhatGetReads) {
  uint64_t checksums[2] = {};
  for (const bool words : {false, true}) {
    Captured cap;
    int code = -1;
    std::vector<std::string> args = {"--engine", "bench-test", "--records", "2000", "--ops",
                                     "1000", "--phases", "load,search,negative", "--pool",
                                     "dram", "--pool-size", "8M"};
    if (words) args.insert(args.end(), {"--lookups", "u64"});
    Json doc = RunJson(args, &cap, &code);
    ASSERT_EQ(code, 0) << cap.err;
    EXPECT_EQ(doc.Find("config")->Find("lookups")->string(), words ? "u64" : "get");
    for (const char* phase : {"search", "negative"}) {
      const Json* row = Result(doc, "bench-test", phase);
      ASSERT_NE(row, nullptr) << phase;
      EXPECT_EQ(row->Find("errors")->uint(), 0u) << row->Find("first_error")->Dump(-1);
      const Json* note = row->Find("note");
      const bool noted = note != nullptr && note->string().find("GetU64") != std::string::npos;
      EXPECT_EQ(noted, words) << phase;
    }
    checksums[words] = Result(doc, "bench-test", "search")->Find("checksum")->uint();
  }
  EXPECT_NE(checksums[0], 0u);
  EXPECT_EQ(checksums[1], checksums[0]);
}

TEST(BenchJson, PersistNoneCostsNoFlushOrFence) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "1000", "--phases",
                      "load,update,delete", "--pool", "dram", "--pool-size", "8M", "--persist",
                      "none"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  EXPECT_EQ(doc.Find("config")->Find("persist")->string(), "none");
  ASSERT_EQ(doc.Find("results")->items().size(), 3u);
  for (const Json& r : doc.Find("results")->items()) {
    EXPECT_EQ(r.Find("flushes_per_op")->number(), 0) << r.Find("phase")->string();
    EXPECT_EQ(r.Find("fences_per_op")->number(), 0) << r.Find("phase")->string();
  }
}

TEST(BenchJson, FilePoolMeasuresRecoveryAndIsRemoved) {
  const std::string dir = TempPath("pooldir");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "1000", "--phases",
                      "load,search,fill", "--pool", dir, "--pool-size", "8M"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  EXPECT_TRUE(cap.warn.empty()) << cap.warn;  // recovery kept every key
  const Json* load = Result(doc, "bench-test", "load");
  ASSERT_TRUE(load->Find("recovery_ms")->is_number());
  EXPECT_GE(load->Find("recovery_ms")->number(), 0);
  EXPECT_EQ(load->Find("mapping")->string(), "shared");
  // The fill phase has an index of its own that is not reopened.
  EXPECT_TRUE(Result(doc, "bench-test", "fill")->Find("recovery_ms")->is_null());
  // Every pool file was removed.
  DIR* d = ::opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  int entries = 0;
  while (dirent* e = ::readdir(d)) entries += e->d_name[0] != '.';
  ::closedir(d);
  EXPECT_EQ(entries, 0);
  ::rmdir(dir.c_str());
}

TEST(BenchJson, FillReportsLoadFactorAtFirstRefusal) {
  // The test engine sizes 2 slots per expected key and never resizes: with resize=off
  // accepted, fill runs until the table is full (linear probing reaches 1.0).
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "500", "--phases", "fill",
                      "--pool", "dram", "--pool-size", "8M"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  const Json* fill = Result(doc, "bench-test", "fill");
  EXPECT_DOUBLE_EQ(fill->Find("load_factor")->number(), 1.0);
  EXPECT_EQ(fill->Find("ops")->number(), 1001);  // 1000 stored + the refused one
  EXPECT_NE(fill->Find("note")->string().find("refused"), std::string::npos);

  // An engine without a resize option: the load factor after loading --records keys.
  Captured cap2;
  Json doc2 = RunJson({"--engine", "bench-test", "--records", "500", "--phases", "fill",
                       "--pool", "dram", "--pool-size", "8M"},
                      &cap2, &code, EngineMode{.knows_resize = false});
  ASSERT_EQ(code, 0) << cap2.err;
  const Json* fill2 = Result(doc2, "bench-test", "fill");
  EXPECT_DOUBLE_EQ(fill2->Find("load_factor")->number(), 0.5);
  EXPECT_NE(fill2->Find("note")->string().find("no resize=off"), std::string::npos);
}

TEST(BenchJson, LoadFactorFillsBeforeMeasuring) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "1000", "--ops", "100",
                      "--load-factor", "0.75", "--phases", "load,search,delete", "--pool",
                      "dram", "--pool-size", "8M"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  // 2000 slots filled to 1500 keys, then 100 timed inserts.
  const Json* load = Result(doc, "bench-test", "load");
  EXPECT_EQ(load->Find("ops")->number(), 100);
  EXPECT_EQ(load->Find("count")->number(), 1600);
  EXPECT_DOUBLE_EQ(load->Find("load_factor")->number(), 0.8);
  EXPECT_EQ(Result(doc, "bench-test", "delete")->Find("count")->number(), 1500);
}

TEST(BenchJson, TablesShowEnginesSideBySideWithRatios) {
  Captured cap;
  const int code = RunBenchArgs({"--engine", "bench-test,bench-test2", "--records", "500",
                                 "--phases", "load,search", "--pool", "dram", "--pool-size",
                                 "8M"},
                                TestEnv(&cap));
  ASSERT_EQ(code, 0) << cap.err;
  EXPECT_NE(cap.out.find("== load"), std::string::npos);
  EXPECT_NE(cap.out.find("== search"), std::string::npos);
  EXPECT_NE(cap.out.find("bench-test2"), std::string::npos);
  EXPECT_NE(cap.out.find("x)"), std::string::npos);  // a ratio to the first engine
  EXPECT_NE(cap.out.find("checksum of the values read"), std::string::npos);
  EXPECT_NE(cap.out.find("Build:"), std::string::npos);
}

TEST(BenchScenario, ScenarioRunsEachRunWithItsLabelAndPaperText) {
  const std::string dir = TempPath("scenarios");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  {
    std::ofstream f(dir + "/tiny.json");
    f << R"({"name": "tiny", "description": "two runs",
             "args": "--engine bench-test --phases load,search --pool dram --pool-size 8M",
             "runs": [{"label": "a", "args": "--records 100"},
                      {"label": "b", "args": ["--records", "200"]}],
             "paper": ["the paper says 42"]})";
  }
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--scenario", "tiny", "--scenario-dir", dir, "--ops", "50"}, &cap, &code);
  ::unlink((dir + "/tiny.json").c_str());
  ::rmdir(dir.c_str());
  ASSERT_EQ(code, 0) << cap.err;
  EXPECT_NE(cap.out.find("the paper says 42"), std::string::npos);
  EXPECT_EQ(doc.Find("config")->Find("scenario")->string(), "tiny");
  ASSERT_EQ(doc.Find("results")->items().size(), 4u);
  const auto& rs = doc.Find("results")->items();
  EXPECT_EQ(rs[0].Find("run")->string(), "a");
  EXPECT_EQ(rs[0].Find("ops")->number(), 100);
  EXPECT_EQ(rs[2].Find("run")->string(), "b");
  EXPECT_EQ(rs[2].Find("ops")->number(), 200);
  EXPECT_EQ(rs[3].Find("ops")->number(), 50);  // the command line overrides the file
}

TEST(BenchScenario, ShippedScenariosParse) {
  // Every file in bench/scenarios (found from the test binary, as the tool finds it)
  // parses into runs whose flags are valid.
  const std::string dir = FindScenarioDir("");
  if (dir.empty()) GTEST_SKIP() << "no bench/scenarios above the test binary";
  const std::vector<std::string> names = ListScenarios(dir);
  for (const char* needed :
       {"main", "group-fig5", "group-fig7", "group-fig8a", "wophi-fig3", "wophi-fig4-5",
        "wophi-fig6", "wophi-fig7", "smartht-fig5-6", "smartht-fig7a", "smartht-fig8",
        "smartht-fig9", "smartht-table1", "smartht-fpr"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), needed), names.end()) << needed;
  }
  for (const std::string& name : names) {
    Scenario sc;
    ASSERT_TRUE(LoadScenario(dir, name, &sc).ok()) << name;
    EXPECT_FALSE(sc.description.empty()) << name;
    EXPECT_FALSE(sc.paper.empty()) << name;
    for (const ScenarioRun& run : sc.runs) {
      std::vector<std::string> args = sc.args;
      args.insert(args.end(), run.args.begin(), run.args.end());
      BenchConfig config;
      GlobalOptions global;
      Status s = ParseBenchArgs(args, &config, &global);
      EXPECT_TRUE(s.ok()) << name << " " << run.label << ": " << s.ToString();
      EXPECT_TRUE(ValidateConfig(config).ok()) << name << " " << run.label;
    }
  }
}

// ---- Regressions of the audit (issue 5) ---------------------------------------------

// Sparse sampling: a short phase times every operation (the papers' latency method), a
// long one 1 in kSampleStride; --latency-sample overrides. Guards the skew where a phase
// of 65535 operations was timed in full and one of 65536 sparsely.
TEST(BenchDriver, LatencySamplingRule) {
  BenchConfig config;
  EXPECT_EQ(SampleEvery(config, 1000), 1u);
  EXPECT_EQ(SampleEvery(config, kTimeEveryOpUpTo), 1u);
  EXPECT_EQ(SampleEvery(config, kTimeEveryOpUpTo + 1), kSampleStride);
  EXPECT_EQ(SampleEvery(config, 65535), kSampleStride);
  config.sample_every = 1;
  EXPECT_EQ(SampleEvery(config, 1u << 20), 1u);

  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "20000", "--ops", "1000",
                      "--phases", "load,search", "--pool", "dram", "--pool-size", "16M"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  const Json* load_lat = Result(doc, "bench-test", "load")->Find("latency_ns");
  EXPECT_EQ(load_lat->Find("sample_every")->uint(), kSampleStride);
  // 20000 operations, 1 in 64 from a random start: 312 or 313 samples.
  EXPECT_NEAR(load_lat->Find("samples")->number(), 20000.0 / kSampleStride, 1.0);
  const Json* search_lat = Result(doc, "bench-test", "search")->Find("latency_ns");
  EXPECT_EQ(search_lat->Find("samples")->uint(), 1000u);
  EXPECT_EQ(search_lat->Find("sample_every")->uint(), 1u);
  // The machine section reports what one timed region costs.
  ASSERT_TRUE(doc.Find("machine")->Find("timer_overhead_ns")->is_number());
  EXPECT_GT(doc.Find("machine")->Find("timer_overhead_ns")->number(), 0);

  Captured cap2;
  Json all = RunJson({"--engine", "bench-test", "--records", "20000", "--phases", "load",
                      "--pool", "dram", "--pool-size", "16M", "--latency-sample", "all"},
                     &cap2, &code);
  ASSERT_EQ(code, 0) << cap2.err;
  EXPECT_EQ(Result(all, "bench-test", "load")->Find("latency_ns")->Find("samples")->uint(),
            20000u);
}

TEST(BenchDriver, LatencyCdfIsMonotoneAndEndsAtTheMax) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "2000", "--phases", "load",
                      "--pool", "dram", "--pool-size", "8M"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  const Json* load = Result(doc, "bench-test", "load");
  const Json* cdf = load->Find("latency_cdf");
  ASSERT_TRUE(cdf != nullptr && cdf->is_object());
  const auto& q = cdf->Find("quantiles")->items();
  const auto& ns = cdf->Find("ns")->items();
  ASSERT_EQ(q.size(), ns.size());
  ASSERT_GE(q.size(), 20u);
  for (size_t i = 1; i < q.size(); ++i) {
    EXPECT_LT(q[i - 1].number(), q[i].number());
    EXPECT_LE(ns[i - 1].number(), ns[i].number());
  }
  EXPECT_EQ(q.back().number(), 1.0);
  EXPECT_EQ(ns.back().number(), load->Find("latency_ns")->Find("max")->number());
  // 2000 samples do not resolve the 99.99th percentile: no point claims it.
  for (const Json& x : q) EXPECT_TRUE(x.number() <= 0.9995 || x.number() == 1.0);
}

TEST(BenchDriver, UnwritableJsonPathFailsBeforeTheRun) {
  Captured cap;
  const int code = RunBenchArgs({"--engine", "bench-test", "--records", "100", "--pool", "dram",
                                 "--pool-size", "8M", "--json", "/nonexistent-dir/out.json"},
                                TestEnv(&cap));
  EXPECT_EQ(code, 2);
  EXPECT_NE(cap.err.find("--json /nonexistent-dir/out.json"), std::string::npos) << cap.err;
  EXPECT_NE(cap.err.find("cannot open"), std::string::npos) << cap.err;
  EXPECT_EQ(std::count(cap.err.begin(), cap.err.end(), '\n'), 1) << cap.err;
  EXPECT_TRUE(cap.out.empty()) << cap.out;  // nothing ran
}

TEST(BenchDriver, SeedsAreExactAndValidated) {
  for (const char* bad : {"-1", "abc", "1e3", "18446744073709551616", ""}) {
    Captured cap;
    EXPECT_EQ(RunBenchArgs({"--seed", bad, "--engine", "bench-test"}, TestEnv(&cap)), 2) << bad;
    EXPECT_NE(cap.err.find("--seed"), std::string::npos) << cap.err;
  }
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "500", "--phases", "load,search",
                      "--pool", "dram", "--pool-size", "8M", "--seed", "18446744073709551615"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  const Json* seed = doc.Find("config")->Find("seed");
  ASSERT_TRUE(seed->is_uint());
  EXPECT_EQ(seed->uint(), 18446744073709551615ull);
  // The checksum of the values read is an exact 64-bit integer, not a rounded double.
  const Json* checksum = Result(doc, "bench-test", "search")->Find("checksum");
  ASSERT_TRUE(checksum->is_uint());
  EXPECT_NE(checksum->uint(), 0u);
}

// --engine NAME@LABEL runs NAME again as a column of its own, with its own --opt and
// --hash-seed; without --hash-seed the pools get --seed's value (figures repeat).
TEST(BenchDriver, EngineColumnsAndHashSeeds) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test,bench-test@unseeded,bench-test@random",
                      "--hash-seed", "bench-test@unseeded:0", "--hash-seed",
                      "bench-test@random:random", "--seed", "77", "--records", "300", "--phases",
                      "load,search", "--pool", "dram", "--pool-size", "8M"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  const auto seed_of = [&](const std::string& column) {
    const Json* r = Result(doc, column, "search");
    return r == nullptr ? ~uint64_t{0} : r->Find("engine_counters")->Find("hash_seed")->uint();
  };
  EXPECT_EQ(seed_of("bench-test"), 77u);
  EXPECT_EQ(seed_of("bench-test@unseeded"), 0u);
  EXPECT_NE(seed_of("bench-test@random"), 77u);
  EXPECT_NE(seed_of("bench-test@random"), ~uint64_t{0});
  const Json* seeds = doc.Find("config")->Find("hash_seed");
  ASSERT_TRUE(seeds->is_object());
  EXPECT_EQ(seeds->Find("bench-test@unseeded")->uint(), 0u);
  EXPECT_EQ(seeds->Find("bench-test@random")->string(), "random");
  EXPECT_NE(cap.out.find("bench-test@unseeded"), std::string::npos);
}

TEST(JsonValue, KeepsLargeIntegersExact) {
  Json j = Json::Object();
  j.Set("max", uint64_t{18446744073709551615ull});
  j.Set("big", uint64_t{6902760000000000123ull});
  j.Set("neg", -5);
  j.Set("third", 1.0 / 3);
  const std::string text = j.Dump(-1);
  EXPECT_NE(text.find("\"max\":18446744073709551615"), std::string::npos) << text;
  EXPECT_NE(text.find("\"big\":6902760000000000123"), std::string::npos) << text;
  EXPECT_NE(text.find("\"neg\":-5"), std::string::npos) << text;
  Json back;
  ASSERT_TRUE(Json::Parse(text, &back).ok());
  EXPECT_EQ(back.Find("max")->uint(), 18446744073709551615ull);
  EXPECT_EQ(back.Find("big")->uint(), 6902760000000000123ull);
  EXPECT_FALSE(back.Find("neg")->is_uint());
  EXPECT_EQ(back.Find("neg")->number(), -5);
  EXPECT_EQ(back.Find("third")->number(), 1.0 / 3);  // 17 digits read back exactly
  EXPECT_EQ(back.Dump(-1), text);
}

// A chained engine never refuses: the fill row is the --records inserts alone, and its
// figures (ops, persistence, load factor) all describe that span.
TEST(BenchDriver, FillOfAnEngineThatNeverRefusesIsOneConsistentSpan) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "500", "--phases", "fill",
                      "--pool", "dram", "--pool-size", "8M"},
                     &cap, &code, EngineMode{.grows = true});
  ASSERT_EQ(code, 0) << cap.err;
  const Json* fill = Result(doc, "bench-test", "fill");
  EXPECT_EQ(fill->Find("ops")->uint(), 500u);  // no second step of ~3x --records inserts
  EXPECT_EQ(fill->Find("count")->uint(), 500u);
  EXPECT_EQ(fill->Find("key_slots")->uint(), 1000u);
  EXPECT_DOUBLE_EQ(fill->Find("load_factor")->number(), 0.5);
  EXPECT_DOUBLE_EQ(fill->Find("flushes_per_op")->number(), 2.0);
  EXPECT_NE(fill->Find("note")->string().find("never refuses"), std::string::npos);
}

// --load-factor on an engine whose slots grow with inserts: the target is fixed from the
// slots of the index as created, so the fill ends, and the note says where it ended.
TEST(BenchDriver, LoadFactorOnAGrowingEngineTerminatesWithANote) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "1000", "--ops", "100",
                      "--load-factor", "0.5", "--phases", "prefill,load,search", "--pool",
                      "dram", "--pool-size", "8M"},
                     &cap, &code, EngineMode{.grows = true});
  ASSERT_EQ(code, 0) << cap.err;
  const Json* prefill = Result(doc, "bench-test", "prefill");
  ASSERT_NE(prefill, nullptr);
  EXPECT_EQ(prefill->Find("ops")->uint(), 500u);  // 0.5 x 1000 slots as created
  EXPECT_EQ(prefill->Find("phase_index")->uint(), 0u);
  EXPECT_DOUBLE_EQ(prefill->Find("flushes_per_op")->number(), 2.0);
  const Json* load = Result(doc, "bench-test", "load");
  EXPECT_EQ(load->Find("ops")->uint(), 100u);
  EXPECT_EQ(load->Find("count")->uint(), 600u);
  EXPECT_NE(load->Find("note")->string().find("as created"), std::string::npos);
}

TEST(BenchDriver, PrefillMustComeFirstWithALoadFactor) {
  Captured cap;
  EXPECT_EQ(RunBenchArgs({"--engine", "bench-test", "--phases", "load,prefill"}, TestEnv(&cap)),
            2);
  EXPECT_NE(cap.err.find("prefill"), std::string::npos) << cap.err;
  Captured cap2;
  EXPECT_EQ(RunBenchArgs({"--engine", "bench-test", "--phases", "prefill,load"}, TestEnv(&cap2)),
            2);
}

// A repeated phase keeps every occurrence: in the JSON (phase_index) and in the tables.
TEST(BenchDriver, RepeatedPhaseKeepsEveryOccurrence) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test,bench-test2", "--records", "2000", "--ops", "500",
                      "--phases", "load,search,delete,search", "--pool", "dram",
                      "--pool-size", "8M"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  std::vector<uint64_t> search_positions;
  for (const Json& r : doc.Find("results")->items()) {
    if (r.Find("engine")->string() == "bench-test" && r.Find("phase")->string() == "search") {
      search_positions.push_back(r.Find("phase_index")->uint());
    }
  }
  EXPECT_EQ(search_positions, (std::vector<uint64_t>{1, 3}));
  EXPECT_NE(cap.out.find("== search (phase 2 of --phases)"), std::string::npos) << cap.out;
  EXPECT_NE(cap.out.find("== search (phase 4 of --phases)"), std::string::npos) << cap.out;
  // Every column of a table shows its own op count, keys stored and key slots.
  EXPECT_NE(cap.out.find("\nops "), std::string::npos) << cap.out;
  EXPECT_NE(cap.out.find("\nkeys stored "), std::string::npos) << cap.out;
  EXPECT_NE(cap.out.find("\nkey slots "), std::string::npos) << cap.out;
}

// Background work an insert started is waited for after the timer stops and counted in
// the phase that caused it, not in the next one.
TEST(BenchDriver, BackgroundWorkIsChargedToItsPhase) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "1000", "--phases",
                      "load,search", "--pool", "dram", "--pool-size", "8M"},
                     &cap, &code, EngineMode{.background = true});
  ASSERT_EQ(code, 0) << cap.err;
  EXPECT_DOUBLE_EQ(Result(doc, "bench-test", "load")->Find("flushes_per_op")->number(), 3.0);
  EXPECT_DOUBLE_EQ(Result(doc, "bench-test", "search")->Find("flushes_per_op")->number(), 0.0);
}

// The media model runs in adr (fed by flushes) and eadr (fed by stores): both report
// media figures; none, and --media-model off, report null, not 0.
TEST(BenchDriver, MediaFiguresAreNullWithoutTheModel) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--persist", "none"},
        std::vector<std::string>{"--persist", "adr", "--counters", "off"},
        std::vector<std::string>{"--persist", "adr", "--media-model", "off"},
        std::vector<std::string>{"--persist", "eadr", "--media-model", "off"}}) {
    Captured cap;
    int code = -1;
    std::vector<std::string> args = {"--engine", "bench-test", "--records", "500", "--phases",
                                     "load", "--pool", "dram", "--pool-size", "8M"};
    args.insert(args.end(), extra.begin(), extra.end());
    Json doc = RunJson(args, &cap, &code);
    ASSERT_EQ(code, 0) << cap.err;
    const Json* load = Result(doc, "bench-test", "load");
    for (const char* f : {"media_writes_per_op", "media_write_amp", "media_write_amp_stored",
                          "pm_lines_written_per_op", "media_rmw_reads_per_op"}) {
      EXPECT_TRUE(load->Find(f)->is_null()) << f << " " << extra[1];
    }
    const bool counted = extra.size() < 3 || extra[2] != "--counters";
    for (const char* f : {"flushes_per_op", "fences_per_op", "pm_bytes_written_per_op",
                          "user_bytes_per_op", "write_backs_per_op", "pm_lines_read_per_op"}) {
      if (!counted) {
        EXPECT_TRUE(load->Find(f)->is_null()) << f << ": --counters off";
      }
    }
  }
  for (const char* mode : {"adr", "eadr"}) {
    Captured cap;
    int code = -1;
    Json doc = RunJson({"--engine", "bench-test", "--records", "500", "--phases", "load",
                        "--pool", "dram", "--pool-size", "8M", "--persist", mode},
                       &cap, &code);
    ASSERT_EQ(code, 0) << cap.err;
    const Json* load = Result(doc, "bench-test", "load");
    // 500 inserts of 8 + 8 user bytes, each writing its own 64-byte slot.
    EXPECT_GT(load->Find("media_writes_per_op")->number(), 0) << mode;
    EXPECT_GT(load->Find("pm_lines_written_per_op")->number(), 0) << mode;
    EXPECT_DOUBLE_EQ(load->Find("user_bytes_per_op")->number(), 16) << mode;
    EXPECT_DOUBLE_EQ(load->Find("media_write_amp")->number(),
                     load->Find("media_writes_per_op")->number() * 256 / 16)
        << mode;
    EXPECT_TRUE(load->Find("media_write_amp_stored")->is_number()) << mode;
  }
}

// The media model is one per pool, shared by its threads: the same sequential writes
// (sequential keys into sequential 64-byte slots, four to a media line, each insert
// persisting its slot twice) cost the same media writes whether one thread or two make
// them, in adr (flushes) and in eadr (stores, through the cache model, drained at the
// phase end). Tolerance 2%: where the two threads' ranges meet, or as their stores
// interleave in the cache, a media line's lines may split across two buffer entries.
TEST(BenchDriver, SequentialWritesCostTheSameMediaWritesOverOneOrTwoThreads) {
  // adr; eadr writing through (no cache model: stores reach the device in store order);
  // eadr with the cache model (the lines leave at the drain, in its set order).
  const std::vector<std::vector<std::string>> modes = {
      {"--persist", "adr"}, {"--persist", "eadr", "--eadr-cache", "0"}, {"--persist", "eadr"}};
  for (const std::vector<std::string>& mode : modes) {
    const std::string what = mode.size() > 2 ? "eadr, no cache model" : mode[1];
    Captured cap;
    int code = -1;
    std::vector<std::string> args = {"--engine", "bench-test", "--records", "8192", "--phases",
                                     "load", "--dist", "sequential", "--threads", "1,2",
                                     "--pool", "dram", "--pool-size", "8M"};
    args.insert(args.end(), mode.begin(), mode.end());
    Json doc = RunJson(args, &cap, &code, EngineMode{.identity_slots = true});
    ASSERT_EQ(code, 0) << cap.err;
    const double one = Result(doc, "bench-test", "load", 1)->Find("media_writes_per_op")->number();
    const double two = Result(doc, "bench-test", "load", 2)->Find("media_writes_per_op")->number();
    if (mode.size() > 2 || mode[1] == "adr") {
      EXPECT_NEAR(one, 0.25, 0.01) << what << ": one media write per four slots";
    }
    EXPECT_GT(one, 0) << what;
    EXPECT_NEAR(two / one, 1.0, 0.02) << what << ": " << one << " vs " << two;
  }
}

// A figure an engine does not report is "n/a" in the tables, never 0 or "-".
TEST(BenchDriver, UnreportedFiguresAreNaInTables) {
  Captured cap;
  int code = -1;
  RunJson({"--engine", "bench-test", "--records", "200", "--phases", "load", "--pool", "dram",
           "--pool-size", "8M", "--persist", "none"},
          &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  for (const char* row : {"PM lines read/op", "media reads/op", "media writes/op",
                          "media write amp", "PM lines written/op"}) {
    const size_t at = cap.out.find(row);
    ASSERT_NE(at, std::string::npos) << row << "\n" << cap.out;
    const std::string line = cap.out.substr(at, cap.out.find('\n', at) - at);
    EXPECT_NE(line.find("n/a"), std::string::npos) << line;
  }
}

// --counters off: the persistence rows give way to one line saying they were not
// measured (not a row of n/a per figure); the other rows stay.
TEST(BenchDriver, CountersOffNamesTheUnmeasuredFiguresOnce) {
  Captured cap;
  int code = -1;
  RunJson({"--engine", "bench-test", "--records", "200", "--phases", "load,search", "--pool",
           "dram", "--pool-size", "8M", "--counters", "off"},
          &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  for (const char* row : {"flushes/op", "fences/op", "PM bytes/op", "media writes/op",
                          "PM lines read/op"}) {
    EXPECT_EQ(cap.out.find(row), std::string::npos) << row << "\n" << cap.out;
  }
  size_t lines = 0;
  for (size_t at = cap.out.find("not measured (--counters off)"); at != std::string::npos;
       at = cap.out.find("not measured (--counters off)", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u) << "one per phase table\n" << cap.out;
  EXPECT_NE(cap.out.find("load factor"), std::string::npos) << cap.out;

  Captured counted;
  RunJson({"--engine", "bench-test", "--records", "200", "--phases", "load", "--pool", "dram",
           "--pool-size", "8M"},
          &counted, &code);
  ASSERT_EQ(code, 0) << counted.err;
  EXPECT_NE(counted.out.find("flushes/op"), std::string::npos) << counted.out;
  EXPECT_EQ(counted.out.find("--counters off"), std::string::npos) << counted.out;
}

// --redundancy: the crash simulator counts a flush of a line with nothing pending and a
// fence with nothing flushed; without it the figures are null.
TEST(BenchDriver, RedundancyCountsRedundantFlushesAndFences) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "500", "--ops", "200", "--phases",
                      "load,delete,fill", "--redundancy", "--pool-size", "8M"},
                     &cap, &code, EngineMode{.redundant_delete = true});
  ASSERT_EQ(code, 0) << cap.err;
  const Json* load = Result(doc, "bench-test", "load");
  EXPECT_DOUBLE_EQ(load->Find("redundant_flushes_per_op")->number(), 0.0);
  EXPECT_DOUBLE_EQ(load->Find("redundant_fences_per_op")->number(), 0.0);
  const Json* del = Result(doc, "bench-test", "delete");
  EXPECT_DOUBLE_EQ(del->Find("redundant_flushes_per_op")->number(), 1.0);
  EXPECT_DOUBLE_EQ(del->Find("redundant_fences_per_op")->number(), 1.0);
  EXPECT_EQ(del->Find("mapping")->string(), "dram");
  EXPECT_NE(del->Find("note")->string().find("meaningless"), std::string::npos);
  EXPECT_TRUE(Result(doc, "bench-test", "fill")->Find("redundant_flushes_per_op")->is_number());
  EXPECT_NE(cap.out.find("redundant flushes/op"), std::string::npos);

  Captured cap2;
  Json plain = RunJson({"--engine", "bench-test", "--records", "500", "--phases", "load",
                        "--pool", "dram", "--pool-size", "8M"},
                       &cap2, &code);
  ASSERT_EQ(code, 0) << cap2.err;
  EXPECT_TRUE(Result(plain, "bench-test", "load")->Find("redundant_flushes_per_op")->is_null());
  EXPECT_EQ(cap2.out.find("redundant flushes/op"), std::string::npos);

  Captured cap3;
  EXPECT_EQ(RunBenchArgs({"--engine", "bench-test", "--redundancy", "--pool", "/tmp/x"},
                         TestEnv(&cap3)),
            2);
  EXPECT_NE(cap3.err.find("--redundancy"), std::string::npos) << cap3.err;
}

// Engine counters ride along on every row; a filtered engine's negative phase reports
// its false-positive rate.
TEST(BenchDriver, EngineCountersAndFalsePositiveRate) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "2000", "--ops", "4000",
                      "--phases", "load,search,negative", "--pool", "dram", "--pool-size", "8M"},
                     &cap, &code, EngineMode{.filter = true});
  ASSERT_EQ(code, 0) << cap.err;
  const Json* neg = Result(doc, "bench-test", "negative");
  ASSERT_TRUE(neg->Find("engine_counters")->is_object());
  EXPECT_TRUE(neg->Find("engine_counters")->Has("filter_negatives"));
  ASSERT_TRUE(neg->Find("false_positive_rate")->is_number());
  EXPECT_NEAR(neg->Find("false_positive_rate")->number(), 0.125, 0.03);
  EXPECT_TRUE(Result(doc, "bench-test", "search")->Find("false_positive_rate")->is_null());
}

// An engine that takes an oracle hotspot detector is told, before each phase, the live
// keys the phase's distribution draws most; with uniform draws, none.
TEST(BenchDriver, OracleEngineIsToldTheHottestKeys) {
  for (const char* dist : {"zipfian", "uniform"}) {
    Captured cap;
    int code = -1;
    Json doc = RunJson({"--engine", "bench-test", "--records", "2000", "--ops", "4000",
                        "--phases", "load,update", "--dist", dist, "--pool", "dram",
                        "--pool-size", "8M"},
                       &cap, &code, EngineMode{.oracle = 16});
    ASSERT_EQ(code, 0) << cap.err;
    const Json* c = Result(doc, "bench-test", "update")->Find("engine_counters");
    if (std::string(dist) == "zipfian") {
      EXPECT_EQ(c->Find("oracle_keys")->number(), 16);
      // Ranks 0-15 of YCSB's zipfian take about 12.6% of the draws (16 keys of a uniform
      // 0.8%).
      EXPECT_GT(c->Find("oracle_updates")->number(), 4000 * 0.08);
    } else {
      EXPECT_EQ(c->Find("oracle_keys")->number(), 0);
      EXPECT_EQ(c->Find("oracle_updates")->number(), 0);
    }
  }
}

TEST(BenchDriver, RecoveryBothTimesUncleanAndCleanReopen) {
  const std::string dir = TempPath("pooldir2");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "1000", "--phases", "load",
                      "--pool", dir, "--pool-size", "8M", "--recovery", "both"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  EXPECT_TRUE(cap.warn.empty()) << cap.warn;
  const Json* load = Result(doc, "bench-test", "load");
  EXPECT_TRUE(load->Find("recovery_ms")->is_number());
  EXPECT_TRUE(load->Find("reopen_ms")->is_number());
  Captured cap2;
  Json clean = RunJson({"--engine", "bench-test", "--records", "1000", "--phases", "load",
                        "--pool", dir, "--pool-size", "8M", "--recovery", "clean"},
                       &cap2, &code);
  ASSERT_EQ(code, 0) << cap2.err;
  EXPECT_TRUE(Result(clean, "bench-test", "load")->Find("recovery_ms")->is_null());
  EXPECT_TRUE(Result(clean, "bench-test", "load")->Find("reopen_ms")->is_number());
  ::rmdir(dir.c_str());
}

// --batch N: each search and negative phase also runs through MultiGet, N keys a call,
// as a row of its own; the plain rows still use Get.
TEST(BenchDriver, BatchRunsLookupsThroughMultiGetAsRowsOfTheirOwn) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "2000", "--ops", "1000",
                      "--phases", "load,search,negative,update", "--pool", "dram",
                      "--pool-size", "8M", "--batch", "7"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  EXPECT_EQ(doc.Find("config")->Find("batch")->uint(), 7u);
  // load, 2 x search, 2 x negative, update, and the write phases' batched rows (Write).
  ASSERT_EQ(doc.Find("results")->items().size(), 8u);
  auto prefetched = [](const Json* row) {
    return row->Find("engine_counters")->Find("prefetched_keys")->uint();
  };
  const Json* search = Result(doc, "bench-test", "search");
  const Json* search7 = Result(doc, "bench-test", "search", 1, 7);
  const Json* negative = Result(doc, "bench-test", "negative");
  const Json* negative7 = Result(doc, "bench-test", "negative", 1, 7);
  ASSERT_TRUE(search && search7 && negative && negative7);
  EXPECT_EQ(prefetched(search), 0u);  // Gets only
  // Every key of a batched row goes through MultiGet (the calls are counted below by
  // their latency samples: 1000 keys in calls of 7 are 142 full calls and one of 6).
  EXPECT_EQ(prefetched(search7) - prefetched(search), 1000u);
  EXPECT_EQ(prefetched(negative7) - prefetched(negative), 1000u);
  EXPECT_EQ(prefetched(Result(doc, "bench-test", "update")), prefetched(negative7));
  // The batched writes run on a second index (its counters start at 0) through Write,
  // whose pipeline prefetches every op: its load row prefetched the 2000 keys, its
  // update row 1000 more.
  const Json* load7 = Result(doc, "bench-test", "load", 1, 7);
  const Json* update7 = Result(doc, "bench-test", "update", 1, 7);
  ASSERT_TRUE(load7 && update7);
  EXPECT_EQ(prefetched(load7), 2000u);
  EXPECT_EQ(prefetched(update7), 3000u);
  for (const Json* row : {load7, update7}) {
    EXPECT_EQ(row->Find("errors")->uint(), 0u) << row->Find("first_error")->Dump(-1);
  }
  EXPECT_EQ(load7->Find("ops")->uint(), 2000u);
  EXPECT_EQ(update7->Find("ops")->uint(), 1000u);
  EXPECT_NE(cap.out.find("== load (batch 7)"), std::string::npos) << cap.out;
  for (const Json* row : {search7, negative7}) {
    EXPECT_EQ(row->Find("ops")->uint(), 1000u);
    EXPECT_EQ(row->Find("errors")->uint(), 0u) << row->Find("first_error")->Dump(-1);
    EXPECT_EQ(row->Find("phase_index")->uint(), row == search7 ? 1u : 2u);
    // A short phase times every call; one sample per call.
    EXPECT_EQ(row->Find("latency_ns")->Find("samples")->uint(), 143u);
  }
  EXPECT_NE(search7->Find("checksum")->uint(), 0u);  // values were read
  EXPECT_EQ(negative7->Find("checksum")->uint(), 0u);
  EXPECT_NE(cap.out.find("== search (batch 7)"), std::string::npos) << cap.out;
  EXPECT_NE(cap.out.find("== negative (batch 7)"), std::string::npos) << cap.out;
}

// --pin: each worker thread is pinned, and every row says to which CPU; without it, null.
TEST(BenchDriver, PinSaysWhereEachThreadRan) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "500", "--phases", "load,search",
                      "--pool", "dram", "--pool-size", "8M", "--threads", "3", "--pin"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  EXPECT_TRUE(cap.warn.empty()) << cap.warn;
  EXPECT_TRUE(doc.Find("config")->Find("pin")->boolean());
  const std::vector<int> expected = PinCpus(true, 3);
  ASSERT_EQ(expected.size(), 3u);
  for (const Json& r : doc.Find("results")->items()) {
    const Json* cpus = r.Find("pinned_cpus");
    ASSERT_TRUE(cpus->is_array()) << r.Dump(-1);
    ASSERT_EQ(cpus->items().size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(cpus->items()[i].number(), expected[i]);
  }
  Captured cap2;
  Json plain = RunJson({"--engine", "bench-test", "--records", "500", "--phases", "load",
                        "--pool", "dram", "--pool-size", "8M"},
                       &cap2, &code);
  ASSERT_EQ(code, 0) << cap2.err;
  EXPECT_FALSE(plain.Find("config")->Find("pin")->boolean());
  EXPECT_TRUE(Result(plain, "bench-test", "load")->Find("pinned_cpus")->is_null());
}

// --repeat 3 --floor: every round's row is kept, each figure is the median with its
// range, ratios and floor shares are taken within each round, and the order changes.
TEST(BenchRepeat, KeepsEverySampleWithMediansRangesRatiosFloorAndOrder) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test,bench-test2", "--records", "1000", "--ops", "500",
                      "--phases", "load,search,delete", "--pool", "dram", "--pool-size", "8M",
                      "--repeat", "3", "--floor", "--seed", "7"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  EXPECT_EQ(doc.Find("config")->Find("repeat")->uint(), 3u);
  // The order of each round: a permutation of the three cells, never the previous one.
  const auto& rounds = doc.Find("rounds")->items();
  ASSERT_EQ(rounds.size(), 3u);
  std::vector<std::vector<std::string>> orders;
  for (const Json& r : rounds) {
    std::vector<std::string> order;
    for (const Json& c : r.Find("order")->items()) order.push_back(c.string());
    orders.push_back(order);
  }
  EXPECT_EQ(orders[0], (std::vector<std::string>{"bench-test t1", "bench-test2 t1", "floor t1"}));
  for (size_t r = 1; r < 3; ++r) {
    EXPECT_NE(orders[r], orders[r - 1]);
    std::vector<std::string> sorted = orders[r];
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<std::string>{"bench-test t1", "bench-test2 t1", "floor t1"}));
  }
  // The floor: five loops, three samples each.
  const auto& floors = doc.Find("floor")->items();
  ASSERT_EQ(floors.size(), 1u);
  const Json& floor = floors[0];
  for (const char* kind : {"insert", "delete", "lookup", "prefetch", "dependent"}) {
    const Json* loop = floor.Find("loops")->Find(kind);
    ASSERT_NE(loop, nullptr) << kind;
    EXPECT_GT(loop->Find("mops")->number(), 0) << kind;
    EXPECT_EQ(loop->Find("mops_range")->Find("samples")->items().size(), 3u) << kind;
  }
  auto floor_mops = [&](int round, const char* kind) {
    return floor.Find("samples")->items()[round].Find("mops")->Find(kind)->number();
  };

  const auto& results = doc.Find("results")->items();
  ASSERT_EQ(results.size(), 6u);  // 2 engines x 3 phases, one row each
  for (const Json& row : results) {
    const std::string what = row.Find("engine")->string() + " " + row.Find("phase")->string();
    const auto& samples = row.Find("samples")->items();
    ASSERT_EQ(samples.size(), 3u) << what;
    ASSERT_EQ(row.Find("rounds")->uint(), 3u);
    std::vector<double> mops;
    for (size_t r = 0; r < 3; ++r) {
      EXPECT_EQ(samples[r].Find("round")->uint(), r);
      // Its position is where its cell ran in that round.
      const std::string cell = row.Find("engine")->string() + " t1";
      const uint64_t position = samples[r].Find("position")->uint();
      ASSERT_LT(position, 3u);
      EXPECT_EQ(orders[r][position], cell) << what;
      mops.push_back(samples[r].Find("mops")->number());
      // Each round's row is a full row of the contract.
      for (const char* field : kResultFields) EXPECT_TRUE(samples[r].Has(field)) << field;
      EXPECT_EQ(samples[r].Find("ops")->uint(), row.Find("ops")->uint());
    }
    const Json* range = row.Find("mops_range");
    std::vector<double> sorted = mops;
    std::sort(sorted.begin(), sorted.end());
    for (size_t r = 0; r < 3; ++r) EXPECT_EQ(range->Find("samples")->items()[r].number(), mops[r]);
    EXPECT_EQ(range->Find("median")->number(), sorted[1]) << what;
    EXPECT_EQ(range->Find("min")->number(), sorted[0]);
    EXPECT_EQ(range->Find("max")->number(), sorted[2]);
    EXPECT_EQ(row.Find("mops")->number(), sorted[1]);
    EXPECT_EQ(row.Find("stable")->boolean(), sorted[2] / sorted[0] <= 1.25) << what;
    EXPECT_EQ(samples[row.Find("median_round")->uint()].Find("mops")->number(), sorted[1]);
    // Share of the matching floor loop, in the same round.
    const std::string phase = row.Find("phase")->string();
    const char* kind = phase == "load" ? "insert" : phase == "search" ? "lookup" : "delete";
    const Json* pct = row.Find("pct_of_floor");
    ASSERT_TRUE(pct->is_object()) << what;
    EXPECT_EQ(pct->Find("floor")->string(), kind);
    for (int r = 0; r < 3; ++r) {
      EXPECT_NEAR(pct->Find("samples")->items()[r].number(), 100 * mops[r] / floor_mops(r, kind),
                  1e-9 * pct->Find("samples")->items()[r].number());
    }
  }
  // Ratios within each round: bench-test2 over bench-test.
  for (const char* phase : {"load", "search", "delete"}) {
    const Json* a = Result(doc, "bench-test", phase);
    const Json* b = Result(doc, "bench-test2", phase);
    EXPECT_TRUE(a->Find("ratio_to_first")->is_null());
    const Json* ratio = b->Find("ratio_to_first");
    ASSERT_TRUE(ratio->is_object());
    EXPECT_EQ(ratio->Find("engine")->string(), "bench-test");
    for (int r = 0; r < 3; ++r) {
      const double expected = b->Find("samples")->items()[r].Find("mops")->number() /
                              a->Find("samples")->items()[r].Find("mops")->number();
      EXPECT_NEAR(ratio->Find("samples")->items()[r].number(), expected, 1e-12 * expected);
    }
  }
  // Setup times of every cell, the floor's populate among them.
  const auto& setup = doc.Find("setup")->items();
  ASSERT_EQ(setup.size(), 3u);
  EXPECT_TRUE(setup[2].Find("populate_ms")->is_number());
  EXPECT_EQ(doc.Find("stability")->Find("rounds")->uint(), 3u);
  // The tables say all of it.
  EXPECT_NE(cap.out.find("median of 3 rounds (min-max)"), std::string::npos) << cap.out;
  EXPECT_NE(cap.out.find("ratio, per round"), std::string::npos);
  EXPECT_NE(cap.out.find("% of lookup floor"), std::string::npos);
  EXPECT_NE(cap.out.find("== floor"), std::string::npos);
  EXPECT_NE(cap.out.find("pool setup"), std::string::npos);
  EXPECT_TRUE(cap.out.find("\nstable: ") != std::string::npos ||
              cap.out.find("\nunstable (") != std::string::npos) << cap.out;
}

// One round is never presented silently as a trustworthy figure.
TEST(BenchRepeat, OneRoundSaysNoSpreadWasMeasured) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "500", "--phases", "load",
                      "--pool", "dram", "--pool-size", "8M"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  const Json* load = Result(doc, "bench-test", "load");
  EXPECT_EQ(load->Find("rounds")->uint(), 1u);
  EXPECT_EQ(load->Find("samples")->items().size(), 1u);
  EXPECT_TRUE(load->Find("pct_of_floor")->is_null());  // no --floor
  EXPECT_TRUE(doc.Find("floor")->items().empty());
  EXPECT_NE(cap.out.find("one round: no figure's spread was measured"), std::string::npos)
      << cap.out;
}

// The machine block records what makes two runs comparable.
TEST(BenchRepeat, MachineBlockRecordsWhatMakesRunsComparable) {
  Captured cap;
  int code = -1;
  Json doc = RunJson({"--engine", "bench-test", "--records", "500", "--phases", "load",
                      "--pool", "dram", "--pool-size", "8M"},
                     &cap, &code);
  ASSERT_EQ(code, 0) << cap.err;
  const Json* m = doc.Find("machine");
  for (const char* field : {"cpu", "cores", "kernel", "build_type", "cmake_build_type",
                            "commit", "load_average_start", "load_average_end", "pool_kind"}) {
    EXPECT_TRUE(m->Has(field)) << field;
  }
  for (const char* f : {"clwb", "clflushopt", "clflush", "avx2", "avx512bw"}) {
    EXPECT_TRUE(m->Find("cpu_features")->Find(f)->is_bool()) << f;
  }
  const std::string kind = m->Find("pool_kind")->string();
  EXPECT_EQ(kind.rfind("DRAM", 0), 0u) << kind;  // and its pages, where the system says
  EXPECT_FALSE(m->Find("commit")->string().empty());
}

}  // namespace
}  // namespace pmhash::bench
