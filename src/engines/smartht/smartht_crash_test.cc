// Crashes inside single operations of `smartht` under the power-failure simulator
// (src/pm/crashsim.h): at every fence and after every store, crash images are recovered
// and must hold exactly the state before or after the operation, with the engine's
// invariants intact (every stored key in the rebuilt filter). Covers Algorithm 1's two
// insert paths, lazy deletion, the three kinds of update and a growth of the head table.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/hash.h"
#include "engines/engine.h"
#include "engines/smartht/smartht.h"
#include "pm/crashsim.h"

namespace pmhash::engines {
namespace {

using Model = std::map<std::string, std::string>;

std::string Key8(uint64_t i) {
  std::string k(8, '\0');
  for (int b = 0; b < 8; ++b) k[b] = static_cast<char>((i >> (8 * b)) & 0xff);
  return k;
}

Status Dump(Index* index, Model* out) {
  out->clear();
  return index->ForEach([&](std::string_view k, std::string_view v) {
    (*out)[std::string(k)] = std::string(v);
    return true;
  });
}

// What recovering one crash image found wrong ("" if nothing).
std::string CheckRecovered(Index* index, Model* got) {
  if (Status d = Dump(index, got); !d.ok()) return "ForEach failed: " + d.ToString();
  if (Status c = dynamic_cast<SmartHt*>(index)->CheckInvariants(); !c.ok()) {
    return c.ToString();
  }
  if (got->size() != index->Count()) return "Count disagrees with ForEach";
  for (const auto& [k, v] : *got) {
    std::string value;
    if (!index->Get(k, &value).ok() || value != v) return "Get disagrees with ForEach";
  }
  return "";
}

struct Outcome {
  int crash_points = 0;
  int images = 0;
  int bad = 0;
  std::string first_bad;
};

// Runs setup without crash points, then op with a crash point at every fence and after
// every store (the operations are small); every image must recover to the state before
// or the state after op.
Outcome CrashDuring(const Options& options, const std::function<void(Index*, Model*)>& setup,
                    const std::function<Status(Index*)>& op) {
  Outcome out;
  const EngineRegistration* reg = FindEngine("smartht");
  std::unique_ptr<pm::Pool> pool;
  EXPECT_TRUE(pm::Pool::CreateDram("smartht", options.pool_size, &pool).ok());
  pm::CrashSim sim(pool->base(), pool->size(), options.persist);
  std::unique_ptr<Index> index;
  Status s = OpenEngine(reg->make(), std::move(pool), true, options, &sim, &index);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return out;
  Model before;
  setup(index.get(), &before);
  Model check;
  EXPECT_TRUE(Dump(index.get(), &check).ok());
  EXPECT_EQ(check, before) << "setup's model is wrong";

  std::vector<Model> not_before;  // compared with the state after op once it is known
  std::mt19937_64 rng(7);
  sim.SetHook(
      [&](pm::CrashSim& sim, pm::CrashSim::Event) {
        ++out.crash_points;
        for (auto kind : {pm::CrashSim::ImageKind::kNone, pm::CrashSim::ImageKind::kAll,
                          pm::CrashSim::ImageKind::kRandom, pm::CrashSim::ImageKind::kRandom}) {
          std::unique_ptr<pm::Pool> image;
          Status st = sim.MakePool(kind, rng, "smartht", &image);
          std::unique_ptr<Index> recovered;
          if (st.ok()) {
            st = OpenEngine(reg->make(), std::move(image), false, options, nullptr, &recovered);
          }
          Model got;
          std::string why = st.ok() ? CheckRecovered(recovered.get(), &got)
                                    : "recovery failed: " + st.ToString();
          ++out.images;
          if (!why.empty()) {
            ++out.bad;
            if (out.first_bad.empty()) {
              out.first_bad = std::string(pm::CrashImageKindName(kind)) + " image: " + why;
            }
          } else if (got != before) {
            not_before.push_back(std::move(got));
          }
        }
      },
      1.0, 11);
  Status op_status = op(index.get());
  sim.SetHook(nullptr, 0, 0);
  EXPECT_TRUE(op_status.ok()) << op_status.ToString();
  Model after;
  EXPECT_TRUE(Dump(index.get(), &after).ok());
  for (const Model& m : not_before) {
    if (m != after) {
      ++out.bad;
      if (out.first_bad.empty()) out.first_bad = "an image is neither the old nor the new state";
    }
  }
  EXPECT_TRUE(sim.FindBypass().ok()) << "a store bypassed the Persister";
  return out;
}

// 256 head buckets; keys of head bucket 9 only, so chains form at once.
Options Small(PersistMode mode, const std::string& max_chain) {
  Options o;
  o.engine = "smartht";
  o.pool_size = 4ull << 20;
  o.persist = mode;
  o.engine_options = {{"head_buckets", "256"}, {"max_chain", max_chain}};
  return o;
}

std::vector<std::string> ChainKeys(size_t n, uint64_t from) {
  std::vector<std::string> keys;
  for (uint64_t i = from; keys.size() < n; ++i) {
    if (SmartHt::HomeBucket(HashKey(Key8(i)), 256) == 9) keys.push_back(Key8(i));
  }
  return keys;
}

// n keys into head bucket 9's chain; every third value out of line.
void FillChain(Index* index, Model* model, size_t n) {
  for (const std::string& k : ChainKeys(n, 0)) {
    const std::string v = model->size() % 3 == 0 ? "value " + std::to_string(model->size())
                                                  : Key8(model->size() * 11);
    ASSERT_TRUE(index->Insert(k, v).ok());
    (*model)[k] = v;
  }
}

class SmartHtCrashTest : public ::testing::TestWithParam<PersistMode> {};

TEST_P(SmartHtCrashTest, InsertsDeletesAndUpdatesAreAllOrNothing) {
  const Options o = Small(GetParam(), "1000");
  const std::vector<std::string> keys = ChainKeys(6, 0);  // FillChain(5) uses keys[0..4]
  // Five keys: the head bucket is full, the first chained bucket has one free slot.
  // keys[0] and keys[3] hold records ("value N"); the others inline values.
  std::vector<std::pair<std::string, std::function<Status(Index*)>>> ops = {
      {"insert into a free slot", [&](Index* x) { return x->Insert(keys[5], Key8(1)); }},
      {"record insert into a free slot",
       [&](Index* x) { return x->Insert(keys[5], "a long value"); }},
      {"lazy delete", [&](Index* x) { return x->Delete(keys[1]); }},
      {"record delete", [&](Index* x) { return x->Delete(keys[0]); }},
      {"inline value update", [&](Index* x) { return x->Update(keys[1], Key8(77)); }},
      {"record update", [&](Index* x) { return x->Update(keys[3], "newer value"); }},
      {"inline to record update",
       [&](Index* x) { return x->Update(keys[2], "no longer 8 bytes"); }},
  };
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    Outcome r = CrashDuring(o, [](Index* x, Model* m) { FillChain(x, m, 5); }, op);
    EXPECT_GE(r.crash_points, 2);
    EXPECT_EQ(r.bad, 0) << r.first_bad;
  }
}

TEST_P(SmartHtCrashTest, NewChainedBucketIsAllOrNothing) {
  // Three keys fill the head bucket; the fourth goes into a new bucket behind it.
  // A freed 64-byte record first: the new bucket's block then holds stale bytes, so a
  // bucket linked before it is durable would show garbage after a crash.
  const std::vector<std::string> keys = ChainKeys(4, 0);
  Outcome r = CrashDuring(
      Small(GetParam(), "1000"),
      [](Index* x, Model* m) {
        ASSERT_TRUE(x->Insert("stale key", std::string(40, 's')).ok());
        ASSERT_TRUE(x->Delete("stale key").ok());
        FillChain(x, m, 3);
      },
      [&](Index* x) { return x->Insert(keys[3], "a record value"); });
  EXPECT_GE(r.crash_points, 3);
  EXPECT_EQ(r.bad, 0) << r.first_bad;
}

TEST_P(SmartHtCrashTest, HeadTableGrowthIsAllOrNothing) {
  // max_chain 0.01 x 256 heads: the third chained bucket makes the table double.
  Outcome r = CrashDuring(
      Small(GetParam(), "0.01"), [](Index* x, Model* m) { FillChain(x, m, 9); },
      [](Index* x) {
        Status s = x->Insert(ChainKeys(10, 0)[9], Key8(5001));
        EXPECT_GT(dynamic_cast<SmartHt*>(x)->head_buckets(), 256u);
        return s;
      });
  EXPECT_GT(r.crash_points, 10);
  EXPECT_EQ(r.bad, 0) << r.first_bad;
}

INSTANTIATE_TEST_SUITE_P(Modes, SmartHtCrashTest,
                         ::testing::Values(PersistMode::kAdr, PersistMode::kEadr),
                         [](const auto& info) {
                           return std::string(PersistModeName(info.param));
                         });

}  // namespace
}  // namespace pmhash::engines
