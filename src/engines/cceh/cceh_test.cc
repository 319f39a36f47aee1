#include "engines/cceh/cceh.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engines/cceh/window.h"
#include "support/engine_tests.h"
#include "util/cpu.h"
#include "util/hash.h"

namespace pmhash::engines {
namespace {

// The engine tests' helpers (tests/support/engine_tests.h).
using namespace testing;  // NOLINT(build/namespaces): pmhash::testing

Options CcehOptions(std::map<std::string, std::string> engine_options = {}) {
  return testing::OptionsFor("cceh", std::move(engine_options), 64ull << 20);
}

// 1 KiB segments: 16 buckets, one probe window of 16 slots = 4 buckets.
std::map<std::string, std::string> Small(uint64_t segments = 1) {
  return {{"segment_bytes", "1024"}, {"segments", std::to_string(segments)}};
}

// A file pool in `dir` holding Key8(i) -> Key8(i) for i < n, closed cleanly: its options.
Options FilledFilePool(const TempDir& dir, const std::string& name,
                       std::map<std::string, std::string> engine_options, uint64_t n) {
  Options o = CcehOptions(std::move(engine_options));
  o.path = dir.File(name);
  auto index = OpenOrDie(o);
  for (uint64_t i = 0; i < n; ++i) EXPECT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
  EXPECT_TRUE(index->Close().ok());
  return o;
}

uint64_t KeyWord(const std::string& k) {
  uint64_t w = 0;
  std::memcpy(&w, k.data(), 8);
  return w;
}

TEST(CcehTest, BadOptionsAreInvalidArgument) {
  std::unique_ptr<Index> index;
  Status s = Open(CcehOptions({{"segment_bytes", "3000"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("segment_bytes"), std::string::npos) << s.message();
  s = Open(CcehOptions({{"segment_bytes", "128"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = Open(CcehOptions({{"segments", "6"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("segments"), std::string::npos) << s.message();
  s = Open(CcehOptions({{"buckets", "4"}}), &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("segment_bytes"), std::string::npos) << s.message();
}

TEST(CcehTest, TheOriginalsGeometryByDefault) {
  auto index = OpenOrDie(CcehOptions());
  const IndexStats st = index->Stats();
  EXPECT_EQ(st.engine_counters.at("segments"), 64u) << "no initial_capacity: 64 segments";
  EXPECT_EQ(st.engine_counters.at("global_depth"), 6u);
  EXPECT_EQ(st.key_slots, 64u * 1024) << "16 KiB segments = 256 buckets x 4 slots";
  Options o = CcehOptions();
  o.initial_capacity = 100000;  // at half their 1,024 slots: 196 segments, rounded up
  auto sized = OpenOrDie(o);
  EXPECT_EQ(sized->Stats().engine_counters.at("segments"), 256u);
}

// The 17th key of a full window splits its segment (Small's geometry), with engine_options.
void SplitAndDouble(const std::map<std::string, std::string>& engine_options);

TEST(CcehTest, AFullWindowSplitsTheSegmentAndDoublesTheDirectory) {
  for (const char* copied : {"false", "true"}) {  // dram_directory: both ways
    SCOPED_TRACE(std::string("dram_directory=") + copied);
    auto engine_options = Small();
    engine_options["dram_directory"] = copied;
    SplitAndDouble(engine_options);
  }
}

void SplitAndDouble(const std::map<std::string, std::string>& engine_options) {
  auto index = OpenOrDie(CcehOptions(engine_options));
  // Start bucket 3, alternating top bits: 16 keys fill the only window.
  std::vector<std::string> keys;
  const std::vector<std::string> left = KeysWithHashBits(15, 3, 1, 0, 12), right = KeysWithHashBits(15, 3, 1, 1, 12);
  for (size_t i = 0; i < 8; ++i) {
    keys.push_back(left[i]);
    keys.push_back(right[i]);
  }
  Model model;
  for (const std::string& k : keys) {
    ASSERT_TRUE(index->Insert(k, k).ok());
    model[k] = k;
  }
  EXPECT_EQ(Counter(index.get(), "splits"), 0u);
  // The 17th: no free slot in the window, so the segment splits (G was 0: the directory
  // doubles first); the 8 right keys move to the new segment and leave free slots.
  ASSERT_TRUE(index->Insert(left[8], "x").ok());
  model[left[8]] = "x";
  EXPECT_EQ(Counter(index.get(), "splits"), 1u);
  EXPECT_EQ(Counter(index.get(), "doublings"), 1u);
  EXPECT_EQ(Counter(index.get(), "global_depth"), 1u);
  EXPECT_EQ(Counter(index.get(), "segments"), 2u);
  // Before any right key is written (a copy the split left stale would send it to the
  // left half forever).
  ASSERT_TRUE(dynamic_cast<Cceh*>(index.get())->TEST_DirectoryCopyAgrees());
  ExpectMatches(index.get(), model);
  // Lazy deletion: the moved keys' old slots are free for the left half, so three more
  // left keys fit without another split.
  for (size_t i = 9; i < 12; ++i) {
    ASSERT_TRUE(index->Insert(left[i], "y").ok());
    model[left[i]] = "y";
  }
  EXPECT_EQ(Counter(index.get(), "splits"), 1u) << "stale slots were not reused";
  // A moved key is found once, where it lives now; inserting it again is a duplicate.
  EXPECT_TRUE(index->Insert(right[0], "dup").IsAlreadyExists());
  ASSERT_TRUE(index->Delete(right[0]).ok());
  model.erase(right[0]);
  ExpectMatches(index.get(), model);
}

// The pool's key hash, counted: how many stored keys an insert hashes.
int g_key_hashes = 0;
uint64_t CountedHash(std::string_view key) {
  ++g_key_hashes;
  return HashKey(key, kTestHashSeed);
}

TEST(CcehTest, FreeSlotsFirstHashesNoKeyWhileTheWindowHasAnEmptyOrDeletedSlot) {
  for (const char* first : {"off", "on"}) {
    SCOPED_TRACE(std::string("free_slots_first=") + first);
    std::map<std::string, std::string> o = Small();
    o["free_slots_first"] = first;
    auto index = OpenOrDie(CcehOptions(o));
    // The window of start bucket 3 filled with left and right keys in turn (slots 0-15),
    // then a 17th key splits it: the right keys' copies stay behind in the odd slots.
    const std::vector<std::string> left = KeysWithHashBits(15, 3, 1, 0, 10),
                                   right = KeysWithHashBits(15, 3, 1, 1, 8);
    Model model;
    for (size_t i = 0; i < 8; ++i) {
      for (const std::string& k : {left[i], right[i]}) {
        ASSERT_TRUE(index->Insert(k, k).ok());
        model[k] = k;
      }
    }
    // With no empty or deleted slot left, either order reuses a stale copy: no 2nd split.
    ASSERT_TRUE(index->Insert(left[8], "x").ok());
    model[left[8]] = "x";
    EXPECT_EQ(Counter(index.get(), "splits"), 1u);
    // left[7] (slot 14) deleted: the original's order takes the first stale copy, hashing
    // every key before it; free_slots_first the deleted slot, hashing none.
    ASSERT_TRUE(index->Delete(left[7]).ok());
    model.erase(left[7]);
    static_cast<Engine*>(index.get())->SetKeyHashForTesting(&CountedHash);
    g_key_hashes = 0;
    ASSERT_TRUE(index->Insert(left[9], "y").ok());
    model[left[9]] = "y";
    if (std::string(first) == "on") {
      EXPECT_EQ(g_key_hashes, 1) << "the insert's own key only";
    } else {
      EXPECT_GT(g_key_hashes, 2) << "its own key, then the live keys before a stale copy";
    }
    EXPECT_EQ(Counter(index.get(), "splits"), 1u);
    ExpectMatches(index.get(), model);
    static_cast<Engine*>(index.get())->SetKeyHashForTesting(nullptr);
  }
}

// Invariant 2 (cceh_core.h): no empty slot lies between a key's window start and the
// key, so a probe may stop at an empty slot. A delete and a split's new segment must
// leave free words, not empty ones, where a later key of the window would be cut off.
TEST(CcehTest, ProbesFindKeysPastDeletedAndMovedSlots) {
  for (const char* stop : {"off", "on"}) {
    SCOPED_TRACE(std::string("probe_to_empty=") + stop);
    std::map<std::string, std::string> o = Small();
    o["probe_to_empty"] = stop;
    auto index = OpenOrDie(CcehOptions(o));
    // Start bucket 3, alternating top bits: 16 keys fill the window, in insertion order.
    const std::vector<std::string> left = KeysWithHashBits(15, 3, 1, 0, 9), right = KeysWithHashBits(15, 3, 1, 1, 8);
    std::vector<std::string> keys;
    for (size_t i = 0; i < 8; ++i) {
      keys.push_back(left[i]);
      keys.push_back(right[i]);
    }
    Model model;
    for (const std::string& k : keys) {
      ASSERT_TRUE(index->Insert(k, k).ok());
      model[k] = k;
    }
    // The window's first slot deleted: the 15 keys past it are still found, and a key
    // inserted again takes the freed slot without a split.
    ASSERT_TRUE(index->Delete(keys[0]).ok());
    model.erase(keys[0]);
    ExpectMatches(index.get(), model);
    EXPECT_TRUE(index->Insert(keys[0], "again").ok());
    model[keys[0]] = "again";
    EXPECT_EQ(Counter(index.get(), "splits"), 0u);
    // A split: the right keys (every other slot of the window) move to a new segment in
    // which the left keys' slots are not theirs; each is found there.
    ASSERT_TRUE(index->Insert(left[8], "x").ok());
    model[left[8]] = "x";
    EXPECT_EQ(Counter(index.get(), "splits"), 1u);
    ExpectMatches(index.get(), model);
    std::string v;
    EXPECT_TRUE(index->Get(KeysWithHashBits(15, 3, 1, 1, 1, 1000000)[0], &v).IsNotFound());
  }
}

TEST(CcehTest, ResizeOffRefusesAFullWindow) {
  std::map<std::string, std::string> o = Small();
  o["resize"] = "off";
  auto index = OpenOrDie(CcehOptions(o));
  const std::vector<std::string> keys = KeysWithHashBits(15, 7, 0, 0, 17);
  for (size_t i = 0; i < 16; ++i) ASSERT_TRUE(index->Insert(keys[i], keys[i]).ok());
  const Status s = index->Insert(keys[16], "no room");
  EXPECT_TRUE(s.IsTableFull()) << s.ToString();
  EXPECT_EQ(index->Count(), 16u);
  std::string v;
  EXPECT_TRUE(index->Get(keys[16], &v).IsNotFound());
}

TEST(CcehTest, KeysThatWouldReadAsRecordWordsAreStoredOutOfLine) {
  auto index = OpenOrDie(CcehOptions(Small()));
  // Top two bytes 0xff 0xff: inline, word0 would carry the record tag (or read empty).
  std::string all_ones(8, '\xff');
  std::string tagged = Key8(0x1234);
  tagged[6] = tagged[7] = '\xff';
  ASSERT_TRUE(CcehEscapesInline(KeyWord(all_ones)) && CcehEscapesInline(KeyWord(tagged)));
  const uint64_t pm_before = index->Stats().pm_bytes;
  ASSERT_TRUE(index->Insert(all_ones, "ones0000").ok());
  ASSERT_TRUE(index->Insert(tagged, "tagged00").ok());
  EXPECT_GT(index->Stats().pm_bytes, pm_before) << "both keys took a record";
  Model model{{all_ones, "ones0000"}, {tagged, "tagged00"}};
  // A key whose low 48 bits equal a record's offset must not match it inline.
  for (uint64_t i = 0; i < 200; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i * 7)).ok());
    model[Key8(i)] = Key8(i * 7);
  }
  ASSERT_TRUE(index->Update(tagged, "newvalue").ok());
  model[tagged] = "newvalue";
  ExpectMatches(index.get(), model);
  ASSERT_TRUE(index->Delete(all_ones).ok());
  model.erase(all_ones);
  ExpectMatches(index.get(), model);
}

TEST(CcehTest, PersistSequences) {
  auto index = OpenOrDie(CcehOptions(Small(4)));
  // A first record takes the allocator's chunk for its size class (a persist of its own).
  ASSERT_TRUE(index->Insert("warm-up key", "v").ok());
  auto step = [&](const std::function<Status()>& op, uint64_t flushes, uint64_t fences) {
    const PersistCounters before = index->Stats().persist;
    ASSERT_TRUE(op().ok());
    const PersistCounters after = index->Stats().persist;
    EXPECT_EQ(after.flushes - before.flushes, flushes);
    EXPECT_EQ(after.fences - before.fences, fences);
  };
  // An inline insert: both words in one line, one persist (the original's clflush).
  step([&] { return index->Insert(Key8(1), Key8(2)); }, 1, 1);
  // An inline value update: one 8-byte store, one persist.
  step([&] { return index->Update(Key8(1), Key8(3)); }, 1, 1);
  // A delete: word0 freed, one persist.
  step([&] { return index->Delete(Key8(1)); }, 1, 1);
  // A record insert: the record flushed and fenced before the slot's persist.
  step([&] { return index->Insert("a longer key", "v"); }, 2, 2);
}

TEST(CcehTest, SegmentSizeIsFixedAtCreation) {
  TempDir dir("cceh");
  Options o = FilledFilePool(dir, "geometry.pool", Small(2), 500);
  o.engine_options = {{"segment_bytes", "4096"}};
  std::unique_ptr<Index> index;
  Status s = Open(o, &index);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("1024"), std::string::npos) << s.message();
  o.engine_options = {};
  index = OpenOrDie(o);
  EXPECT_FALSE(index->Stats().recovered);
  EXPECT_EQ(index->Count(), 500u);
  EXPECT_EQ(index->Stats().key_slots % 64, 0u);
  std::string v;
  ASSERT_TRUE(index->Get(Key8(321), &v).ok());
  EXPECT_EQ(v, Key8(321));
}

TEST(CcehTest, ReopenAfterAbandonRecountsAndKeepsWorking) {
  TempDir dir("cceh");
  Options o = CcehOptions(Small(1));
  o.path = dir.File("crashed.pool");
  Model model;
  {
    auto index = OpenOrDie(o);
    for (uint64_t i = 0; i < 3000; ++i) {
      const std::string k = i % 5 == 0 ? Bytes(i, 20, 'k') : Key8(i);
      ASSERT_TRUE(index->Insert(k, Key8(i * 3)).ok());
      model[k] = Key8(i * 3);
    }
    for (uint64_t i = 0; i < 3000; i += 7) {
      const std::string k = i % 5 == 0 ? Bytes(i, 20, 'k') : Key8(i);
      ASSERT_TRUE(index->Delete(k).ok());
      model.erase(k);
    }
    dynamic_cast<Engine*>(index.get())->Abandon();
  }
  auto index = OpenOrDie(o);
  EXPECT_TRUE(index->Stats().recovered);
  ExpectMatches(index.get(), model);
  for (uint64_t i = 3000; i < 6000; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    model[Key8(i)] = Key8(i);
  }
  ExpectMatches(index.get(), model);
}

TEST(CcehTest, DramDirectoryCopyFollowsSplitsDoublingsAndReopens) {
  // dram_directory: the copy names what the directory in PM names after every split and
  // doubling, after a crash's reopen and a clean one; a pool made without the option opens
  // with it, and one made with it without.
  TempDir dir("cceh");
  auto engine_options = Small(1);
  engine_options["dram_directory"] = "true";
  Options o = CcehOptions(engine_options);
  o.path = dir.File("copied.pool");
  auto agrees = [](Index* index) {
    return dynamic_cast<Cceh*>(index)->TEST_DirectoryCopyAgrees();
  };
  Model model;
  {
    auto index = OpenOrDie(o);
    EXPECT_TRUE(agrees(index.get()));
    for (uint64_t i = 0; i < 3000; ++i) {
      const std::string k = i % 5 == 0 ? Bytes(i, 20, 'k') : Key8(i);
      ASSERT_TRUE(index->Insert(k, Key8(i)).ok());
      model[k] = Key8(i);
      if (i % 250 == 0) {
        ASSERT_TRUE(agrees(index.get())) << i;
      }
    }
    EXPECT_GT(Counter(index.get(), "doublings"), 5u);
    EXPECT_TRUE(agrees(index.get()));
    for (uint64_t i = 0; i < 3000; i += 7) {
      const std::string k = i % 5 == 0 ? Bytes(i, 20, 'k') : Key8(i);
      ASSERT_TRUE(index->Delete(k).ok());
      model.erase(k);
    }
    ExpectMatches(index.get(), model);
    dynamic_cast<Engine*>(index.get())->Abandon();
  }
  {
    auto index = OpenOrDie(o);
    EXPECT_TRUE(index->Stats().recovered);
    EXPECT_TRUE(agrees(index.get()));
    ExpectMatches(index.get(), model);
    for (uint64_t i = 3000; i < 6000; ++i) {
      ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
      model[Key8(i)] = Key8(i);
    }
    EXPECT_TRUE(agrees(index.get()));
    ASSERT_TRUE(index->Close().ok());
  }
  Options plain = o;
  plain.engine_options.erase("dram_directory");
  {
    auto index = OpenOrDie(plain);
    ExpectMatches(index.get(), model);
    ASSERT_TRUE(index->Insert(Key8(7000), "x").ok());
    model[Key8(7000)] = "x";
    ASSERT_TRUE(index->Close().ok());
  }
  auto index = OpenOrDie(o);
  EXPECT_TRUE(agrees(index.get()));
  ExpectMatches(index.get(), model);
}

TEST(CcehTest, DamagedDirectoryEntryIsCorruption) {
  TempDir dir("cceh");
  const Options o = FilledFilePool(dir, "damaged.pool", Small(4), 100);
  uint64_t table = 0;
  const uint64_t word = pm::kRootOffset + offsetof(EngineRoot, table);
  ReadFromFile(o.path, word, &table, sizeof(table));
  ASSERT_TRUE(UnsealWord(table, word, &table));
  // Entry 2's segment offset, one byte of its payload.
  FlipByteInFile(o.path, table + sizeof(CcehDirHeader) + 2 * 8 + 3, 0x10);
  std::unique_ptr<Index> index;
  const Status s = Open(o, &index);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("directory entry"), std::string::npos) << s.message();
}

TEST(CcehTest, MediaWritesAreCountedBySlotsSegmentsAndDirectory) {
  // About a thousand 1 KiB segments: more than the device's write-combining buffers hold,
  // so slot writes reach the media too.
  Options o = CcehOptions(Small(1));
  auto index = OpenOrDie(o);
  for (uint64_t i = 0; i < 20000; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
  const IndexStats st = index->Stats();
  const uint64_t slots = st.engine_counters.at("media_writes_slots");
  const uint64_t segs = st.engine_counters.at("media_writes_segments");
  const uint64_t dir = st.engine_counters.at("media_writes_directory");
  EXPECT_GT(slots, 0u);
  EXPECT_GT(segs, 0u) << "splits write new segments";
  EXPECT_GT(dir, 0u) << "splits switch directory entries";
  EXPECT_LE(slots + segs + dir, st.persist.media_writes);
}

TEST(CcehTest, FourThreadsWithSplitsAndDoublings) {
  auto index = OpenOrDie(CcehOptions(Small(1)));
  ExpectThreadsAgreeWithTheirModels(index.get(), 4, 3000);
  EXPECT_GT(Counter(index.get(), "doublings"), 5u);
}

TEST(CcehTest, FirstTryChecksTheSegmentStillServesTheKey) {
  // A search reads the directory entry; before it reads the segment, a split moves the
  // key to a new segment (its copy stays in the old one: lazy deletion) and the key is
  // deleted there. The first try must notice that the old segment no longer serves the
  // key and not answer with the copy. (Uncounted: searches take the first try.)
  Options o = CcehOptions(Small(1));
  o.count_stats = false;
  auto index = OpenOrDie(o);
  const std::string moving = KeysWithHashBits(0, 0, 1, 1, 1)[0];  // top bit 1: it moves
  ASSERT_TRUE(index->Insert(moving, Key8(1)).ok());  // 8-byte key and value: inline
  auto* cceh = dynamic_cast<Cceh*>(index.get());
  ASSERT_NE(cceh, nullptr);
  bool fired = false;
  cceh->TEST_SetFirstTryHook([&] {
    if (fired) return;
    fired = true;
    for (uint64_t i = 0; Counter(index.get(), "splits") == 0; ++i) {
      ASSERT_TRUE(index->Insert(Key8(1'000'000 + i), Key8(i)).ok());
    }
    ASSERT_TRUE(index->Delete(moving).ok());
  });
  std::string v;
  EXPECT_TRUE(index->Get(moving, &v).IsNotFound()) << v;
  EXPECT_TRUE(fired);
}

TEST(CcehTest, FirstTryDeleteChecksTheSegmentStillServesTheKey) {
  // A delete reads the directory entry; before it locks the segment, a split moves the
  // key to a new segment (its copy stays in the old one: lazy deletion). The first try
  // must notice that the old segment no longer serves the key and delete it where it
  // lives now, not free the stale copy and leave the key there. (Counted or not, deletes
  // of 8-byte keys take the first try; the hook runs between the entry's read and the
  // lock.)
  for (const bool counted : {false, true}) {
    Options o = CcehOptions(Small(1));
    o.count_stats = counted;
    auto index = OpenOrDie(o);
    const std::string moving = KeysWithHashBits(0, 0, 1, 1, 1)[0];  // top bit 1: it moves
    ASSERT_TRUE(index->Insert(moving, Key8(1)).ok());
    auto* cceh = dynamic_cast<Cceh*>(index.get());
    ASSERT_NE(cceh, nullptr);
    bool fired = false;
    uint64_t inserted = 0;
    cceh->TEST_SetFirstTryHook([&] {
      if (fired) return;
      fired = true;
      for (; Counter(index.get(), "splits") == 0; ++inserted) {
        ASSERT_TRUE(index->Insert(Key8(1'000'000 + inserted), Key8(inserted)).ok());
      }
    });
    ASSERT_TRUE(index->Delete(moving).ok());
    EXPECT_TRUE(fired);
    cceh->TEST_SetFirstTryHook(nullptr);
    std::string v;
    EXPECT_TRUE(index->Get(moving, &v).IsNotFound()) << "counted " << counted << ": " << v;
    EXPECT_EQ(index->Stats().count, inserted);
    EXPECT_TRUE(index->Delete(moving).IsNotFound());
    EXPECT_EQ(CheckInvariantsOf(index.get()), "");
  }
}

TEST(CcehTest, FirstTryDeleteLeavesRecordsAndEscapingKeysToTheGeneralPath) {
  // An 8-byte key with a longer value is a record (its word1 the key's hash), and an
  // 8-byte key whose top two bytes are all ones cannot be inline: the first try must
  // hand both to the general path, which deletes them.
  auto index = OpenOrDie(CcehOptions(Small(1)));
  std::string escaping = Key8(7);
  escaping[6] = escaping[7] = '\xff';
  const std::string record_key = Key8(8);
  ASSERT_TRUE(index->Insert(escaping, Key8(1)).ok());
  ASSERT_TRUE(index->Insert(record_key, std::string(100, 'r')).ok());
  for (uint64_t i = 0; i < 500; ++i) ASSERT_TRUE(index->Insert(Key8(100 + i), Key8(i)).ok());
  ASSERT_TRUE(index->Delete(escaping).ok());
  ASSERT_TRUE(index->Delete(record_key).ok());
  std::string v;
  EXPECT_TRUE(index->Get(escaping, &v).IsNotFound());
  EXPECT_TRUE(index->Get(record_key, &v).IsNotFound());
  for (uint64_t i = 0; i < 500; ++i) ASSERT_TRUE(index->Delete(Key8(100 + i)).ok()) << i;
  EXPECT_EQ(index->Stats().count, 0u);
  EXPECT_EQ(CheckInvariantsOf(index.get()), "");
}

// window.h's contract, slot by slot: exact 64-bit equalities.
uint32_t WindowDefinition(const KvWords* line, uint64_t key_word, uint64_t hash, bool empties) {
  uint32_t c = 0;
  for (uint32_t j = 0; j < kWindowLineSlots; ++j) {
    const uint32_t at = kWindowBitsPerSlot * j;
    if (line[j].word0 == key_word) c |= (kWindowKeyBits & 0xf) << at;
    if (empties && line[j].word0 == ~uint64_t{0}) c |= (kWindowEmptyBits & 0xf) << at;
    if (line[j].word1 == hash) c |= (kWindowHashBits & 0xf) << at;
  }
  return c;
}

TEST(CcehTest, WindowMatchersAgreeWithTheDefinition) {
  // Words equal to the key or the hash, equal in one 32-bit half only (an SSE2 compare
  // that forgot the other half would see them), all ones, and random: every mix.
  std::mt19937_64 rng(7);
  const bool avx2 = CpuFeatures::Get().avx2;
  if (!avx2) std::printf("no AVX2 here: SSE2 against the definition only\n");
  size_t candidates = 0;
  for (int round = 0; round < 20000; ++round) {
    const uint64_t key = rng() & ~(uint64_t{0xffff} << 48), hash = rng();
    const auto word = [&](uint64_t want) -> uint64_t {
      switch (rng() % 6) {
        case 0: return want;
        case 1: return (want & 0xffffffffull) | (rng() << 32);   // low half only
        case 2: return (want & ~0xffffffffull) | (rng() >> 32);  // high half only
        case 3: return ~uint64_t{0};
        default: return rng();
      }
    };
    alignas(64) KvWords line[kWindowLineSlots];
    for (KvWords& w : line) w = {word(key), word(hash)};
    for (const bool empties : {false, true}) {
      const uint32_t want = WindowDefinition(line, key, hash, empties);
      candidates += std::popcount(want);
      ASSERT_EQ(WindowSse2::Candidates(line, key, hash, empties), want) << round;
      if (avx2) {
        ASSERT_EQ(WindowAvx2::Candidates(line, key, hash, empties), want) << round;
      }
    }
  }
  EXPECT_GT(candidates, 20000u);
}

TEST(CcehTest, AnyCandidateSeesEverySlotOfItsThreeLines) {
  // Three lines with at most one word equal to the key or the hash (in any slot, word0 or
  // word1, of any line), the rest random, all ones or equal in one 32-bit half.
  std::mt19937_64 rng(11);
  const bool avx2 = CpuFeatures::Get().avx2;
  size_t with = 0;
  for (int round = 0; round < 20000; ++round) {
    const uint64_t key = rng() & ~(uint64_t{0xffff} << 48), hash = rng();
    const auto noise = [&](uint64_t want) -> uint64_t {
      switch (rng() % 4) {
        case 0: return (want & 0xffffffffull) | (rng() << 32);
        case 1: return (want & ~0xffffffffull) | (rng() >> 32);
        case 2: return ~uint64_t{0};
        default: return rng();
      }
    };
    alignas(64) KvWords lines[3][kWindowLineSlots];
    for (auto& line : lines) {
      for (KvWords& w : line) w = {noise(key), noise(hash)};
    }
    if (round % 2 == 0) {  // one equal word, anywhere: half of them in their own word
      KvWords& w = lines[rng() % 3][rng() % kWindowLineSlots];
      (rng() % 2 == 0 ? w.word0 : w.word1) = rng() % 2 == 0 ? key : hash;
    }
    uint32_t want = 0;
    for (const auto& line : lines) want |= WindowDefinition(line, key, hash, false);
    with += want != 0;
    ASSERT_EQ(WindowSse2::AnyCandidate(lines[0], lines[1], lines[2], key, hash), want != 0)
        << round;
    if (avx2) {
      ASSERT_EQ(WindowAvx2::AnyCandidate(lines[0], lines[1], lines[2], key, hash), want != 0)
          << round;
    }
  }
  // A key in word1 or a hash in word0 is no candidate: a quarter of the rounds have one.
  EXPECT_GT(with, 4000u);
  EXPECT_LT(with, 6000u);
}

TEST(CcehTest, BothWindowMatchersRunTheEngine) {
  // Searches (uncounted: the first try; counted, and every record: SearchWindow) and
  // writes (Find) through each matcher: inline keys, records (16-byte keys: matched by
  // their hash), misses, updates, deletes, with splits; probe_to_empty both ways.
  for (const bool avx2 : {false, true}) {
    if (avx2 && !CpuFeatures::Get().avx2) continue;
    for (const char* to_empty : {"false", "true"}) {
      auto engine_options = Small(2);
      engine_options["probe_to_empty"] = to_empty;
      Options o = CcehOptions(engine_options);
      o.count_stats = to_empty[0] == 't';
      auto index = OpenOrDie(o);
      dynamic_cast<Cceh*>(index.get())->TEST_SetWindowAvx2(avx2);
      std::map<std::string, std::string> model;
      std::mt19937_64 rng(avx2 ? 1 : 2);
      for (int op = 0; op < 6000; ++op) {
        const uint64_t i = rng() % 1500;
        const std::string key = i % 3 == 0 ? Key8(i) + "-record" : Key8(i);
        const std::string value = Key8(rng());
        std::string got;
        switch (rng() % 4) {
          case 0: {
            const Status st = index->Insert(key, value);
            ASSERT_EQ(st.IsAlreadyExists(), model.count(key) == 1) << st.ToString();
            model.emplace(key, value);
            break;
          }
          case 1: {
            const Status st = index->Delete(key);
            ASSERT_EQ(st.ok(), model.erase(key) == 1) << st.ToString();
            break;
          }
          case 2: {
            const Status st = index->Update(key, value);
            ASSERT_EQ(st.ok(), model.count(key) == 1) << st.ToString();
            if (st.ok()) model[key] = value;
            break;
          }
          default: {
            const Status st = index->Get(key, &got);
            const auto it = model.find(key);
            ASSERT_EQ(st.ok(), it != model.end()) << key << " " << st.ToString();
            if (st.ok()) {
              ASSERT_EQ(got, it->second);
            }
          }
        }
      }
      EXPECT_GT(Counter(index.get(), "splits"), 0u);
      EXPECT_EQ(index->Stats().count, model.size());
    }
  }
}

TEST(CcehTest, ThreadsSplitAndReadWhileTheDirectoryDoubles) {
  // Uncounted, searches take DoGet's first try; counted, the general path.
  // With dram_directory, searches and writers read the copy while it changes.
  for (const bool counted : {false, true}) {
    for (const char* copied : {"false", "true"}) {
      auto engine_options = Small(1);
      engine_options["dram_directory"] = copied;
      Options o = CcehOptions(engine_options);
      o.count_stats = counted;
      auto index = OpenOrDie(o);
      EXPECT_EQ(ReadWhileWritersSplit(index.get(), 2000, 20000), 0u) << counted << copied;
      EXPECT_GT(Counter(index.get(), "doublings"), 5u);
      EXPECT_TRUE(dynamic_cast<Cceh*>(index.get())->TEST_DirectoryCopyAgrees());
    }
  }
}

TEST(CcehTest, ForEachVisitorMayWrite) {
  auto index = OpenOrDie(CcehOptions(Small(1)));
  for (uint64_t i = 0; i < 300; ++i) ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
  uint64_t seen = 0;
  ASSERT_TRUE(index
                  ->ForEach([&](std::string_view, std::string_view) {
                    // Each visit inserts a fresh key: splits happen while iterating.
                    EXPECT_TRUE(index->Insert(Key8(100000 + seen), "z").ok());
                    ++seen;
                    return true;
                  })
                  .ok());
  EXPECT_GE(seen, 300u) << "keys present for the whole pass are each seen once";
  EXPECT_EQ(index->Count(), 300u + seen);
  EXPECT_EQ(CheckInvariantsOf(index.get()), "");
}

// Scan pages between which segments split and the directory doubles: every key present
// throughout is passed, once (a position is a point of the hash space, so a page that
// resumes after a split reads the halves of the range it had not reached yet).
TEST(CcehTest, ScanAcrossSplitsAndDoublingsBetweenPages) {
  auto index = OpenOrDie(CcehOptions(Small()));
  Model stable;
  for (uint64_t i = 0; i < 40; ++i) {
    ASSERT_TRUE(index->Insert(Key8(i), Key8(i)).ok());
    stable[Key8(i)] = Key8(i);
  }
  const uint64_t depth_before = Counter(index.get(), "global_depth");
  const uint64_t splits_before = Counter(index.get(), "splits");
  std::map<std::string, int> passed;
  uint64_t cursor = 0, churn = 1'000'000;
  int pages = 0;
  do {
    ASSERT_TRUE(index->Scan(cursor, 4, [&](std::string_view k, std::string_view v) {
      ++passed[std::string(k)];
      const auto it = stable.find(std::string(k));
      if (it != stable.end()) {
        EXPECT_EQ(it->second, v);
      }
      return true;
    }, &cursor).ok());
    for (int j = 0; j < 30; ++j) {  // enough new keys to split a 64-slot segment
      ASSERT_TRUE(index->Insert(Key8(churn), Key8(churn)).ok());
      ++churn;
    }
    ASSERT_LT(++pages, 10'000) << "no progress";
  } while (cursor != 0);
  EXPECT_GT(Counter(index.get(), "global_depth"), depth_before + 1) << "doublings between pages";
  EXPECT_GT(Counter(index.get(), "splits"), splits_before + 2) << "splits between pages";
  for (const auto& [k, v] : stable) {
    EXPECT_EQ(passed[k], 1) << Printable(k) << " passed " << passed[k] << " times";
  }
  EXPECT_EQ(CheckInvariantsOf(index.get()), "");
}

// A skewed table: keys of one eighth of the hash space split it deep while the rest stays
// one shallow segment, so a page's run of homes spans several deep segments; every one
// is read.
TEST(CcehTest, ScanReadsEverySegmentOfARunInASkewedTable) {
  auto index = OpenOrDie(CcehOptions(Small()));
  Model model;
  for (uint64_t b = 0; b < 16; ++b) {
    for (const std::string& k : KeysWithHashBits(15, b, 3, 0, 12, b * 1'000'000)) {
      ASSERT_TRUE(index->Insert(k, k).ok());
      model[k] = k;
    }
  }
  ASSERT_GE(Counter(index.get(), "global_depth"), 5u);
  ASSERT_LT(Counter(index.get(), "segments"), (uint64_t{1} << Counter(index.get(), "global_depth")) / 4)
      << "not skewed enough for runs that span segments";
  for (size_t max_keys : {size_t{5}, size_t{1000}}) {
    Model seen;
    uint64_t cursor = 0;
    int pages = 0;
    do {
      ASSERT_TRUE(index->Scan(cursor, max_keys, [&](std::string_view k, std::string_view v) {
        seen[std::string(k)] = std::string(v);
        return true;
      }, &cursor).ok());
      ASSERT_LT(++pages, 10'000) << "no progress";
    } while (cursor != 0);
    EXPECT_EQ(seen, model) << "max_keys " << max_keys;
  }
}

}  // namespace
}  // namespace pmhash::engines
