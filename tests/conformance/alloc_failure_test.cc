// Allocation-failure injection (docs/testing.md): the crash suite's scripts
// (support/crash_sim_runner.h) on every engine, with PM allocations failing
// (pm::AllocationFaults). An operation whose allocation fails either returns
// ResourceExhausted (PoolFull) and changes nothing, or completes all the same (e.g. a
// growth given up after its commit); either way the index equals the model, its
// invariants hold, no block leaks, and a crash right after (and, for crash-consistent
// engines, at every fence of the attempt) recovers to that state. Close, with its allocations failing, leaves a pool that reopens to the model.
//
// The sweep: before operation i, allocation k of the attempt fails (k = 1, 2, ...), alone
// (one-shot) or with every later one (sticky). A refused attempt left the index
// unchanged, so the next k runs in place; an attempt that completed is undone by
// rebuilding the index up to operation i (a fresh pool, ops 0..i-1 replayed). The sweep
// ends with the attempt that reaches fewer than k allocations: the op as it runs without
// failures. So every allocation point of every op is failed. Besides, the pool runs full
// at some allocation of the script and stays full to the end, for every block or only for
// blocks of 128 bytes or more, so that the paths taken once earlier failures stuck (a
// background refill that failed) are reached too. Count() is checked after every failure;
// the full check and the crash images at a sample of them (PMHASH_ALLOC_FAULTS).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pm/alloc.h"
#include "pm/crashsim.h"
#include "support/harness.h"
#include "support/crash_sim_runner.h"

// GCC 12 warns falsely on "literal" + std::string (GCC bug 105651).
#pragma GCC diagnostic ignored "-Wrestrict"

namespace pmhash::testing {
namespace {

using Kind = pm::CrashSim::ImageKind;

// PMHASH_ALLOC_FAULTS: the share of failure points given the full check and crash images,
// "all" for every one (and the scripts at full length, the pool running full at 16
// points of each); default 1 in 32, scripts at half length. The test's seed (TestSeeds,
// PMHASH_SEED) draws the scripts and that sample.
constexpr double kDefaultCheckRate = 1.0 / 32;
double CheckRate() {
  const char* s = std::getenv("PMHASH_ALLOC_FAULTS");
  if (s == nullptr) return kDefaultCheckRate;
  if (std::string(s) == "all") return 1;
  const double r = std::atof(s);
  return r > 0 && r <= 1 ? r : kDefaultCheckRate;
}

struct FaultTally {
  uint64_t points = 0;    // attempts whose armed allocation failed
  uint64_t refused = 0;   // ... that returned PoolFull
  uint64_t absorbed = 0;  // ... that completed all the same
  uint64_t replays = 0;   // indexes rebuilt to undo an absorbed attempt
  uint64_t checked = 0;   // points given the full check
  uint64_t images = 0;    // crash images recovered and checked
  std::string failure;    // "" if every check passed

  void Add(const FaultTally& o) {
    points += o.points, refused += o.refused, absorbed += o.absorbed;
    replays += o.replays, checked += o.checked, images += o.images;
    if (failure.empty()) failure = o.failure;
  }
};

// How a run fails allocations.
enum class FaultMode : uint8_t {
  kOneShot,  // sweep: allocation k of an op alone
  kSticky,   // sweep: allocation k of an op and every later one of it
  kRunsFull,  // allocation k of the whole script and every later one (the pool ran full),
              // counting only blocks of a minimum size (the pool has room for smaller ones)
};

const char* FaultModeName(FaultMode m) {
  return m == FaultMode::kOneShot ? "one-shot" : m == FaultMode::kSticky ? "sticky" : "runs-full";
}

class FaultRun {
 public:
  // kRunsFull: the pool runs full for blocks of at least `min_size` bytes at allocation
  // `full_at` of the script (counting those blocks only).
  FaultRun(const EngineSpec& spec, const Script& script, FaultMode mode, double check_rate,
           uint64_t seed, uint64_t full_at = 0, size_t min_size = 0)
      : spec_(spec), script_(script), mode_(mode), check_rate_(check_rate), full_at_(full_at),
        min_size_(min_size), rng_(seed) {
    options_.initial_capacity = script.initial_capacity;
    options_.pool_size = spec.test.crash_pool_size;
    options_.count_stats = false;
    options_.engine_options = spec.test.crash_options;
  }
  ~FaultRun() { Drop(); }

  FaultTally Go() {
    if (!Rebuild(0)) return tally_;
    if (mode_ == FaultMode::kRunsFull) faults_.Arm(full_at_, /*sticky=*/true, min_size_);
    for (op_ = 0; op_ < script_.ops.size() && tally_.failure.empty(); ++op_) {
      if (mode_ == FaultMode::kRunsFull) {
        (void)Attempt();
      } else {
        Sweep();
      }
    }
    if (tally_.failure.empty()) {
      const std::string err = FullCheck(model_);
      if (!err.empty()) Fail("after the script: " + err);
    }
    if (tally_.failure.empty()) SweepClose();
    return tally_;
  }

  // The allocations (of at least min_size bytes) a run of the script without failures
  // makes.
  uint64_t CountAllocations() {
    if (!Rebuild(0)) return 0;
    faults_.Arm(0, false, min_size_);
    for (const Op& op : script_.ops) (void)ApplyToIndex(op, index_.get());
    WaitForBackgroundWork(index_.get());
    return faults_.seen();
  }

  const std::string& failure() const { return tally_.failure; }

 private:
  enum class Outcome : uint8_t { kAsUsual, kRefused, kAbsorbed };

  void Fail(const std::string& what) {
    if (!tally_.failure.empty()) return;
    const std::string where =
        op_ < script_.ops.size() ? ", op #" + std::to_string(op_) + " " + Describe(script_.ops[op_])
                                 : std::string(", Close");
    const std::string which =
        mode_ == FaultMode::kRunsFull
            ? " from allocation #" + std::to_string(full_at_) + " of the script on (blocks of " +
                  std::to_string(min_size_) + " bytes or more)"
            : ", allocation #" + std::to_string(k_) + " of the op failed";
    tally_.failure = "engine " + spec_.name + ", script " + script_.name + ", " +
                     FaultModeName(mode_) + " failures" + which + where + ": " + what;
  }
  bool Sample() { return std::uniform_real_distribution<double>(0, 1)(rng_) < check_rate_; }

  void Drop() {
    if (index_ != nullptr) SetAllocationFaults(index_.get(), nullptr);
    Abandon(&index_);
    sim_.reset();
  }

  // A fresh index under a crash simulator holding ops [0, upto) of the script, replayed
  // with no failure; the model follows.
  bool Rebuild(size_t upto) {
    Drop();
    model_.clear();
    std::unique_ptr<pm::Pool> pool;
    Status s = NewDramPool(spec_, options_.pool_size, &pool);
    if (s.ok()) {
      sim_ = std::make_unique<pm::CrashSim>(pool->base(), pool->size(), PersistMode::kAdr);
      s = OpenOnPool(spec_, std::move(pool), true, options_, sim_.get(), &index_);
    }
    if (!s.ok()) {
      Fail("cannot create the index: " + s.ToString());
      return false;
    }
    for (size_t i = 0; i < upto; ++i) {
      const Op& op = script_.ops[i];
      const Status want = ApplyToModel(op, &model_);
      const Status got = ApplyToIndex(op, index_.get());
      if (got.code() != want.code()) {
        Fail("replaying op #" + std::to_string(i) + " " + Describe(op) + " returned " +
             got.ToString());
        return false;
      }
    }
    WaitForBackgroundWork(index_.get());
    SetAllocationFaults(index_.get(), &faults_);
    return true;
  }

  // Every allocation point of op_ in turn.
  void Sweep() {
    for (k_ = 1; tally_.failure.empty(); ++k_) {
      faults_.Arm(k_, mode_ == FaultMode::kSticky);
      const Outcome outcome = Attempt();
      faults_.Arm(0, false);
      if (!tally_.failure.empty() || outcome == Outcome::kAsUsual) return;
      if (outcome == Outcome::kAbsorbed) {
        // Undo the op, to fail its later allocations and, at last, let it run with none
        // failing (what it gave up, a growth, say, happens then as in a run without
        // failures; otherwise every later op would find it to do again and give it up).
        ++tally_.replays;
        if (!Rebuild(op_)) return;
      }
    }
  }

  // Runs op_ once with faults_ as armed (and, at sampled attempts of crash-consistent
  // engines, a crash at each of its fences) and judges it: an op none of whose
  // allocations failed returns what the model says; one that lost an allocation either
  // returns PoolFull with the index unchanged, or completes. model_ follows.
  Outcome Attempt() {
    const Op& op = script_.ops[op_];
    const uint64_t failed_before = faults_.failed();
    const bool crash_points = spec_.crash_consistent && Sample();
    durable_after_ = false;
    if (crash_points) {
      sim_->SetHook([&](pm::CrashSim& sim, pm::CrashSim::Event) { CrashDuringOp(sim, op); }, 0,
                    rng_());
    }
    const Status got = ApplyToIndex(op, index_.get());
    WaitForBackgroundWork(index_.get());
    if (crash_points) sim_->SetHook({}, 0, 0);
    const bool fired = faults_.failed() > failed_before;
    Model after = model_;
    const Status want = ApplyToModel(op, &after);
    if (!fired) {
      if (got.code() != want.code()) {
        Fail("with no allocation failing it returned " + got.ToString() + ", expected " +
             std::string(Status::CodeName(want.code())));
      }
      model_ = std::move(after);
      return Outcome::kAsUsual;
    }
    ++tally_.points;
    if (got.ok()) {
      ++tally_.absorbed;
      if (!want.ok()) Fail("it returned OK where the model says " + want.ToString());
      CheckAfterFailure(after, "completed in spite of the failure", /*always=*/true);
      model_ = std::move(after);
      return Outcome::kAbsorbed;
    }
    ++tally_.refused;
    if (!got.IsResourceExhausted() || !got.IsPoolFull()) {
      Fail("it returned " + got.ToString() + ", not ResourceExhausted (PoolFull)");
    } else if (!want.ok()) {
      Fail("it returned " + got.ToString() + " where the model says " + want.ToString() +
           " (an op that changes nothing should not allocate)");
    } else if (durable_after_) {
      Fail("it was refused, but a crash during it had recovered it done (a durable change "
           "rolled back)");
    }
    CheckAfterFailure(model_, "refused", /*always=*/false);
    return Outcome::kRefused;
  }

  // Close at the end of the script with each of its allocations failing in turn (smartht
  // saves its filter in a new block; kRunsFull: with the pool still full): OK, or
  // PoolFull leaving the pool to recovery; the durable state holds the model either way,
  // and after an OK reopens without recovery.
  void SweepClose() {
    for (k_ = 1; tally_.failure.empty(); ++k_) {
      if (index_ == nullptr && !Rebuild(script_.ops.size())) return;
      // After Arm, which resets the count: a Close whose k-th allocation fails (k > 1)
      // would otherwise look as if nothing had fired.
      if (mode_ != FaultMode::kRunsFull) faults_.Arm(k_, mode_ == FaultMode::kSticky);
      const uint64_t failed_before = faults_.failed();
      const Status s = index_->Close();
      const bool fired = faults_.failed() > failed_before;
      index_.reset();
      if (fired) {
        ++tally_.points;
        ++(s.ok() ? tally_.absorbed : tally_.refused);
      }
      if (!s.ok() && !(fired && s.IsPoolFull())) return Fail("Close returned " + s.ToString());
      for (Kind kind : {Kind::kNone, Kind::kAll}) {
        const std::string err = RecoverImage(*sim_, kind, model_, nullptr, nullptr, s.ok());
        if (!err.empty()) {
          return Fail("the reopen after Close returned " + s.ToString() + ": " + err);
        }
      }
      if (!fired || mode_ == FaultMode::kRunsFull) return;
    }
  }

  // After an attempt whose allocation failed: the index holds `model`. Always its count;
  // everything else (contents, leaks, invariants) `always` (an attempt that completed:
  // the index it changed is then replaced, and what it got wrong with it) or at sampled
  // points, where crash images of the moment must recover to `model` too. A refused
  // attempt's harm stays in the index and is found by a later check.
  void CheckAfterFailure(const Model& model, const std::string& outcome, bool always) {
    if (!tally_.failure.empty()) return;
    if (index_->Count() != model.size()) {
      return Fail(outcome + ", Count() is " + std::to_string(index_->Count()) + ", expected " +
                  std::to_string(model.size()));
    }
    const bool images = Sample();
    if (!images && !always) return;
    ++tally_.checked;
    std::string err = FullCheck(model);
    for (Kind kind : {Kind::kNone, Kind::kAll, Kind::kRandom}) {
      if (!err.empty() || !images) break;
      err = RecoverImage(*sim_, kind, model, nullptr);
      if (!err.empty()) err = "a crash right after: " + err;
    }
    if (!err.empty()) Fail(outcome + ", then " + err);
  }

  // The live index holds exactly `model`, no block leaked, invariants hold.
  std::string FullCheck(const Model& model) {
    std::string err = CheckIndex(index_.get(), model, nullptr);
    if (err.empty()) err = CheckInvariantsOf(index_.get());
    return err;
  }

  // A crash point inside the attempt: the op may have happened or not; once a durable
  // image showed it done, it must not be refused.
  void CrashDuringOp(pm::CrashSim& sim, const Op& op) {
    if (!tally_.failure.empty()) return;
    for (Kind kind : {Kind::kNone, Kind::kRandom}) {
      bool done = false;
      const std::string err = RecoverImage(sim, kind, model_, &op, &done);
      if (!err.empty()) return Fail("a crash during the attempt: " + err);
      if (kind == Kind::kNone && done) durable_after_ = true;
    }
  }

  // Recovers a `kind` image of the simulator's moment and checks it against `model`
  // (with `inflight` all-or-nothing); *done: whether it shows the inflight op done.
  // `clean`: the pool was closed cleanly, so the open must not run recovery.
  std::string RecoverImage(pm::CrashSim& sim, Kind kind, const Model& model, const Op* inflight,
                           bool* done = nullptr, bool clean = false) {
    std::unique_ptr<pm::Pool> image;
    pm::PersistObserver* tracker = nullptr;
    Status s = sim.MakePool(kind, rng_, spec_.name, &image, &tracker);
    std::unique_ptr<Index> recovered;
    if (s.ok()) s = OpenOnPool(spec_, std::move(image), false, options_, tracker, &recovered);
    ++tally_.images;
    std::string err = s.ok() ? "" : "recovery failed: " + s.ToString();
    if (err.empty() && clean && recovered->Stats().recovered) err = "a clean pool ran recovery";
    if (err.empty()) err = CheckIndex(recovered.get(), model, inflight);
    if (err.empty()) err = CheckInvariantsOf(recovered.get());
    if (err.empty() && done != nullptr && inflight != nullptr) {
      Model settled = Settle(recovered.get(), model, inflight);
      Model after = model;
      *done = ApplyToModel(*inflight, &after).ok() && settled == after && after != model;
    }
    Abandon(&recovered);
    return err.empty() ? "" : std::string(pm::CrashImageKindName(kind)) + " image: " + err;
  }

  const EngineSpec& spec_;
  const Script& script_;
  const FaultMode mode_;
  const double check_rate_;
  const uint64_t full_at_;
  const size_t min_size_;
  std::mt19937_64 rng_;
  Options options_;
  pm::AllocationFaults faults_;
  std::unique_ptr<pm::CrashSim> sim_;  // outlives index_ (Drop)
  std::unique_ptr<Index> index_;
  Model model_;
  size_t op_ = 0;
  uint64_t k_ = 0;
  bool durable_after_ = false;
  FaultTally tally_;
};

class AllocationFailure : public ::testing::TestWithParam<std::string> {};

// The scripts drawn from `seed`, at `scale`, plus `skewed` again with out-of-line values:
// records whose chains grow, so a chain bucket that cannot be had must give back the
// record already written for it.
std::vector<Script> Scripts(uint64_t seed, double scale) {
  std::vector<Script> scripts = StandardScripts(seed, scale);
  for (const Script& s : scripts) {
    if (s.name != "skewed") continue;
    Script records = s;
    records.name = "skewed-records";
    for (Op& op : records.ops) {
      if (op.kind != Op::kDelete) op.value.resize(24, 'r');
    }
    scripts.push_back(std::move(records));
    break;
  }
  return scripts;
}

TEST_P(AllocationFailure, EveryAllocationPointOfTheScriptsFailsCleanly) {
  const EngineSpec spec = FindSpec(GetParam());
  const double rate = CheckRate();
  for (const uint64_t seed : TestSeeds({42})) {
    SCOPED_TRACE(SeedNote(seed));
    FaultTally total;
    const std::vector<Script> scripts = Scripts(seed, rate >= 1 ? 1 : 0.5);
    ASSERT_EQ(scripts.back().name, "skewed-records");
    for (const Script& script : scripts) {
      for (FaultMode mode : {FaultMode::kOneShot, FaultMode::kSticky}) {
        FaultTally t = FaultRun(spec, script, mode, rate, seed).Go();
        EXPECT_EQ(t.failure, "");
        total.Add(t);
      }
      // The pool runs full halfway through the script (all: at 16 points) and stays
      // full: for every block, or only for blocks of 128 bytes or more (tables, PAB blocks
      // and long records fail; short records and 64-byte chain buckets still fit).
      for (size_t min_size : {size_t{0}, size_t{128}}) {
        FaultRun counter(spec, script, FaultMode::kRunsFull, rate, seed, 0, min_size);
        const uint64_t allocations = counter.CountAllocations();
        ASSERT_EQ(counter.failure(), "");
        const int points = rate >= 1 ? 16 : 1;
        for (int j = 1; j <= points && allocations > 0; ++j) {
          const uint64_t at = 1 + allocations * j / (points + 1);
          FaultTally t =
              FaultRun(spec, script, FaultMode::kRunsFull, rate, seed + j, at, min_size).Go();
          EXPECT_EQ(t.failure, "");
          total.Add(t);
        }
      }
    }
    std::printf("%s: %llu allocation failures (%llu refused, %llu completed anyway, %llu "
                "replays), %llu fully checked, %llu crash images (check rate %g, seed %llu)\n",
                spec.name.c_str(), static_cast<unsigned long long>(total.points),
                static_cast<unsigned long long>(total.refused),
                static_cast<unsigned long long>(total.absorbed),
                static_cast<unsigned long long>(total.replays),
                static_cast<unsigned long long>(total.checked),
                static_cast<unsigned long long>(total.images), rate,
                static_cast<unsigned long long>(seed));
    EXPECT_GT(total.refused, 0u) << "no allocation failure reached an operation";
    EXPECT_GT(total.checked, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, AllocationFailure,
                         ::testing::ValuesIn(Names(ConformanceEngines())),
                         [](const auto& info) { return GtestName(info.param); });

}  // namespace
}  // namespace pmhash::testing
