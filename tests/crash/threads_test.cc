// Crashes with several threads: the simulator records the interleaving as it happened;
// crash points stop every thread (the hook holds the simulator's lock, and a store is
// performed under that lock, so no store is half done while the hook runs).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "support/crash_sim_runner.h"
#include "pm/crashsim.h"

// GCC 12 warns falsely on "literal" + std::string (GCC bug 105651).
#pragma GCC diagnostic ignored "-Wrestrict"

namespace pmhash::testing {
namespace {

using Kind = pm::CrashSim::ImageKind;

// An index of `spec` under a crash simulator, with the crash-run engine options.
class SimIndex {
 public:
  // `extra_options`: engine options beyond the crash-run ones (e.g. alloc_arenas).
  explicit SimIndex(const EngineSpec& spec,
                    const std::map<std::string, std::string>& extra_options = {})
      : spec_(spec) {
    options_.initial_capacity = 16;
    options_.pool_size = spec.test.crash_pool_size;
    options_.count_stats = false;
    options_.engine_options = spec.test.crash_options;
    for (const auto& [name, value] : spec.test.thread_crash_options) {
      options_.engine_options[name] = value;
    }
    for (const auto& [name, value] : extra_options) options_.engine_options[name] = value;
    std::unique_ptr<pm::Pool> pool;
    status_ = NewDramPool(spec_, options_.pool_size, &pool);
    if (!status_.ok()) return;
    sim_ = std::make_unique<pm::CrashSim>(pool->base(), pool->size(), PersistMode::kAdr);
    status_ = OpenOnPool(spec_, std::move(pool), true, options_, sim_.get(), &index_);
  }
  ~SimIndex() {
    if (sim_) sim_->SetHook({}, 0, 0);
    Abandon(&index_);
    AddImages(spec_.name, images_);
  }

  // Recovers `kind` of the current crash point; null (and *error set) on failure.
  std::unique_ptr<Index> Recover(pm::CrashSim& sim, Kind kind, std::mt19937_64& rng,
                                 std::string* error) {
    std::unique_ptr<pm::Pool> image;
    std::unique_ptr<Index> index;
    Status s = sim.MakePool(kind, rng, spec_.name, &image);
    if (s.ok()) s = OpenOnPool(spec_, std::move(image), false, options_, nullptr, &index);
    ++images_;
    if (!s.ok()) {
      *error = std::string("recovery of a ") + pm::CrashImageKindName(kind) +
               " image failed: " + s.ToString();
    }
    return index;
  }

  const Status& status() const { return status_; }
  pm::CrashSim& sim() { return *sim_; }
  Index* index() { return index_.get(); }
  uint64_t images() const { return images_; }

 private:
  const EngineSpec spec_;
  Options options_;
  Status status_;
  std::unique_ptr<pm::CrashSim> sim_;
  std::unique_ptr<Index> index_;
  uint64_t images_ = 0;
};

struct ThreadRun {
  std::string failure;  // "" if every check passed
  uint64_t images = 0;  // crash images checked
  uint64_t checks = 0;  // durable-read checks (ReadsReturnOnlyDurableValues)
};

// How DisjointWriters runs.
struct WriterPlan {
  int ops = 300;           // per thread
  int crash_one_in = 4;    // crash points at this share of the fences
  // At this share of the stores the hook pauses (no image) for pause_us, holding the
  // simulator's lock: the other threads run on to their next store, flush or fence, so
  // what they do between two of this thread's stores (e.g. allocate the block it just
  // freed) happens far more often than the scheduler alone would make it.
  double pause_rate = 0;
  int pause_us = 0;
  // Every thread in one allocator arena (alloc_arenas=1) and ops that free and reuse
  // blocks: each thread deletes its oldest key, inserts a new one and updates a live one
  // in turn, keys and values out of line and of one size (one record size class), so a
  // block one thread frees (a deleted record, an updated key's old record) is the next
  // another allocates. Else random ops over 40 keys a thread.
  bool shared_arena = false;
};

// Three threads on disjoint keys; crashes at some of the fences. Each thread's
// acknowledged ops must survive, its interrupted one is all-or-nothing; the working pool
// holds only what the store log explains; recovered images pass the engine's invariants.
ThreadRun DisjointWriters(const EngineSpec& spec, uint64_t seed, const WriterPlan& plan) {
  constexpr int kThreads = 3;
  const int ops = plan.ops;
  ThreadRun run;
  SimIndex si(spec, plan.shared_arena ? std::map<std::string, std::string>{{"alloc_arenas", "1"}}
                                      : std::map<std::string, std::string>{});
  if (!si.status().ok()) {
    run.failure = "cannot create the index: " + si.status().ToString();
    return run;
  }
  struct State {
    std::mutex mu;
    Model acked;
    std::optional<Op> inflight;
  } states[kThreads];
  std::mutex failure_mu;
  std::string failure;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> l(failure_mu);
    if (failure.empty()) failure = what;
  };
  std::mt19937_64 rng(seed);
  si.sim().SetHook(
      [&](pm::CrashSim& sim, pm::CrashSim::Event event) {
        {
          std::lock_guard<std::mutex> l(failure_mu);
          if (!failure.empty()) return;
        }
        if (event == pm::CrashSim::Event::kStore) {
          std::this_thread::sleep_for(std::chrono::microseconds(plan.pause_us));
          return;
        }
        if (rng() % plan.crash_one_in != 0) return;
        Status b = sim.FindBypass();
        if (!b.ok()) return fail(b.ToString());
        Model model;
        std::vector<Op> inflight;
        for (State& st : states) {
          std::lock_guard<std::mutex> l(st.mu);
          model.insert(st.acked.begin(), st.acked.end());
          if (st.inflight) inflight.push_back(*st.inflight);
        }
        for (Kind kind : {Kind::kNone, Kind::kRandom, Kind::kRandom}) {
          std::string err;
          auto index = si.Recover(sim, kind, rng, &err);
          if (index != nullptr) err = CheckIndex(index.get(), model, inflight);
          if (index != nullptr && err.empty()) err = CheckInvariantsOf(index.get());
          Abandon(&index);
          if (!err.empty()) return fail(std::string(pm::CrashImageKindName(kind)) + " image: " + err);
        }
      },
      plan.pause_rate, seed + 1);
  auto work = [&](int t) {
    std::mt19937_64 r(seed * 100 + t);
    auto reuse_key = [t](int i) {
      return "w" + std::to_string(t) + "-" + std::to_string(100000 + i);
    };
    constexpr int kLive = 8;  // each thread's live keys in the shared-arena plan
    for (int i = 0; i < ops; ++i) {
      Op op{static_cast<Op::Kind>(r() % 4), "w" + std::to_string(t) + "-" + std::to_string(r() % 40),
            std::string(r() % 3 ? 8 : 50, static_cast<char>('a' + i % 26))};
      if (plan.shared_arena) {
        const std::string value(spec.test.shared_arena_value_bytes,
                                static_cast<char>('a' + (i + t) % 26));
        // Round k deletes key k, inserts key kLive + k and updates key k + 1 (live).
        const int k = (i - kLive) / 3;
        op = i < kLive                 ? Op{Op::kInsert, reuse_key(i), value}
             : (i - kLive) % 3 == 0    ? Op{Op::kDelete, reuse_key(k), ""}
             : (i - kLive) % 3 == 1    ? Op{Op::kInsert, reuse_key(kLive + k), value}
                                       : Op{Op::kUpdate, reuse_key(k + 1), value};
      }
      {
        std::lock_guard<std::mutex> l(states[t].mu);
        states[t].inflight = op;
      }
      Status got = ApplyToIndex(op, si.index());
      std::lock_guard<std::mutex> l(states[t].mu);
      Status want = ApplyToModel(op, &states[t].acked);
      states[t].inflight.reset();
      if (got.code() != want.code()) {
        fail(Describe(op) + " returned " + got.ToString());
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t);
  for (auto& th : threads) th.join();
  WaitForBackgroundWork(si.index());
  si.sim().SetHook({}, 0, 0);
  if (failure.empty()) {
    Status b = si.sim().FindBypass();
    if (!b.ok()) failure = b.ToString();
  }
  if (failure.empty() && si.sim().counters().outside_stores > 0) {
    failure = std::to_string(si.sim().counters().outside_stores) +
              " stores through the pool's Persister fell outside the pool";
  }
  run.failure = failure.empty() ? "" : "engine " + spec.name + ", seed " + std::to_string(seed) +
                                           ": " + failure;
  run.images = si.images();
  return run;
}

// Durable linearizability: 2 writers Put to shared keys while 2 readers Get, each read
// followed by a crash (the reader's CrashNow). The recovered key must hold a value the
// history allows: the one read, or one written by a Put that may come after both the
// read and the Put that wrote the value read (it completed after each of them began);
// and no Put that completed before the crash and began after the recovered value's Put
// completed may be lost.
ThreadRun DurableReads(const EngineSpec& spec, uint64_t seed, int ops) {
  constexpr int kKeys = 8;
  constexpr uint64_t kOpen = UINT64_MAX;  // a Put not yet returned
  ThreadRun run;
  SimIndex si(spec);
  if (!si.status().ok()) {
    run.failure = "cannot create the index: " + si.status().ToString();
    return run;
  }
  auto key = [](int k) { return "shared-" + std::to_string(k); };
  struct Write {
    int key;
    uint64_t started, completed;  // logical clock; completed is kOpen while in flight
  };
  std::mutex writes_mu;
  std::map<std::string, Write> writes;  // by value: every value is written once
  std::atomic<uint64_t> clock{1};
  for (int k = 0; k < kKeys; ++k) {
    const std::string v = "initial" + std::to_string(k);
    Status s = si.index()->Insert(key(k), v);
    if (!s.ok()) {
      run.failure = "initial Insert failed: " + s.ToString();
      return run;
    }
    writes[v] = {k, 0, 0};
  }
  struct ReadCheck {
    int key;
    std::string value;
    uint64_t started;
  };
  static thread_local std::optional<ReadCheck> pending_read;
  std::mutex failure_mu;
  std::string failure;
  std::mt19937_64 rng(seed);
  uint64_t checks = 0;
  si.sim().SetHook(
      [&](pm::CrashSim& sim, pm::CrashSim::Event e) {
        if (e != pm::CrashSim::Event::kManual || !pending_read) return;
        const ReadCheck rc = *pending_read;
        std::string err;
        auto index = si.Recover(sim, Kind::kNone, rng, &err);
        ++checks;
        std::string got;
        if (index != nullptr && !index->Get(key(rc.key), &got).ok()) err = "key lost";
        Abandon(&index);
        if (err.empty()) {
          std::lock_guard<std::mutex> l(writes_mu);
          auto g = writes.find(got);
          auto v = writes.find(rc.value);
          if (g == writes.end() || g->second.key != rc.key) {
            err = "key holds " + Printable(got) + ", a value never written to it";
          } else if (v == writes.end() || v->second.key != rc.key) {
            err = "a reader returned " + Printable(rc.value) + ", a value never written to it";
          } else if (got != rc.value && !(g->second.completed > rc.started &&
                                          g->second.completed > v->second.started)) {
            err = "a reader returned " + Printable(rc.value) + ", but after a crash right " +
                  "after the read the key holds the older " + Printable(got);
          } else {
            for (const auto& [value, w] : writes) {
              if (w.key == rc.key && w.completed != kOpen && g->second.completed != kOpen &&
                  w.started > g->second.completed) {
                err = "the completed Put of " + Printable(value) +
                      " is lost: after a crash the key holds the older " + Printable(got);
                break;
              }
            }
          }
          if (!err.empty()) err += " (key " + key(rc.key) + ")";
        }
        if (!err.empty()) {
          std::lock_guard<std::mutex> l(failure_mu);
          if (failure.empty()) failure = err;
        }
      },
      0, seed + 1);
  auto writer = [&](int t) {
    std::mt19937_64 r(seed * 100 + t);
    for (int i = 0; i < ops; ++i) {
      const int k = static_cast<int>(r() % kKeys);
      std::string v = "w" + std::to_string(t) + "-" + std::to_string(i);
      v.resize(8, '.');  // inline; long values take the other path
      if (i % 5 == 4) v += std::string(40, 'L');
      {
        std::lock_guard<std::mutex> l(writes_mu);
        writes[v] = {k, clock.fetch_add(1), kOpen};
      }
      Status s = si.index()->Put(key(k), v);
      std::lock_guard<std::mutex> l(writes_mu);
      writes[v].completed = clock.fetch_add(1);
      if (!s.ok()) {
        std::lock_guard<std::mutex> f(failure_mu);
        if (failure.empty()) failure = "Put failed: " + s.ToString();
      }
    }
  };
  auto reader = [&](int t) {
    std::mt19937_64 r(seed * 100 + 50 + t);
    std::string v;
    for (int i = 0; i < ops; ++i) {
      const int k = static_cast<int>(r() % kKeys);
      const uint64_t started = clock.fetch_add(1);
      Status s = si.index()->Get(key(k), &v);
      if (!s.ok()) {
        std::lock_guard<std::mutex> f(failure_mu);
        if (failure.empty()) failure = "Get(" + key(k) + ") failed: " + s.ToString();
        return;
      }
      pending_read = ReadCheck{k, v, started};
      si.sim().CrashNow();
      pending_read.reset();
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(writer, 0);
  threads.emplace_back(writer, 1);
  threads.emplace_back(reader, 0);
  threads.emplace_back(reader, 1);
  for (auto& th : threads) th.join();
  WaitForBackgroundWork(si.index());
  si.sim().SetHook({}, 0, 0);
  if (failure.empty()) {
    Status b = si.sim().FindBypass();
    if (!b.ok()) failure = b.ToString();
  }
  run.failure = failure.empty() ? "" : "engine " + spec.name + ", hook seed " +
                                           std::to_string(seed) + ": " + failure;
  run.images = si.images();
  run.checks = checks;
  return run;
}

class CrashThreads : public ::testing::TestWithParam<std::string> {};

TEST_P(CrashThreads, DisjointWritersSurviveCrashes) {
  for (uint64_t seed : TestSeeds({11})) {
    SCOPED_TRACE(SeedNote(seed));
    WriterPlan plan;
    plan.ops = static_cast<int>(300 * SoakFactor());
    ThreadRun r = DisjointWriters(FindSpec(GetParam()), seed, plan);
    EXPECT_EQ(r.failure, "");
    EXPECT_GT(r.images, 0u);
  }
}

// Blocks freed by one thread's delete and allocated at once by another's insert (one
// shared arena): a crash at a fence between the two must still find every record whole
// and reached once.
TEST_P(CrashThreads, SharedArenaDeletesAndInsertsSurviveCrashes) {
  for (uint64_t seed : TestSeeds({12})) {
    SCOPED_TRACE(SeedNote(seed));
    WriterPlan plan;
    plan.ops = static_cast<int>(450 * SoakFactor());  // ~150 rounds of delete, insert, update
    plan.crash_one_in = 2;
    plan.shared_arena = true;
    plan.pause_rate = 0.25;
    plan.pause_us = 100;
    ThreadRun r = DisjointWriters(FindSpec(GetParam()), seed, plan);
    EXPECT_EQ(r.failure, "");
    std::printf("%s: %llu images\n", GetParam().c_str(), static_cast<unsigned long long>(r.images));
    EXPECT_GT(r.images, 0u);
  }
}

TEST_P(CrashThreads, ReadsReturnOnlyDurableValues) {
  const int ops = static_cast<int>(300 * SoakFactor());
  for (uint64_t seed : TestSeeds({21})) {
    SCOPED_TRACE(SeedNote(seed));
    ThreadRun r = DurableReads(FindSpec(GetParam()), seed, ops);
    EXPECT_EQ(r.failure, "");
    EXPECT_EQ(r.checks, 2u * ops);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, CrashThreads, ::testing::ValuesIn(Names(CrashConsistentEngines())),
                         [](const auto& info) { return GtestName(info.param); });

// Negative controls: the multi-thread tests catch the broken engines.
TEST(CrashThreadsCatchesBugs, DisjointWritersCatchCommitBeforeData) {
  ThreadRun r = DisjointWriters(CommitEarlyEngine(), 11, WriterPlan{});
  ASSERT_NE(r.failure, "") << "missed a commit store made before its data was durable";
  std::printf("caught as expected: %s\n", r.failure.c_str());
}

TEST(CrashThreadsCatchesBugs, DisjointWritersCatchMissingFence) {
  ThreadRun r = DisjointWriters(NoFenceEngine(), 11, WriterPlan{});
  ASSERT_NE(r.failure, "") << "missed acknowledged ops that were not durable";
  std::printf("caught as expected: %s\n", r.failure.c_str());
}

TEST(CrashThreadsCatchesBugs, DurableReadsCatchMissingFence) {
  ThreadRun r = DurableReads(NoFenceEngine(), 21, 300);
  ASSERT_NE(r.failure, "") << "missed a read of a value that was not yet durable";
  std::printf("caught as expected: %s\n", r.failure.c_str());
}

}  // namespace
}  // namespace pmhash::testing
