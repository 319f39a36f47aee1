// Crashes inside single operations of `wophi` under the power-failure simulator
// (src/pm/crashsim.h): at every fence and after every store, crash images are recovered
// and must hold exactly the state before or after the operation, with the engine's
// invariants intact. Covers Alg. 1 (a free slot of the chain, and a full chain taking a
// PAB bucket), the PAB refill, Alg. 2, the three kinds of update, and a resize.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engines/engine.h"
#include "engines/wophi/wophi.h"
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

std::string CheckRecovered(Index* index, Model* got) {
  if (Status d = Dump(index, got); !d.ok()) return "ForEach failed: " + d.ToString();
  if (Status c = dynamic_cast<Wophi*>(index)->CheckInvariants(); !c.ok()) return c.ToString();
  if (got->size() != index->Count()) return "Count disagrees with ForEach";
  for (const auto& [k, v] : *got) {
    std::string value;
    if (!index->Get(k, &value).ok() || value != v) return "Get disagrees with ForEach";
  }
  // Keeps working: a new key goes in (maybe taking a PAB bucket) and comes back.
  if (!index->Insert("after recovery", "yes").ok()) return "insert after recovery failed";
  std::string v;
  if (!index->Get("after recovery", &v).ok() || v != "yes") return "lost a post-recovery insert";
  if (Status c = dynamic_cast<Wophi*>(index)->CheckInvariants(); !c.ok()) {
    return "after a new insert: " + c.ToString();
  }
  got->erase("after recovery");
  return "";
}

struct Outcome {
  int crash_points = 0;
  int images = 0;
  int bad = 0;
  std::string first_bad;
};

Outcome CrashDuring(const Options& options, const std::function<void(Index*, Model*)>& setup,
                    const std::function<Status(Index*)>& op) {
  Outcome out;
  const EngineRegistration* reg = FindEngine("wophi");
  std::unique_ptr<pm::Pool> pool;
  EXPECT_TRUE(pm::Pool::CreateDram("wophi", options.pool_size, &pool).ok());
  pm::CrashSim sim(pool->base(), pool->size(), options.persist);
  std::unique_ptr<Index> index;
  Status s = OpenEngine(reg->make(), std::move(pool), true, options, &sim, &index);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return out;
  Model before;
  setup(index.get(), &before);
  // The refill thread stores to PM, so it must be idle whenever the hook changes.
  auto* wophi = dynamic_cast<Wophi*>(index.get());
  wophi->WaitForBackgroundWork();
  Model check;
  EXPECT_TRUE(Dump(index.get(), &check).ok());
  EXPECT_EQ(check, before) << "setup's model is wrong";

  std::vector<Model> not_before;
  std::mt19937_64 rng(7);
  sim.SetHook(
      [&](pm::CrashSim& sim, pm::CrashSim::Event) {
        ++out.crash_points;
        for (auto kind : {pm::CrashSim::ImageKind::kNone, pm::CrashSim::ImageKind::kAll,
                          pm::CrashSim::ImageKind::kRandom, pm::CrashSim::ImageKind::kRandom}) {
          std::unique_ptr<pm::Pool> image;
          Status st = sim.MakePool(kind, rng, "wophi", &image);
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
  // A refill the op started runs on its own thread, its crash points included.
  Status op_status = op(index.get());
  wophi->WaitForBackgroundWork();
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

// One main bucket, so every key shares one chain; PAB blocks of 2 buckets refilled when
// at most 1 is free, so taking a bucket also refills.
Options OneChain(PersistMode mode, bool resize) {
  Options o;
  o.engine = "wophi";
  o.pool_size = 4ull << 20;
  o.persist = mode;
  o.engine_options = {{"buckets", "1"},
                      {"pab_buckets", "2"},
                      {"pab_low", "1"},
                      {"resize", resize ? "on" : "off"},
                      {"max_load_factor", "1"}};
  return o;
}

// n keys in the chain; every third value out of line, key 3 is 16 bytes (record form).
void Fill(Index* index, Model* model, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const std::string k = i == 3 ? "a 16-byte key..." : Key8(i);
    const std::string v = i % 3 == 0 ? "value " + std::to_string(i) : Key8(i * 11);
    ASSERT_TRUE(index->Insert(k, v).ok());
    (*model)[k] = v;
  }
}

class WophiCrashTest : public ::testing::TestWithParam<PersistMode> {};

TEST_P(WophiCrashTest, InsertsDeletesAndUpdatesAreAllOrNothing) {
  const Options o = OneChain(GetParam(), /*resize=*/false);
  std::vector<std::pair<std::string, std::function<Status(Index*)>>> ops = {
      {"insert into a free slot", [](Index* x) { return x->Insert(Key8(1000), Key8(1)); }},
      {"record insert into a free slot",
       [](Index* x) { return x->Insert("long key 1000", "long value"); }},
      {"inline delete", [](Index* x) { return x->Delete(Key8(1)); }},
      {"record delete", [](Index* x) { return x->Delete("a 16-byte key..."); }},
      {"inline value update", [](Index* x) { return x->Update(Key8(2), Key8(77)); }},
      {"record update", [](Index* x) { return x->Update(Key8(0), "newer value"); }},
      {"inline to record update",
       [](Index* x) { return x->Update(Key8(4), "no longer 8 bytes"); }},
  };
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    Outcome r = CrashDuring(o, [](Index* x, Model* m) { Fill(x, m, 6); }, op);
    EXPECT_GE(r.crash_points, 2);
    EXPECT_EQ(r.bad, 0) << r.first_bad;
  }
}

TEST_P(WophiCrashTest, TakingAPreallocatedBucketAndRefillingAreAllOrNothing) {
  // 12 keys fill mb[0] and two chain buckets (the first take refilled the PAB to 3 free
  // buckets, the second left 2): the next insert takes a PAB bucket (Alg. 1 lines 27-33),
  // which leaves one free bucket, so the refill thread links a new PAB block. Its crash
  // points come from that thread, while the insert is still in flight or just done.
  const Options o = OneChain(GetParam(), /*resize=*/false);
  for (const bool record : {false, true}) {
    SCOPED_TRACE(record ? "record" : "inline");
    Outcome r = CrashDuring(
        o, [](Index* x, Model* m) { Fill(x, m, 12); },
        [record](Index* x) {
          Wophi* w = dynamic_cast<Wophi*>(x);
          const uint64_t refills = w->pab_refills();
          Status s = record ? x->Insert("a key of the new bucket", "v")
                            : x->Insert(Key8(900), Key8(9));
          w->WaitForBackgroundWork();
          EXPECT_EQ(w->expand_bucket_num(), 3u);
          EXPECT_EQ(w->pab_refills(), refills + 1);
          return s;
        });
    EXPECT_GE(r.crash_points, 6);  // tmp written, fence, link, fence, block zeroed, switch
    EXPECT_EQ(r.bad, 0) << r.first_bad;
  }
}

TEST_P(WophiCrashTest, ResizeIsAllOrNothing) {
  // 8 keys in one main bucket (4 slots) with max_load_factor 1: the insert that takes a
  // chain bucket finds the load factor over 1 and doubles the main buckets.
  Outcome r = CrashDuring(
      OneChain(GetParam(), /*resize=*/true), [](Index* x, Model* m) { Fill(x, m, 4); },
      [](Index* x) {
        Status s = x->Insert(Key8(5000), Key8(5001));
        EXPECT_EQ(dynamic_cast<Wophi*>(x)->main_buckets(), 2u);
        EXPECT_EQ(dynamic_cast<Wophi*>(x)->resizes(), 1u);
        return s;
      });
  EXPECT_GT(r.crash_points, 10);
  EXPECT_EQ(r.bad, 0) << r.first_bad;
}

INSTANTIATE_TEST_SUITE_P(Modes, WophiCrashTest,
                         ::testing::Values(PersistMode::kAdr, PersistMode::kEadr),
                         [](const auto& info) {
                           return std::string(PersistModeName(info.param));
                         });

}  // namespace
}  // namespace pmhash::engines
