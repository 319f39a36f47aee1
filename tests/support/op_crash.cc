#include "support/op_crash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "pm/crashsim.h"
#include "pm/pool.h"
#include "support/engine_tests.h"
#include "support/test_engines.h"

namespace pmhash::testing {
namespace {

// What is wrong with one recovered image ("" if nothing); its contents go to *got.
// The invariants first: a structure recovery left broken can send searches round a
// retry loop for ever (cceh: a directory entry naming a segment that serves nothing),
// and a failed check is red at once where a hang is red only at a timeout.
std::string CheckRecovered(Index* index, const OpCrashCheck& check, Model* got) {
  if (std::string why = CheckInvariantsOf(index); !why.empty()) return why;
  if (std::string why = Snapshot(*index, got); !why.empty()) return why;
  if (std::string why = CheckIndex(index, *got, nullptr); !why.empty()) return why;
  return check ? check(index) : "";
}

void NoteBad(OpCrashOutcome* out, const std::string& why) {
  ++out->bad;
  if (out->first_bad.empty()) out->first_bad = why;
}

}  // namespace

std::string InsertsAfterRecovery(Index* recovered) {
  if (!recovered->Insert("after recovery", "yes").ok()) return "insert after recovery failed";
  std::string v;
  if (!recovered->Get("after recovery", &v).ok() || v != "yes") {
    return "lost a post-recovery insert";
  }
  if (std::string why = CheckInvariantsOf(recovered); !why.empty()) {
    return "after a new insert: " + why;
  }
  return "";
}

namespace {

// Whether every key of `m` (and every key of the states) has in `m` its value in one of
// `states` (absent counts as a value): each key at some prefix of its own ops.
bool EachKeyAtAState(const Model& m, const std::vector<Model>& states) {
  std::set<std::string> keys;
  for (const auto& [k, v] : m) keys.insert(k);
  for (const Model& st : states) {
    for (const auto& [k, v] : st) keys.insert(k);
  }
  for (const std::string& k : keys) {
    const auto got = m.find(k);
    const bool seen = std::any_of(states.begin(), states.end(), [&](const Model& st) {
      const auto want = st.find(k);
      return want == st.end() ? got == m.end() : got != m.end() && got->second == want->second;
    });
    if (!seen) return false;
  }
  return true;
}

// CrashDuringOp, and CrashDuringBatch when `states` is set: then an image must hold one of
// the models states(before) returns (or, kPerKey, each key as one of them holds it),
// instead of the state before or after the op, and an image made after the op returns
// must hold the last of them.
OpCrashOutcome CrashDuring(const Options& options, const OpCrashSetup& setup,
                           const OpCrashOp& op, const OpCrashCheck& check, double store_rate,
                           const std::function<std::vector<Model>(const Model&)>& states,
                           BatchOrder order = BatchOrder::kPrefix) {
  OpCrashOutcome out;
  const EngineSpec spec = FindSpec(options.engine);
  EXPECT_TRUE(spec.make) << "no engine " << options.engine;
  if (!spec.make) return out;
  // A spec such as `<engine>@degenerate-hash` makes the engine itself: its pools name that.
  Options opts = options;
  if (spec.info != nullptr) opts.engine = spec.info->description.name;
  std::unique_ptr<pm::Pool> pool;
  Status s = NewDramPool(spec, opts.pool_size, &pool);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return out;
  pm::CrashSim sim(pool->base(), pool->size(), opts.persist);
  std::unique_ptr<Index> index;
  s = OpenOnPool(spec, std::move(pool), /*fresh=*/true, opts, &sim, &index);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return out;
  Model before;
  setup(index.get(), &before);
  WaitForBackgroundWork(index.get());
  Model check_setup;
  EXPECT_EQ(Snapshot(*index, &check_setup), "");
  EXPECT_EQ(check_setup, before) << "setup's model is wrong";

  std::vector<Model> not_before;  // compared with the state after op once it is known
  std::mt19937_64 rng(7);
  sim.SetHook(
      [&](pm::CrashSim& at, pm::CrashSim::Event) {
        ++out.crash_points;
        for (auto kind : {pm::CrashSim::ImageKind::kNone, pm::CrashSim::ImageKind::kAll,
                          pm::CrashSim::ImageKind::kRandom, pm::CrashSim::ImageKind::kRandom}) {
          std::unique_ptr<pm::Pool> image;
          Status st = at.MakePool(kind, rng, opts.engine, &image);
          std::unique_ptr<Index> recovered;
          if (st.ok()) {
            st = OpenOnPool(spec, std::move(image), /*fresh=*/false, opts, nullptr,
                            &recovered);
          }
          Model got;
          const std::string why = st.ok() ? CheckRecovered(recovered.get(), check, &got)
                                          : "recovery failed: " + st.ToString();
          ++out.images;
          if (!why.empty()) {
            NoteBad(&out, std::string(pm::CrashImageKindName(kind)) + " image: " + why);
          } else if (got != before) {
            not_before.push_back(std::move(got));
          }
        }
      },
      store_rate, 11);
  const Status op_status = op(index.get());
  WaitForBackgroundWork(index.get());  // background work op started, its crash points too
  sim.SetHook(nullptr, 0, 0);
  EXPECT_TRUE(op_status.ok()) << op_status.ToString();
  Model after;
  EXPECT_EQ(Snapshot(*index, &after), "");
  if (states) {
    const std::vector<Model> allowed = states(before);
    EXPECT_EQ(after, allowed.back()) << "the batch did not end in its last state";
    for (const Model& m : not_before) {
      const bool good = order == BatchOrder::kPrefix
                            ? std::find(allowed.begin(), allowed.end(), m) != allowed.end()
                            : EachKeyAtAState(m, allowed);
      if (!good) {
        NoteBad(&out, order == BatchOrder::kPrefix ? "an image holds no prefix of the batch"
                                                   : "an image holds a key at no prefix of "
                                                     "its ops in the batch");
      }
    }
    // Every acknowledged op durable on return: nothing unflushed written back.
    std::unique_ptr<pm::Pool> image;
    Status st = sim.MakePool(pm::CrashSim::ImageKind::kNone, rng, opts.engine, &image);
    std::unique_ptr<Index> recovered;
    if (st.ok()) {
      st = OpenOnPool(spec, std::move(image), /*fresh=*/false, opts, nullptr, &recovered);
    }
    Model got;
    const std::string why = st.ok() ? CheckRecovered(recovered.get(), check, &got)
                                    : "recovery failed: " + st.ToString();
    ++out.images;
    if (!why.empty()) {
      NoteBad(&out, "the image after the batch returned: " + why);
    } else if (got != after) {
      NoteBad(&out, "the image after the batch returned lacks an acknowledged op");
    }
  } else {
    for (const Model& m : not_before) {
      if (m != after) NoteBad(&out, "an image is neither the old nor the new state");
    }
  }
  EXPECT_TRUE(sim.FindBypass().ok()) << "a store bypassed the Persister";
  return out;
}

}  // namespace

OpCrashOutcome CrashDuringOp(const Options& options, const OpCrashSetup& setup,
                             const OpCrashOp& op, const OpCrashCheck& check,
                             double store_rate) {
  return CrashDuring(options, setup, op, check, store_rate, nullptr);
}

OpCrashOutcome CrashDuringBatch(const Options& options, const OpCrashSetup& setup,
                                const std::vector<WriteOp>& ops, BatchOrder order) {
  return CrashDuring(
      options, setup,
      [&](Index* x) {
        std::vector<Status> statuses(ops.size());
        x->Write(ops, statuses);
        for (const Status& st : statuses) {
          if (!st.ok() && !st.IsNotFound() && !st.IsAlreadyExists()) return st;
        }
        return Status::OK();
      },
      nullptr, 1.0, [&](const Model& before) {
        // The state after each prefix of the batch, each op as its single call.
        std::vector<Model> states = {before};
        Model m = before;
        for (const WriteOp& op : ops) {
          const std::string key(op.key);
          const bool present = m.count(key) != 0;
          switch (op.kind) {
            case WriteOp::Kind::kInsert:
              if (!present) m[key] = std::string(op.value);
              break;
            case WriteOp::Kind::kUpdate:
              if (present) m[key] = std::string(op.value);
              break;
            case WriteOp::Kind::kPut:
              m[key] = std::string(op.value);
              break;
            case WriteOp::Kind::kDelete:
              m.erase(key);
              break;
          }
          states.push_back(m);
        }
        return states;
      },
      order);
}

void ExpectAllOrNothing(const OpCrashOutcome& r, int min_crash_points) {
  EXPECT_GE(r.crash_points, min_crash_points);
  EXPECT_EQ(r.bad, 0) << r.first_bad;
}

void ExpectEachAllOrNothing(const Options& options, const OpCrashSetup& setup,
                            const NamedOps& ops, int min_crash_points,
                            const OpCrashCheck& check) {
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    ExpectAllOrNothing(CrashDuringOp(options, setup, op, check), min_crash_points);
  }
}

void ExpectGrowthAllOrNothing(const Options& options, const OpCrashSetup& setup,
                              const std::string& key, const std::string& growth_counter,
                              int min_crash_points, const OpCrashCheck& check) {
  const OpCrashOutcome r = CrashDuringOp(
      options, setup,
      [&](Index* x) {
        const uint64_t before = Counter(x, growth_counter);
        const Status s = x->Insert(key, "8 bytes!");
        EXPECT_EQ(Counter(x, growth_counter), before + 1) << "the insert did not grow the table";
        return s;
      },
      check);
  ExpectAllOrNothing(r, min_crash_points);
}

NamedOps SlotEncodingOps(const SlotOpKeys& k) {
  return {
      {"inline insert", [k](Index* x) { return x->Insert(k.absent_inline, "8 bytes!"); }},
      {"record insert", [k](Index* x) { return x->Insert(k.absent_record, "a long value"); }},
      {"inline delete", [k](Index* x) { return x->Delete(k.inline_key); }},
      {"record delete", [k](Index* x) { return x->Delete(k.record_key); }},
      {"inline value update", [k](Index* x) { return x->Update(k.inline_key, "77777777"); }},
      {"record update", [k](Index* x) { return x->Update(k.record_key, "newer value"); }},
      {"inline to record update",
       [k](Index* x) { return x->Update(k.inline_key2, "no longer 8 bytes"); }},
  };
}

std::string PersistModeTestName(const ::testing::TestParamInfo<PersistMode>& info) {
  return PersistModeName(info.param);
}

std::string CrashKeyAt(uint64_t i) { return i == 3 ? "a 16-byte key..." : Key8(i); }
std::string CrashValueAt(uint64_t i) {
  return i % 3 == 0 ? "value " + std::to_string(i) : Key8(i * 11);
}

void FillCrashKeys(Index* index, Model* model, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const Status s = index->Insert(CrashKeyAt(i), CrashValueAt(i));
    if (s.IsTableFull()) continue;
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (model != nullptr) (*model)[CrashKeyAt(i)] = CrashValueAt(i);
  }
}

uint64_t KeysBeforeCounterMoves(const Options& options, const std::string& counter,
                                uint64_t limit) {
  auto index = OpenOrDie(options);
  if (index == nullptr) return 0;
  for (uint64_t i = 0; i < limit; ++i) {
    const uint64_t before = Counter(index.get(), counter);
    const Status s = index->Insert(CrashKeyAt(i), CrashValueAt(i));
    if (!s.ok() && !s.IsTableFull()) break;
    if (Counter(index.get(), counter) != before) return i;
  }
  ADD_FAILURE() << "none of the first " << limit << " inserts moved " << counter;
  return 0;
}

void ExpectInsertMovingAllOrNothing(const Options& options, const std::string& counter,
                                    int min_crash_points) {
  const uint64_t n = KeysBeforeCounterMoves(options, counter, 3000);
  ASSERT_GT(n, 0u);
  const OpCrashOutcome r = CrashDuringOp(
      options, [n](Index* x, Model* m) { FillCrashKeys(x, m, n); },
      [n, counter](Index* x) {
        const uint64_t before = Counter(x, counter);
        const Status s = x->Insert(CrashKeyAt(n), CrashValueAt(n));
        EXPECT_EQ(Counter(x, counter), before + 1) << "the insert did not move " << counter;
        return s;
      },
      InsertsAfterRecovery);
  ExpectAllOrNothing(r, min_crash_points);
}

}  // namespace pmhash::testing
