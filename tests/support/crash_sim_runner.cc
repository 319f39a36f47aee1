#include "support/crash_sim_runner.h"

#include <cstdio>
#include <mutex>
#include <optional>
#include <random>

#include "util/hash.h"
#include "pm/crashsim.h"

// GCC 12 warns falsely on "literal" + std::string (GCC bug 105651).
#pragma GCC diagnostic ignored "-Wrestrict"

namespace pmhash::testing {
namespace {

std::mutex counts_mu;
std::map<std::string, uint64_t>& Counts() {
  static auto* m = new std::map<std::string, uint64_t>;
  return *m;
}

std::string ScrambledKey8(uint64_t i) {
  std::string k(8, '\0');
  for (int b = 0; b < 8; ++b) k[b] = static_cast<char>((i * 0x9e3779b97f4a7c15ull) >> (8 * b));
  return k;
}

std::string Value(std::mt19937_64& rng, size_t len, uint64_t tag) {
  std::string v(len, '\0');
  uint64_t x = tag * 0x2545f4914f6cdd1dull + rng();
  for (size_t i = 0; i < len; ++i) {
    v[i] = static_cast<char>(x >> (8 * (i % 8)));
    if (i % 8 == 7) x = x * 6364136223846793005ull + 1442695040888963407ull;
  }
  return v;
}

// Keys that land in one bucket of most designs: equal low 8 and high 4 hash bits.
std::vector<std::string> SkewedKeys(size_t n, uint64_t seed) {
  std::vector<std::string> out;
  std::mt19937_64 rng(seed);
  while (out.size() < n) {
    std::string k = ScrambledKey8(rng());
    const uint64_t h = HashKey(k, kTestHashSeed);
    if ((h & 0xff) == 0x5a && (h >> 60) == 0x3) out.push_back(k);
  }
  return out;
}

}  // namespace

void AddImages(const std::string& engine, uint64_t n) {
  std::lock_guard<std::mutex> l(counts_mu);
  Counts()[engine] += n;
}

std::map<std::string, uint64_t> ImageCounts() {
  std::lock_guard<std::mutex> l(counts_mu);
  return Counts();
}

std::vector<Script> StandardScripts(uint64_t seed, double scale) {
  auto n = [&](size_t base) { return static_cast<size_t>(base * scale); };
  std::mt19937_64 rng(seed);
  std::vector<Script> scripts;

  // Inline inserts from a tiny table: every resize / split / doubling, then updates.
  Script grow{"grow", {}, 16};
  for (size_t i = 0; i < n(300); ++i) grow.ops.push_back({Op::kInsert, ScrambledKey8(i), Value(rng, 8, i)});
  for (size_t i = 0; i < n(60); ++i) {
    grow.ops.push_back({Op::kUpdate, ScrambledKey8(rng() % n(300)), Value(rng, 8, i)});
  }
  scripts.push_back(std::move(grow));

  // Skewed keys hammering one bucket: overflow, splits, moves; deletes and re-inserts.
  Script skew{"skewed", {}, 16};
  std::vector<std::string> keys = SkewedKeys(n(160), seed);
  for (size_t i = 0; i < keys.size(); ++i) skew.ops.push_back({Op::kInsert, keys[i], Value(rng, 8, i)});
  for (size_t i = 0; i < keys.size(); i += 3) skew.ops.push_back({Op::kDelete, keys[i], ""});
  for (size_t i = 0; i < keys.size(); i += 3) {
    skew.ops.push_back({Op::kInsert, keys[i], Value(rng, 8, i + 1)});
  }
  scripts.push_back(std::move(skew));

  // Mixed operations and sizes over a small key space: inline and out-of-line keys and
  // values, inline <-> record transitions, empty and binary keys, failing calls.
  Script mixed{"mixed", {}, 16};
  std::vector<std::string> space;
  for (int i = 0; i < 90; ++i) space.push_back(ScrambledKey8(1000 + i));
  for (int i = 0; i < 30; ++i) space.push_back(std::string("k").append(std::to_string(i)));
  space.push_back("");
  space.push_back(std::string("\0", 1));
  space.push_back(std::string("a\0b", 3));
  space.push_back(std::string(300, 'L'));
  for (size_t i = 0; i < n(700); ++i) {
    const std::string& k = space[rng() % space.size()];
    const size_t r = rng() % 10;
    const size_t vlen = r < 6 ? 8 : r < 8 ? 1 + rng() % 40 : 100 + rng() % 500;
    const auto kind = static_cast<Op::Kind>(rng() % 4);
    mixed.ops.push_back({kind, k, kind == Op::kDelete ? "" : Value(rng, vlen, i)});
  }
  scripts.push_back(std::move(mixed));

  // Churn: fill, empty, refill (tombstones, freed blocks reused).
  Script churn{"churn", {}, 64};
  for (size_t i = 0; i < n(150); ++i) churn.ops.push_back({Op::kInsert, ScrambledKey8(5000 + i), Value(rng, 8, i)});
  for (size_t i = 0; i < n(150); ++i) churn.ops.push_back({Op::kDelete, ScrambledKey8(5000 + i), ""});
  for (size_t i = 0; i < n(150); ++i) {
    churn.ops.push_back({Op::kPut, ScrambledKey8(5000 + i), Value(rng, i % 2 ? 8 : 24, i)});
  }
  scripts.push_back(std::move(churn));

  // Reuse: out-of-line keys and values of one size (one record size class); each delete
  // is followed by an insert, and updates and insert-delete pairs come in between, so
  // the allocator hands the block just freed out again at once.
  Script reuse{"reuse", {}, 64};
  auto reuse_key = [](size_t i) { return "reuse-" + std::to_string(100000 + i); };  // 12 B
  const size_t live = 24;
  for (size_t i = 0; i < live; ++i) {
    reuse.ops.push_back({Op::kInsert, reuse_key(i), Value(rng, 40, i)});
  }
  for (size_t i = 0; i < n(60); ++i) {
    reuse.ops.push_back({Op::kDelete, reuse_key(i), ""});
    reuse.ops.push_back({Op::kInsert, reuse_key(live + i), Value(rng, 40, i)});
    if (i % 3 == 0) {  // a live key (those below i + 1 are deleted)
      reuse.ops.push_back({Op::kUpdate, reuse_key(live + i - rng() % live), Value(rng, 40, i)});
      reuse.ops.push_back({Op::kInsert, reuse_key(1000000 + i), Value(rng, 40, i)});
      reuse.ops.push_back({Op::kDelete, reuse_key(1000000 + i), ""});
    }
  }
  scripts.push_back(std::move(reuse));
  return scripts;
}

namespace {

using Kind = pm::CrashSim::ImageKind;

// One script run: the index under test, the model, the crash hook.
class Run {
 public:
  Run(const EngineSpec& spec, const Script& script, const RunConfig& config)
      : spec_(spec), script_(script), config_(config), rng_(config.seed) {
    options_.persist = config.mode;
    options_.initial_capacity = script.initial_capacity;
    options_.pool_size = config.pool_size != 0 ? config.pool_size : spec.test.crash_pool_size;
    options_.count_stats = false;
    options_.engine_options = spec.test.crash_options;
  }

  RunResult Go() {
    // The working pool outlives every index opened on it (Close unmaps an index's own
    // pool): the engine gets an adopted view, so the simulator can watch a Close and the
    // clean reopen after it.
    Status s = NewDramPool(spec_, options_.pool_size, &working_);
    if (!s.ok()) return Fail("cannot create a DRAM pool: " + s.ToString());
    pm::CrashSim sim(working_->base(), working_->size(), config_.mode);
    auto hook = [this](pm::CrashSim& sim, pm::CrashSim::Event e) { CrashPoint(sim, e); };
    const bool crash_creation = config_.crash_points && config_.crash_creation;
    if (crash_creation) sim.SetHook(hook, config_.store_rate, config_.seed);
    std::unique_ptr<Index> index;
    s = OpenWorking(&sim, /*fresh=*/true, &index);
    if (!s.ok()) return Fail("cannot create the index: " + s.ToString());
    WaitForBackgroundWork(index.get());
    if (crash_creation) sim.CrashNow();  // created: an empty index from here on
    stage_ = Stage::kScript;
    if (config_.crash_points && !crash_creation) sim.SetHook(hook, config_.store_rate, config_.seed);
    if (config_.crash_points) sim.CrashAtOpEnds(config_.crash_at_op_ends);
    RunOps(sim, index.get(), script_.ops);
    sim.SetHook({}, 0, 0);
    if (result_.failure.empty()) CheckBypass(sim, "at the end");
    const pm::CrashSim::Counters c = sim.counters();
    result_.redundant_flushes = c.redundant_flushes;
    result_.redundant_fences = c.redundant_fences;
    if (result_.failure.empty() && c.outside_stores > 0) {
      char where[32];
      std::snprintf(where, sizeof(where), "%p", sim.first_outside_store());
      Fail(std::to_string(c.outside_stores) +
           " stores through the pool's Persister fell outside the pool (first at " + where +
           "): DRAM data does not need the Persister, and another pool's stores are lost");
    }
    if (result_.failure.empty()) {
      std::string err = CheckIndex(index.get(), model_, nullptr);
      if (err.empty()) err = CheckInvariantsOf(index.get());
      if (!err.empty()) Fail("live index after the script: " + err);
    }
    result_.engine_counters = index->Stats().engine_counters;
    if (config_.crash_points && config_.crash_close && result_.failure.empty()) {
      sim.SetHook(hook, config_.store_rate, config_.seed + 1);
      CloseAndReopen(sim, &index);
      sim.SetHook({}, 0, 0);
    }
    Abandon(&index);
    return result_;
  }

 private:
  // Where the run is: the crash points of each stage are checked against the model the
  // same way; the stage names them in a failure.
  enum class Stage : uint8_t {
    kCreate,    // OpenOnPool(fresh)
    kScript,    // the script's ops
    kClose,     // inside Close()
    kClosed,    // Close returned
    kReopen,    // inside the clean reopen
    kReopened,  // the reopen returned
    kTail,      // the writes after the clean reopen
  };

  std::string StageText() const {
    const std::string close = "Close #" + std::to_string(close_round_);
    switch (stage_) {
      case Stage::kCreate: return "creating the index";
      case Stage::kScript: return "op #" + std::to_string(op_index_);
      case Stage::kClose: return "in " + close;
      case Stage::kClosed: return "after " + close + " returned";
      case Stage::kReopen: return "in the clean reopen after " + close;
      case Stage::kReopened: return "after the clean reopen returned";
      case Stage::kTail: return "op #" + std::to_string(op_index_) + " after the clean reopen";
    }
    return "?";
  }

  RunResult Fail(const std::string& what) {
    if (result_.failure.empty()) {
      result_.failure = "engine " + spec_.name + ", script " + script_.name + ", mode " +
                        PersistModeName(config_.mode) + ", seed " + std::to_string(config_.seed) +
                        ", " + StageText() + ": " + what;
    }
    return result_;
  }

  // An index of the working pool (fresh: create it), every store observed by `sim`.
  Status OpenWorking(pm::CrashSim* sim, bool fresh, std::unique_ptr<Index>* index) {
    std::unique_ptr<pm::Pool> pool;
    PMHASH_RETURN_IF_ERROR(pm::Pool::Adopt(working_->base(), working_->size(), spec_.name, &pool));
    return OpenOnPool(spec_, std::move(pool), fresh, options_, sim, index);
  }

  // Runs `ops` on the live index; once each is acknowledged, a crash point.
  void RunOps(pm::CrashSim& sim, Index* index, const std::vector<Op>& ops) {
    for (op_index_ = 0; op_index_ < ops.size() && result_.failure.empty(); ++op_index_) {
      const Op& op = ops[op_index_];
      StartOp(op);
      Status got = ApplyToIndex(op, index);
      // Work the op started in the background (a refill) may reach the hook from its own
      // thread: it runs with the op still in flight, and ends before the model changes.
      WaitForBackgroundWork(index);
      inflight_ = nullptr;
      durable_after_ = false;
      Status want = ApplyToModel(op, &model_);
      if (got.code() != want.code()) {
        Fail(Describe(op) + " returned " + got.ToString() + ", expected " +
             std::string(Status::CodeName(want.code())));
        break;
      }
      // The op is acknowledged: it must survive a crash from here on. This crash point
      // also looks for stores that bypassed the Persister.
      sim.CrashNow();
    }
  }

  // Close with the crash hook on (a crash point at each of its fences and sampled
  // stores), then one right after it returns: by then everything Close wrote must be
  // durable, and that image must open without recovery. Then the clean reopen with the
  // hook on (its fences, and right after it returns), writes that free and reuse blocks
  // and add keys, and a second Close the same way: a wrong order there leaves the first
  // Close's state (still valid on its own) behind rather than an empty area. Every image
  // recovers to the model.
  void CloseAndReopen(pm::CrashSim& sim, std::unique_ptr<Index>* index) {
    const uint64_t images_before = result_.images;
    for (close_round_ = 1; close_round_ <= 2 && result_.failure.empty(); ++close_round_) {
      stage_ = Stage::kClose;
      Status s = (*index)->Close();
      index->reset();
      if (!s.ok()) {
        Fail("Close failed: " + s.ToString());
        break;
      }
      stage_ = Stage::kClosed;
      sim.CrashNow();
      if (result_.failure.empty() && sim.PendingUnits() > 0) {
        std::string lines;
        for (uint64_t off : sim.PendingLineOffsets(4)) lines += " " + std::to_string(off);
        Fail(std::to_string(sim.PendingUnits()) + " stores in " +
             std::to_string(sim.PendingLines()) +
             " cache lines are not durable although Close returned (a power failure now "
             "loses them from a pool marked clean); lines at pool offsets" + lines);
      }
      if (close_round_ == 2 || !result_.failure.empty()) break;
      stage_ = Stage::kReopen;
      s = OpenWorking(&sim, /*fresh=*/false, index);
      if (!s.ok()) {
        Fail("the clean reopen failed: " + s.ToString());
        break;
      }
      WaitForBackgroundWork(index->get());
      stage_ = Stage::kReopened;
      sim.CrashNow();
      std::string err = (*index)->Stats().recovered ? "it ran recovery" : "";
      if (err.empty()) err = CheckIndex(index->get(), model_, nullptr);
      if (err.empty()) err = CheckInvariantsOf(index->get());
      if (!err.empty()) Fail("the index after a clean Close and reopen: " + err);
      stage_ = Stage::kTail;
      RunOps(sim, index->get(), TailOps());
    }
    result_.close_images += result_.images - images_before;
  }

  // The writes between the clean reopen and the second Close: deletes of every fourth
  // key (their blocks freed), then fresh keys of the scripts' sizes (blocks reused; keys
  // the first Close's saved state never saw).
  std::vector<Op> TailOps() {
    std::vector<Op> ops;
    size_t i = 0;
    for (auto it = model_.begin(); it != model_.end() && ops.size() < 6; ++it, ++i) {
      if (i % 4 == 0) ops.push_back({Op::kDelete, it->first, ""});
    }
    static constexpr size_t kValueLens[] = {8, 24, 100, 8, 0, 600};
    for (size_t j = 0; j < 12; ++j) {
      std::string key = j % 3 == 0 ? ScrambledKey8(900000 + j) : "reopened-" + std::to_string(j);
      ops.push_back({Op::kInsert, std::move(key), Value(rng_, kValueLens[j % 6], j)});
    }
    return ops;
  }

  void CheckBypass(pm::CrashSim& sim, const char* where) {
    Status s = sim.FindBypass();
    if (!s.ok()) Fail(std::string(where) + ": " + s.ToString());
  }

  // The interrupted op and the states it may leave its key in.
  void StartOp(const Op& op) {
    inflight_ = &op;
    durable_after_ = false;
    Model one;
    auto it = model_.find(op.key);
    if (it != model_.end()) one.insert(*it);
    const std::optional<std::string> before =
        it == model_.end() ? std::nullopt : std::optional<std::string>(it->second);
    after_ = before;
    if (ApplyToModel(op, &one).ok()) {
      auto jt = one.find(op.key);
      after_ = jt == one.end() ? std::nullopt : std::optional<std::string>(jt->second);
    }
    changes_ = after_ != before;
  }

  // What an image is checked against. Once durable state (a `none` image) has shown the
  // interrupted op done, every later image must keep it: a later crash that undid it
  // (an undo log rolling back an op whose commit was already durable) could lose a
  // value a reader had returned.
  const Model& CheckModel() const { return durable_after_ ? model_after_ : model_; }
  const Op* CheckInflight() const { return durable_after_ ? nullptr : inflight_; }

  void CrashPoint(pm::CrashSim& sim, pm::CrashSim::Event event) {
    if (!result_.failure.empty()) return;
    const char* where = event == pm::CrashSim::Event::kFence   ? "at a fence"
                        : event == pm::CrashSim::Event::kStore ? "after a store"
                        : event == pm::CrashSim::Event::kOpEnd ? "at an operation's end"
                        : stage_ == Stage::kCreate             ? "after creation returned"
                        : stage_ == Stage::kClosed             ? "after Close returned"
                        : stage_ == Stage::kReopened           ? "after the reopen returned"
                                                               : "after the op returned";
    if (event == pm::CrashSim::Event::kOpEnd) ++result_.op_end_points;
    // A pool closed cleanly opens without recovery, whatever the crash kept.
    const bool expect_clean = stage_ == Stage::kClosed;
    if (event == pm::CrashSim::Event::kManual &&
        (stage_ != Stage::kScript || ++acknowledged_ % BypassCheckEvery() == 0)) {
      CheckBypass(sim, where);
      if (!result_.failure.empty()) return;
    }
    std::vector<Kind> kinds = {Kind::kNone};
    if (sim.PendingUnits() > 0) {
      kinds.push_back(Kind::kAll);
      for (int i = 0; i < config_.random_images; ++i) kinds.push_back(Kind::kRandom);
    }
    for (Kind kind : kinds) {
      const uint64_t image_seed = rng_();
      std::mt19937_64 image_rng(image_seed);
      const bool nested =
          std::uniform_real_distribution<double>(0, 1)(rng_) < config_.recovery_crash_rate;
      std::unique_ptr<pm::Pool> image;
      pm::PersistObserver* tracker = nullptr;  // a nested run observes the image itself
      Status s = sim.MakePool(kind, image_rng, spec_.name, &image, nested ? nullptr : &tracker);
      std::string err = s.ok() ? "" : "cannot build the image: " + s.ToString();
      bool shows_after = false;
      if (err.empty()) {
        err = CheckImage(std::move(image), nested, tracker, expect_clean, &shows_after);
      }
      if (!err.empty()) {
        if (durable_after_) {
          err += "; the interrupted op " + Describe(*inflight_) +
                 " had already shown in durable state (a none image) at an earlier crash "
                 "point, so it must not be undone now";
        }
        Fail(std::string("crash ") + where + ", image " + pm::CrashImageKindName(kind) +
             " (image seed " + std::to_string(image_seed) + "): " + err);
        return;
      }
      if (kind == Kind::kNone && shows_after && !durable_after_) {
        durable_after_ = true;
        ++result_.durable_inflight;
        model_after_ = model_;
        (void)ApplyToModel(*inflight_, &model_after_);
      }
    }
  }

  // Recovers an image and checks it; with `nested`, also crashes that recovery at its
  // fences, at sampled stores and right after it returns, and checks those images.
  std::string CheckImage(std::unique_ptr<pm::Pool> image, bool nested,
                         pm::PersistObserver* tracker, bool expect_clean, bool* shows_after) {
    std::unique_ptr<pm::CrashSim> rsim;
    std::string nested_err;
    if (nested) {
      ++result_.crashed_recoveries;
      rsim = std::make_unique<pm::CrashSim>(image->base(), image->size(), config_.mode);
      rsim->SetHook(
          [&](pm::CrashSim& sim, pm::CrashSim::Event event) {
            if (!nested_err.empty()) return;
            ++result_.recovery_crash_points;
            const char* where = event == pm::CrashSim::Event::kFence   ? "at a fence"
                                : event == pm::CrashSim::Event::kStore ? "after a store"
                                                                       : "after it returned";
            for (Kind kind : {Kind::kNone, Kind::kRandom}) {
              std::unique_ptr<pm::Pool> again;
              pm::PersistObserver* again_tracker = nullptr;
              Status s = sim.MakePool(kind, rng_, spec_.name, &again, &again_tracker);
              std::string err =
                  s.ok() ? RecoverAndCheck(std::move(again), nullptr, again_tracker, false,
                                           nullptr)
                         : "cannot build the image: " + s.ToString();
              if (!err.empty()) {
                nested_err = std::string("crash during recovery ") + where + ", image " +
                             pm::CrashImageKindName(kind) + ": " + err;
                return;
              }
            }
          },
          config_.recovery_store_rate, rng_());
    }
    std::string err =
        RecoverAndCheck(std::move(image), rsim.get(), tracker, expect_clean, shows_after);
    return nested_err.empty() ? err : nested_err;
  }

  // Every store into the image goes through `rsim` (a crashed recovery) or else `tracker`
  // (MakePool's page tracker). With `expect_clean` the image must open without recovery.
  std::string RecoverAndCheck(std::unique_ptr<pm::Pool> image, pm::CrashSim* rsim,
                              pm::PersistObserver* tracker, bool expect_clean,
                              bool* shows_after) {
    char* const base = image->base();
    const size_t size = image->size();
    pm::PersistObserver* const observer = rsim != nullptr ? rsim : tracker;
    std::unique_ptr<Index> index;
    Status s = OpenOnPool(spec_, std::move(image), false, options_, observer, &index);
    ++result_.images;
    if (s.ok()) WaitForBackgroundWork(index.get());
    if (rsim != nullptr) {
      if (s.ok()) rsim->CrashNow();  // recovered, nothing acknowledged since
      rsim->SetHook({}, 0, 0);
    }
    if (!s.ok()) return "recovery failed: " + s.ToString();
    if (expect_clean && index->Stats().recovered) {
      Abandon(&index);
      return "the pool was closed cleanly, but opening this image ran recovery";
    }
    const Op* inflight = CheckInflight();
    // The invariants right after recovery, before any search: a broken structure can
    // make searches retry for ever (op_crash.cc, CheckRecovered).
    std::string err = CheckInvariantsOf(index.get());
    if (err.empty()) err = CheckIndex(index.get(), CheckModel(), inflight);
    if (err.empty()) {
      Model settled = Settle(index.get(), CheckModel(), inflight);
      if (shows_after != nullptr && inflight != nullptr && changes_) {
        auto it = settled.find(inflight->key);
        *shows_after = (it == settled.end() ? std::optional<std::string>() : it->second) == after_;
      }
      const bool grow = std::uniform_real_distribution<double>(0, 1)(rng_) < config_.grow_rate;
      err = CheckKeepsWorking(index.get(), &settled, rng_(), grow);
      WaitForBackgroundWork(index.get());
      if (err.empty() && rsim != nullptr) {
        Status b = rsim->FindBypass();
        if (!b.ok()) err = "in the recovered index: " + b.ToString();
      }
      if (err.empty() &&
          std::uniform_real_distribution<double>(0, 1)(rng_) < config_.reopen_rate) {
        err = CloseReopenAndCheck(&index, base, size, observer, settled);
      }
    }
    Abandon(&index);
    return err;
  }

  // A clean Close of the recovered (and further used) index, then a clean open of the
  // same memory: both must work and hold `model`.
  std::string CloseReopenAndCheck(std::unique_ptr<Index>* index, char* base, size_t size,
                                  pm::PersistObserver* observer, const Model& model) {
    Status s = (*index)->Close();
    index->reset();
    if (!s.ok()) return "a clean Close after recovery failed: " + s.ToString();
    std::unique_ptr<pm::Pool> pool;
    s = pm::Pool::Adopt(base, size, spec_.name, &pool);
    if (s.ok()) s = OpenOnPool(spec_, std::move(pool), false, options_, observer, index);
    if (!s.ok()) return "reopening after a clean Close failed: " + s.ToString();
    if ((*index)->Stats().recovered) return "reopening after a clean Close ran recovery";
    std::string err = CheckIndex(index->get(), model, nullptr);
    return err.empty() ? "" : "after a clean Close and reopen: " + err;
  }

  const EngineSpec& spec_;
  const Script& script_;
  const RunConfig config_;
  Options options_;
  std::mt19937_64 rng_;
  Model model_;
  const Op* inflight_ = nullptr;
  std::optional<std::string> after_;  // the interrupted op's key when it is done
  bool changes_ = false;              // ... differs from before it
  bool durable_after_ = false;        // a `none` image showed it done
  Model model_after_;                 // model_ with the op applied (when durable_after_)
  std::unique_ptr<pm::Pool> working_;  // the pool the script runs on
  Stage stage_ = Stage::kCreate;
  uint64_t acknowledged_ = 0;  // the script's ops acknowledged so far (bypass sampling)
  uint64_t BypassCheckEvery() const {
    return SoakFactor() > 1 ? 1 : static_cast<uint64_t>(std::max(1, config_.bypass_check_every));
  }
  int close_round_ = 0;
  size_t op_index_ = 0;
  RunResult result_;
};

}  // namespace

RunResult RunScript(const EngineSpec& spec, const Script& script, const RunConfig& config) {
  RunResult r = Run(spec, script, config).Go();
  AddImages(spec.name, r.images);
  return r;
}

}  // namespace pmhash::testing
