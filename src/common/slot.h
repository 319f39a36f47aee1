// The shared slot encoding: how a key and value sit in an engine's 16-byte slot.
//
//   inline form (key and value of exactly 8 bytes, the papers' fast path):
//     word0 = the key's 8 bytes, word1 = the value's 8 bytes
//   record form (anything else, up to kMaxKeySize / kMaxValueSize):
//     word0 = pool offset of a record, word1 = HashKey(key) (compared before the record
//     is read, so a mismatch costs no PM read)
//     record = struct { uint64 header; key bytes; value bytes; }, header = key length
//     (17 bits), value length (21 bits) and a 26-bit check of the lengths, the bytes and
//     the record's pool offset (slot.cc), written once with the record.
//
// What is verified: a record is written once and never changes, so its check holds for
// its whole life. Plausible verifies it, and every engine calls Plausible on every slot
// when it recovers after a crash and in CheckInvariants, so a damaged record (header,
// key or value) is Corruption there; smartht's Get and ForEach call it too. The other
// engines' Get does not verify (Value returns a view with no Status to report through,
// and verifying costs one hash of key and value per read): a damaged record there reads
// as a wrong key (a miss) or a wrong value until recovery or a check finds it.
// Not protected: the inline form (16 bytes in the slot, no room for a check) and the
// engines' per-slot metadata; a damaged byte there is found only where an engine's own
// invariants catch it (e.g. a key outside its home bucket).
//
// The form is not derivable from the words, so each engine keeps it in its per-slot
// metadata (token, bitmap byte), which is also the slot's commit point:
// SlotForm::kEmpty (0) means "no entry".
//
// Updates: an inline slot takes a new 8-byte value with one failure-atomic store of
// word1; a record slot takes a new record with one failure-atomic store of word0 (the
// old record is freed after the new pointer is durable). A record slot stays a record
// slot. An inline slot whose new value is not 8 bytes becomes a record slot, which
// changes word0, word1 and the form together: engines do that under an UndoLog Tx.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "pm/alloc.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/regions.h"
#include "pmhash/index.h"

namespace pmhash {

enum class SlotForm : uint8_t { kEmpty = 0, kInline = 1, kRecord = 2 };

struct KvWords {
  uint64_t word0 = 0;
  uint64_t word1 = 0;
};
static_assert(sizeof(KvWords) == 16 && offsetof(KvWords, word0) == 0 &&
                  offsetof(KvWords, word1) == 8,
              "a key-value slot is two 8-byte words, each stored failure-atomically");

class SlotCodec {
 public:
  // Bytes before a record's key: one header word (format above; part of the media format).
  static constexpr size_t kRecordHeaderSize = 8;

  SlotCodec(pm::Pool& pool, pm::Persister& persister, pm::Allocator& allocator)
      : pool_(pool), persister_(persister), allocator_(allocator) {}

  // InvalidArgument naming the limit when a key (or a key or value) is too long. Every
  // call that takes a key checks it, so an oversized key is never merely NotFound.
  // Inline: every Get and Delete calls it, and the OK path must cost a compare, not a
  // Status built and destroyed in another translation unit.
  static Status CheckKey(std::string_view key) {
    return key.size() <= kMaxKeySize ? Status::OK() : KeyTooLong(key.size());
  }
  static Status CheckSizes(std::string_view key, std::string_view value);
  static bool FitsInline(std::string_view key, std::string_view value) {
    return key.size() == 8 && value.size() == 8;
  }

  // Words for a new slot. Record form: allocates and writes the record and flushes it
  // (no fence: the caller fences before its commit store). ResourceExhausted if full.
  Status Encode(std::string_view key, std::string_view value, uint64_t key_hash,
                SlotForm* form, KvWords* words);
  // A record for an existing record slot's key with a new value (update).
  Status EncodeRecord(std::string_view key, std::string_view value, uint64_t* record_offset);
  // For engines that place records themselves (spash packs small ones into chunks of
  // its own): the bytes a record of key and value takes, and the record written at
  // `offset` (RecordBytes of room, 8-byte aligned, unreachable until the caller links
  // it), not flushed.
  static uint64_t RecordBytes(size_t key_len, size_t value_len) {
    return kRecordHeaderSize + key_len + value_len;
  }
  void WriteRecord(uint64_t offset, std::string_view key, std::string_view value);
  // RecordBytes of the record at `offset` as its header says (no check; 0 if the header
  // would lie outside the heap): what a record's room is when the engine frees it.
  uint64_t RecordBytesAt(uint64_t offset) const;
  // Plausible for a record that is not an allocator block of its own: it lies in
  // [offset, offset + room) inside the heap, 8-byte aligned, with plausible lengths and
  // its check holding over every byte. The caller vouches for the room.
  bool PlausibleRecordAt(uint64_t offset, uint64_t room) const;

  // Does the slot hold `key`? Reads the record only when the hash matches.
  bool KeyEquals(SlotForm form, const KvWords& words, std::string_view key,
                 uint64_t key_hash) const {
    return KeyMatcher(*this, key, key_hash)(form, words);
  }
  // `key` prepared for comparing with many slots (a probe's candidates; group compares a
  // whole level-2 group): its inline word loaded once, records read out of line. Inline
  // because an out-of-line KeyEquals paid its record path's call frame on every inline
  // compare (perf: the frame's pushes and pops beside the one load that matters).
  class KeyMatcher {
   public:
    KeyMatcher(const SlotCodec& codec, std::string_view key, uint64_t key_hash)
        : codec_(codec), key_(key), key_hash_(key_hash), inline_(key.size() == 8) {
      if (inline_) std::memcpy(&key_word_, key.data(), 8);
    }
    bool operator()(SlotForm form, const KvWords& words) const {
      if (form == SlotForm::kInline) return inline_ && words.word0 == key_word_;
      return form == SlotForm::kRecord && codec_.RecordKeyEquals(words, key_, key_hash_);
    }

   private:
    const SlotCodec& codec_;
    std::string_view key_;
    uint64_t key_hash_;
    uint64_t key_word_ = 0;
    bool inline_;
  };
  // The slot's key and value (views into PM for the record form, into `words` inline;
  // valid while the slot is unchanged). Empty for a record outside the heap (a damaged
  // pool; engines reject such slots with Plausible when they recover).
  std::string_view Key(SlotForm form, const KvWords& words) const;
  std::string_view Value(SlotForm form, const KvWords& words) const;

  // Frees the record of a record slot that is durably unreachable. No-op inline.
  void Release(SlotForm form, const KvWords& words);
  void ReleaseRecord(uint64_t record_offset);

  // For Allocator::Rebuild: visits the record of a record slot.
  static void VisitBlocks(SlotForm form, const KvWords& words,
                          const pm::Allocator::LiveBlockVisitor& visit) {
    if (form == SlotForm::kRecord) visit(words.word0);
  }
  // Marks a record slot's record, the bytes its check covers (header, key and value), as
  // pm::Region::kRecords, checked (Plausible finds any damaged byte). Nothing for other
  // forms or a record that would lie outside the heap.
  void DescribeRecord(SlotForm form, const KvWords& words, const pm::RegionVisitor& mark) const;
  // Whether a slot read from PM is well-formed (known form; record allocated, inside the
  // heap, with plausible lengths, and its check holding over every byte). Recovery uses
  // it to reject a damaged pool with Corruption.
  bool Plausible(SlotForm form, const KvWords& words) const;

 private:
  static Status KeyTooLong(size_t size);
  bool RecordKeyEquals(const KvWords& words, std::string_view key, uint64_t key_hash) const;

  struct RecordHeaderView {
    uint64_t key_len, value_len;
  };
  // The record at `offset` and its lengths, or nullptr when the record would lie outside
  // the heap (a damaged pool): readers then see no key and an empty value, not a crash.
  const char* RecordAt(uint64_t offset, RecordHeaderView* header) const;

  pm::Pool& pool_;
  pm::Persister& persister_;
  pm::Allocator& allocator_;
};

}  // namespace pmhash
