#include "common/slot.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "util/hash.h"

namespace pmhash {
namespace {

class SlotCodecTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(64ull << 20); }

  void Make(uint64_t pool_size) {
    codec_.reset();
    allocator_.reset();
    ASSERT_TRUE(pm::Pool::CreateDram("slot-test", pool_size, &pool_).ok());
    pm::PersistConfig config;
    config.mode = PersistMode::kAdr;
    ASSERT_TRUE(pm::Persister::Make(config, &persister_).ok());
    ASSERT_TRUE(pm::Allocator::Format(*pool_, *persister_, &allocator_).ok());
    codec_ = std::make_unique<SlotCodec>(*pool_, *persister_, *allocator_);
  }

  // Encodes and checks that the slot reads back as (key, value).
  KvWords EncodeAndCheck(const std::string& key, const std::string& value, SlotForm want) {
    SlotForm form = SlotForm::kEmpty;
    KvWords words;
    const uint64_t h = HashKey(key, 0);
    Status s = codec_->Encode(key, value, h, &form, &words);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(form, want);
    EXPECT_EQ(codec_->Key(form, words), key);
    EXPECT_EQ(codec_->Value(form, words), value);
    EXPECT_TRUE(codec_->KeyEquals(form, words, key, h));
    EXPECT_TRUE(codec_->Plausible(form, words));
    return words;
  }

  std::unique_ptr<pm::Pool> pool_;
  std::unique_ptr<pm::Persister> persister_;
  std::unique_ptr<pm::Allocator> allocator_;
  std::unique_ptr<SlotCodec> codec_;
};

TEST_F(SlotCodecTest, CheckSizesAcceptsLimitsAndNamesThemWhenExceeded) {
  const std::string max_key(kMaxKeySize, 'k');
  const std::string max_value(kMaxValueSize, 'v');
  EXPECT_TRUE(SlotCodec::CheckSizes(max_key, max_value).ok());
  EXPECT_TRUE(SlotCodec::CheckSizes("", "").ok());

  Status s = SlotCodec::CheckSizes(max_key + "k", "v");
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("key"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("65537"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("65536"), std::string::npos) << s.message();

  s = SlotCodec::CheckSizes("k", max_value + "v");
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("value"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("1048577"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("1048576"), std::string::npos) << s.message();
}

TEST_F(SlotCodecTest, EightByteKeyAndValueAreInlineAndAllocateNothing) {
  const uint64_t in_use = allocator_->BytesInUse();
  const std::string key("\0key\0\0\xff!", 8);
  const std::string value("v\0lue\0\0\x01", 8);
  KvWords words = EncodeAndCheck(key, value, SlotForm::kInline);
  EXPECT_EQ(allocator_->BytesInUse(), in_use);
  EXPECT_EQ(std::memcmp(&words.word0, key.data(), 8), 0);
  EXPECT_EQ(std::memcmp(&words.word1, value.data(), 8), 0);

  // Inline compares the bytes, not the hash argument.
  EXPECT_TRUE(codec_->KeyEquals(SlotForm::kInline, words, key, 0));
  EXPECT_FALSE(codec_->KeyEquals(SlotForm::kInline, words, std::string("\0key\0\0\xff?", 8),
                                 HashKey(key, 0)));
  EXPECT_FALSE(codec_->KeyEquals(SlotForm::kInline, words, key.substr(0, 7), HashKey(key, 0)));
  EXPECT_FALSE(codec_->KeyEquals(SlotForm::kEmpty, words, key, HashKey(key, 0)));
}

TEST_F(SlotCodecTest, OtherSizesUseARecord) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", ""},
      {"", "value"},
      {"key", ""},
      {"12345678", "123456789"},  // 8-byte key, 9-byte value
      {"123456789", "12345678"},  // 9-byte key, 8-byte value
      {"1234567", "12345678"},
      {std::string(100, 'k'), std::string(1000, 'v')},
      {std::string("a\0b\0\0c", 6), std::string("\0\0\0", 3)},  // binary with zero bytes
  };
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE("key size " + std::to_string(key.size()) + ", value size " +
                 std::to_string(value.size()));
    const uint64_t in_use = allocator_->BytesInUse();
    KvWords words = EncodeAndCheck(key, value, SlotForm::kRecord);
    EXPECT_EQ(words.word1, HashKey(key, 0));
    EXPECT_GT(allocator_->BytesInUse(), in_use);
    EXPECT_TRUE(allocator_->IsAllocated(words.word0));
    EXPECT_GE(allocator_->UsableSize(words.word0), 8 + key.size() + value.size());
  }
}

TEST_F(SlotCodecTest, BinaryKeysDifferingAfterAZeroByteAreDistinct) {
  const std::string a("ab\0c", 4), b("ab\0d", 4);
  KvWords wa = EncodeAndCheck(a, "1", SlotForm::kRecord);
  // Same hash word forced: the record's bytes must still tell them apart.
  EXPECT_FALSE(codec_->KeyEquals(SlotForm::kRecord, wa, b, wa.word1));
  EXPECT_FALSE(codec_->KeyEquals(SlotForm::kRecord, wa, std::string("ab", 2), wa.word1));
  EXPECT_FALSE(codec_->KeyEquals(SlotForm::kRecord, wa, a + '\0', wa.word1));
  // A key that is a prefix of the record's key plus value must not match either.
  EXPECT_FALSE(codec_->KeyEquals(SlotForm::kRecord, wa, a + "1", wa.word1));
}

TEST_F(SlotCodecTest, KeysAndValuesAtTheLimitRoundTrip) {
  std::string key(kMaxKeySize, '\0');
  std::string value(kMaxValueSize, '\0');
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<char>(i * 7);
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 13);
  EncodeAndCheck(key, value, SlotForm::kRecord);
}

TEST_F(SlotCodecTest, OversizedKeyOrValueIsRejectedWithoutAllocating) {
  const uint64_t in_use = allocator_->BytesInUse();
  SlotForm form = SlotForm::kEmpty;
  KvWords words;
  const std::string long_key(kMaxKeySize + 1, 'k');
  Status s = codec_->Encode(long_key, "v", HashKey(long_key, 0), &form, &words);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = codec_->Encode("k", std::string(kMaxValueSize + 1, 'v'), HashKey("k", 0), &form, &words);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  uint64_t offset = 0;
  s = codec_->EncodeRecord("k", std::string(kMaxValueSize + 1, 'v'), &offset);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(form, SlotForm::kEmpty);
  EXPECT_EQ(allocator_->BytesInUse(), in_use);
}

TEST_F(SlotCodecTest, HashMismatchNeverReadsTheRecord) {
  KvWords words = EncodeAndCheck("a long key", "value", SlotForm::kRecord);
  // Right bytes, wrong hash word: rejected on the hash alone.
  EXPECT_FALSE(codec_->KeyEquals(SlotForm::kRecord, words, "a long key", words.word1 + 1));

  // Only a matching hash reads the record, and that read is reported (as a new
  // operation's: within one, a line read before counts once).
  persister_->BeginOp();
  const uint64_t lines = persister_->Totals().lines_read;
  EXPECT_FALSE(codec_->KeyEquals(SlotForm::kRecord, words, "a long key", words.word1 ^ 1));
  EXPECT_EQ(persister_->Totals().lines_read, lines);
  EXPECT_TRUE(codec_->KeyEquals(SlotForm::kRecord, words, "a long key", words.word1));
  EXPECT_GE(persister_->Totals().lines_read, lines + 1);

  // A record offset far outside the mapping: reading it would fault (or trip ASan).
  KvWords wild;
  wild.word0 = pool_->size() * 1024 + 16;
  wild.word1 = HashKey("x", 0);
  EXPECT_FALSE(codec_->KeyEquals(SlotForm::kRecord, wild, "y", HashKey("y", 0)));
}

TEST_F(SlotCodecTest, EncodeFlushesTheRecordButDoesNotFence) {
  const std::string value(300, 'v');
  // The first block of a size class may make the allocator persist a chunk's new role
  // (with a fence of its own); measure the second.
  EncodeAndCheck("warm", value, SlotForm::kRecord);
  const PersistCounters before = persister_->Totals();
  EncodeAndCheck("key", value, SlotForm::kRecord);
  const PersistCounters after = persister_->Totals();
  // 8 + 3 + 300 bytes span at least 5 cache lines.
  EXPECT_GE(after.flushes - before.flushes, 5u);
  EXPECT_EQ(after.fences, before.fences);
  EXPECT_GE(after.bytes_stored - before.bytes_stored, 8u + 3 + 300);
}

TEST_F(SlotCodecTest, RecordReadsAreCountedOncePerLine) {
  // A 16-byte key and a 1000-byte value: the record spans 16 or 17 lines.
  KvWords words = EncodeAndCheck(std::string(16, 'k'), std::string(1000, 'v'),
                                 SlotForm::kRecord);
  const char* rec = pool_->At<const char>(words.word0);
  const uint64_t value_lines =
      (reinterpret_cast<uintptr_t>(rec) + 8 + 16 + 1000 - 1) / 64 -
      (reinterpret_cast<uintptr_t>(rec) + 8 + 16) / 64 + 1;
  // Each read as an operation of its own (within one, a line counts once).
  persister_->BeginOp();
  uint64_t before = persister_->Totals().lines_read;
  EXPECT_EQ(codec_->Value(SlotForm::kRecord, words).size(), 1000u);
  // The value starts on the header's line here (blocks are 64-byte aligned at this size).
  ASSERT_EQ(reinterpret_cast<uintptr_t>(rec) % 64, 0u);
  EXPECT_EQ(persister_->Totals().lines_read - before, value_lines);
  // Read again in the same operation: nothing new.
  before = persister_->Totals().lines_read;
  EXPECT_EQ(codec_->Value(SlotForm::kRecord, words).size(), 1000u);
  EXPECT_EQ(persister_->Totals().lines_read, before);
  persister_->BeginOp();
  before = persister_->Totals().lines_read;
  EXPECT_EQ(codec_->Key(SlotForm::kRecord, words).size(), 16u);
  EXPECT_EQ(persister_->Totals().lines_read - before, 1u);
  // Inline slots live in the engine's bucket: nothing extra to count.
  KvWords inline_words = EncodeAndCheck("12345678", "abcdefgh", SlotForm::kInline);
  before = persister_->Totals().lines_read;
  EXPECT_EQ(codec_->Value(SlotForm::kInline, inline_words), "abcdefgh");
  EXPECT_EQ(persister_->Totals().lines_read, before);
}

TEST_F(SlotCodecTest, ReleaseFreesTheRecord) {
  const uint64_t in_use = allocator_->BytesInUse();
  KvWords words = EncodeAndCheck("some key", std::string(500, 'v'), SlotForm::kRecord);
  ASSERT_GT(allocator_->BytesInUse(), in_use);
  codec_->Release(SlotForm::kRecord, words);
  EXPECT_EQ(allocator_->BytesInUse(), in_use);
  EXPECT_FALSE(allocator_->IsAllocated(words.word0));

  // Inline and empty slots own no block.
  KvWords inline_words = EncodeAndCheck("12345678", "abcdefgh", SlotForm::kInline);
  codec_->Release(SlotForm::kInline, inline_words);
  codec_->Release(SlotForm::kEmpty, KvWords{});
  EXPECT_EQ(allocator_->BytesInUse(), in_use);
}

TEST_F(SlotCodecTest, EncodeRecordMakesANewRecordForAnUpdate) {
  KvWords words = EncodeAndCheck("update me", "old", SlotForm::kRecord);
  uint64_t fresh = 0;
  ASSERT_TRUE(codec_->EncodeRecord("update me", "a new, longer value", &fresh).ok());
  EXPECT_NE(fresh, words.word0);
  KvWords updated{fresh, words.word1};
  EXPECT_EQ(codec_->Value(SlotForm::kRecord, updated), "a new, longer value");
  EXPECT_TRUE(codec_->KeyEquals(SlotForm::kRecord, updated, "update me", HashKey("update me", 0)));
  // The old record is untouched until the engine releases it.
  EXPECT_EQ(codec_->Value(SlotForm::kRecord, words), "old");
  codec_->ReleaseRecord(words.word0);
  EXPECT_FALSE(allocator_->IsAllocated(words.word0));
}

TEST_F(SlotCodecTest, VisitBlocksReportsOnlyRecords) {
  std::vector<uint64_t> seen;
  auto visit = [&](uint64_t off) { seen.push_back(off); };
  SlotCodec::VisitBlocks(SlotForm::kInline, KvWords{1, 2}, visit);
  SlotCodec::VisitBlocks(SlotForm::kEmpty, KvWords{3, 4}, visit);
  SlotCodec::VisitBlocks(SlotForm::kRecord, KvWords{4096 * 5, 4}, visit);
  EXPECT_EQ(seen, std::vector<uint64_t>{4096 * 5});
}

TEST_F(SlotCodecTest, PlausibleRejectsDamagedSlots) {
  EXPECT_TRUE(codec_->Plausible(SlotForm::kEmpty, KvWords{}));
  EXPECT_TRUE(codec_->Plausible(SlotForm::kInline, KvWords{~0ull, ~0ull}));
  EXPECT_FALSE(codec_->Plausible(static_cast<SlotForm>(7), KvWords{}));

  KvWords words = EncodeAndCheck("key", "value", SlotForm::kRecord);
  const uint64_t off = words.word0;
  auto with_offset = [&](uint64_t o) { return KvWords{o, words.word1}; };
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, with_offset(0)));  // the header
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, with_offset(pool_->heap_offset() - 16)));
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, with_offset(off + 8)));  // misaligned
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, with_offset(off + 4096)));  // unallocated
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, with_offset(pool_->size())));
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, with_offset(~0ull - 15)));

  // Damaged lengths: over the limits, or past the end of the block (key length: bits
  // 0..16 of the header word; value length: bits 17..37).
  uint64_t* header = pool_->At<uint64_t>(off);
  const uint64_t good = *header;
  const uint64_t checkless = good & ~((uint64_t{1} << 38) - 1);
  persister_->Store(header, checkless | (kMaxKeySize + 1));
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, words));
  persister_->Store(header, checkless | 3 | uint64_t{kMaxValueSize + 1} << 17);
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, words));
  persister_->Store(header, checkless | 3 | uint64_t{allocator_->UsableSize(off)} << 17);
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, words));
  persister_->Store(header, good);
  EXPECT_TRUE(codec_->Plausible(SlotForm::kRecord, words));

  // A freed record is no longer plausible.
  codec_->Release(SlotForm::kRecord, words);
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, words));
}

// Guards issue 13's "out-of-line records carry a checksum": every damaged byte of a
// record (its header, key or value, in any bits) makes it implausible, and so Corruption
// wherever engines validate slots (recovery, CheckInvariants); so does the same bytes at
// another offset (a record is bound to its place).
TEST_F(SlotCodecTest, EveryDamagedRecordByteIsImplausible) {
  const std::string key = "a key of 20 bytes...", value = "and a value of 27 bytes....";
  KvWords words = EncodeAndCheck(key, value, SlotForm::kRecord);
  char* rec = pool_->At<char>(words.word0);
  const size_t size = SlotCodec::kRecordHeaderSize + key.size() + value.size();
  for (size_t i = 0; i < size; ++i) {
    for (const uint8_t mask : {0x01, 0x10, 0x80, 0xff}) {
      persister_->Store(reinterpret_cast<uint8_t*>(rec + i),
                        static_cast<uint8_t>(rec[i] ^ mask));
      EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, words)) << "byte " << i << " ^ " << +mask;
      persister_->Store(reinterpret_cast<uint8_t*>(rec + i),
                        static_cast<uint8_t>(rec[i] ^ mask));
    }
  }
  EXPECT_TRUE(codec_->Plausible(SlotForm::kRecord, words));
  EXPECT_EQ(codec_->Key(SlotForm::kRecord, words), key);
  EXPECT_EQ(codec_->Value(SlotForm::kRecord, words), value);
  // A copy of the record in another block of the same size class is not plausible.
  KvWords other = EncodeAndCheck(std::string(20, 'x'), std::string(27, 'y'), SlotForm::kRecord);
  persister_->Copy(pool_->At<char>(other.word0), rec, size);
  EXPECT_FALSE(codec_->Plausible(SlotForm::kRecord, KvWords{other.word0, words.word1}));
}

TEST_F(SlotCodecTest, FullPoolIsResourceExhausted) {
  Make(pm::kMinPoolSize);
  const std::string value(kMaxValueSize, 'v');
  Status s;
  int stored = 0;
  for (int i = 0; i < 100 && s.ok(); ++i) {
    SlotForm form;
    KvWords words;
    std::string key = "k";
    key += std::to_string(i);  // (not "k" + ...: GCC 12 -Wrestrict false positive)
    s = codec_->Encode(key, value, 0, &form, &words);
    if (s.ok()) ++stored;
  }
  EXPECT_TRUE(s.IsResourceExhausted()) << s.ToString();
  EXPECT_LT(stored, 4);  // a 4 MiB pool cannot hold four 1 MiB values
}

}  // namespace
}  // namespace pmhash
