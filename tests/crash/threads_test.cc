// Crashes with several threads: the simulator records the interleaving as it happened;
// crash points stop every thread (the hook holds the simulator's lock).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "crash/crash_sim_runner.h"
#include "pm/crashsim.h"

// GCC 12 warns falsely on "literal" + std::string (GCC bug 105651).
#pragma GCC diagnostic ignored "-Wrestrict"

namespace pmhash::testing {
namespace {

using Kind = pm::CrashSim::ImageKind;

class CrashThreads : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    spec_ = FindSpec(GetParam());
    options_.initial_capacity = 16;
    options_.pool_size = 4ull << 20;
    options_.count_stats = false;
    ASSERT_TRUE(NewDramPool(spec_, options_.pool_size, &pool_).ok());
    sim_ = std::make_unique<pm::CrashSim>(pool_->base(), pool_->size(), PersistMode::kAdr);
    Status s = OpenOnPool(spec_, std::move(pool_), true, options_, sim_.get(), &index_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override {
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
    if (!s.ok()) *error = std::string("recovery of a ") + pm::CrashImageKindName(kind) +
                          " image failed: " + s.ToString();
    return index;
  }

  EngineSpec spec_;
  Options options_;
  std::unique_ptr<pm::Pool> pool_;
  std::unique_ptr<pm::CrashSim> sim_;
  std::unique_ptr<Index> index_;
  uint64_t images_ = 0;
};

// Three threads on disjoint keys, random operations; crashes at sampled fences. Each
// thread's acknowledged ops must survive, its interrupted one is all-or-nothing.
TEST_P(CrashThreads, DisjointWritersSurviveCrashes) {
  constexpr int kThreads = 3;
  const int ops = static_cast<int>(300 * SoakFactor());
  struct State {
    std::mutex mu;
    Model acked;
    std::optional<Op> inflight;
  } states[kThreads];
  std::string failure;
  std::mt19937_64 rng(11);
  sim_->SetHook(
      [&](pm::CrashSim& sim, pm::CrashSim::Event) {
        if (!failure.empty() || rng() % 4 != 0) return;
        Model model;
        std::vector<Op> inflight;
        for (State& st : states) {
          std::lock_guard<std::mutex> l(st.mu);
          model.insert(st.acked.begin(), st.acked.end());
          if (st.inflight) inflight.push_back(*st.inflight);
        }
        for (Kind kind : {Kind::kNone, Kind::kRandom, Kind::kRandom}) {
          std::string err;
          auto index = Recover(sim, kind, rng, &err);
          if (index != nullptr) err = CheckIndex(index.get(), model, inflight);
          Abandon(&index);
          if (!err.empty()) {
            failure = std::string(pm::CrashImageKindName(kind)) + " image: " + err;
            return;
          }
        }
      },
      0, 5);
  auto work = [&](int t) {
    std::mt19937_64 r(100 + t);
    for (int i = 0; i < ops; ++i) {
      Op op{static_cast<Op::Kind>(r() % 4), "w" + std::to_string(t) + "-" + std::to_string(r() % 40),
            std::string(r() % 3 ? 8 : 50, static_cast<char>('a' + i % 26))};
      {
        std::lock_guard<std::mutex> l(states[t].mu);
        states[t].inflight = op;
      }
      Status got = ApplyToIndex(op, index_.get());
      std::lock_guard<std::mutex> l(states[t].mu);
      Model& m = states[t].acked;
      Status want = ApplyToModel(op, &m);
      states[t].inflight.reset();
      if (got.code() != want.code()) {
        ADD_FAILURE() << Describe(op) << " returned " << got.ToString();
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t);
  for (auto& th : threads) th.join();
  WaitForBackgroundWork(index_.get());
  sim_->SetHook({}, 0, 0);
  EXPECT_EQ(failure, "") << "engine " << spec_.name << ", seed 11";
  EXPECT_TRUE(sim_->FindBypass().ok());
  EXPECT_GT(images_, 0u);
}

// Durable linearizability: a value a reader returned must survive a crash right after
// the read (unless a write that was not complete when the read began replaced it).
TEST_P(CrashThreads, ReadsReturnOnlyDurableValues) {
  constexpr int kKeys = 8;
  auto key = [](int k) { return "shared-" + std::to_string(k); };
  for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(index_->Insert(key(k), "initial0").ok());
  struct Write {
    int key;
    std::string value;
    uint64_t completed;  // clock when the Put returned; UINT64_MAX while in flight
  };
  std::mutex writes_mu;
  std::vector<Write> writes;
  std::atomic<uint64_t> clock{1};
  struct ReadCheck {
    int key;
    std::string value;
    uint64_t started;
  };
  thread_local std::optional<ReadCheck> pending_read;
  std::mutex failure_mu;
  std::string failure;
  std::mt19937_64 rng(21);
  uint64_t checks = 0;
  sim_->SetHook(
      [&](pm::CrashSim& sim, pm::CrashSim::Event e) {
        if (e != pm::CrashSim::Event::kManual || !pending_read) return;
        const ReadCheck rc = *pending_read;
        std::string err;
        auto index = Recover(sim, Kind::kNone, rng, &err);
        ++checks;
        std::string got;
        if (index != nullptr && !index->Get(key(rc.key), &got).ok()) err = "key lost";
        Abandon(&index);
        if (err.empty() && got != rc.value) {
          std::lock_guard<std::mutex> l(writes_mu);
          bool concurrent = false;
          for (const Write& w : writes) {
            if (w.key == rc.key && w.value == got && w.completed > rc.started) concurrent = true;
          }
          if (!concurrent) {
            err = "a reader returned " + Printable(rc.value) + " for " + key(rc.key) +
                  ", but after a crash right after the read the key holds " + Printable(got);
          }
        }
        if (!err.empty()) {
          std::lock_guard<std::mutex> l(failure_mu);
          if (failure.empty()) failure = err;
        }
      },
      0, 9);
  const int ops = static_cast<int>(300 * SoakFactor());
  auto writer = [&](int t) {
    std::mt19937_64 r(200 + t);
    for (int i = 0; i < ops; ++i) {
      const int k = static_cast<int>(r() % kKeys);
      std::string v = "w" + std::to_string(t) + "-" + std::to_string(i);
      v.resize(8, '.');  // inline; long values take the other path
      if (i % 5 == 4) v += std::string(40, 'L');
      size_t idx;
      {
        std::lock_guard<std::mutex> l(writes_mu);
        idx = writes.size();
        writes.push_back({k, v, UINT64_MAX});
      }
      EXPECT_TRUE(index_->Put(key(k), v).ok());
      std::lock_guard<std::mutex> l(writes_mu);
      writes[idx].completed = clock.fetch_add(1);
    }
  };
  auto reader = [&](int t) {
    std::mt19937_64 r(300 + t);
    std::string v;
    for (int i = 0; i < ops; ++i) {
      const int k = static_cast<int>(r() % kKeys);
      const uint64_t started = clock.fetch_add(1);
      ASSERT_TRUE(index_->Get(key(k), &v).ok());
      pending_read = ReadCheck{k, v, started};
      sim_->CrashNow();
      pending_read.reset();
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(writer, 0);
  threads.emplace_back(writer, 1);
  threads.emplace_back(reader, 0);
  threads.emplace_back(reader, 1);
  for (auto& th : threads) th.join();
  WaitForBackgroundWork(index_.get());
  sim_->SetHook({}, 0, 0);
  EXPECT_EQ(failure, "") << "engine " << spec_.name << ", hook seed 21";
  EXPECT_EQ(checks, 2u * ops);
}

INSTANTIATE_TEST_SUITE_P(Engines, CrashThreads, ::testing::ValuesIn(Names(CrashConsistentEngines())),
                         [](const auto& info) { return GtestName(info.param); });

}  // namespace
}  // namespace pmhash::testing
