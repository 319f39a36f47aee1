#include "common/slot.h"

#include <cstddef>
#include <cstring>
#include <string>

#include "util/hash.h"

namespace pmhash {
namespace {

// The fixed part of an out-of-line record, one 8-byte word; key and value bytes follow.
//   bits  0..16  key length    (0 .. kMaxKeySize)
//   bits 17..37  value length  (0 .. kMaxValueSize)
//   bits 38..63  check: the top 26 bits of Hash64(value, seed = Hash64(key, seed = the
//                record's pool offset ^ the two lengths))
constexpr int kKeyLenBits = 17, kValueLenBits = 21, kCheckShift = kKeyLenBits + kValueLenBits;
static_assert(kMaxKeySize < (uint64_t{1} << kKeyLenBits) &&
                  kMaxValueSize < (uint64_t{1} << kValueLenBits),
              "the lengths fit their fields");
constexpr uint64_t kKeyLenMask = (uint64_t{1} << kKeyLenBits) - 1;
constexpr uint64_t kValueLenMask = (uint64_t{1} << kValueLenBits) - 1;
constexpr uint64_t kLengthsMask = (uint64_t{1} << kCheckShift) - 1;

struct RecordHeader {
  uint64_t word;
  uint64_t key_len() const { return word & kKeyLenMask; }
  uint64_t value_len() const { return (word >> kKeyLenBits) & kValueLenMask; }
};
static_assert(sizeof(RecordHeader) == SlotCodec::kRecordHeaderSize &&
                  offsetof(RecordHeader, word) == 0,
              "the record header is one 8-byte word, before the key");

// The header word of a record at `offset` holding key and value.
uint64_t RecordWord(uint64_t offset, std::string_view key, std::string_view value) {
  const uint64_t lengths = key.size() | uint64_t{value.size()} << kKeyLenBits;
  const uint64_t check =
      Hash64(value.data(), value.size(), Hash64(key.data(), key.size(), offset ^ lengths));
  return lengths | (check >> kCheckShift) << kCheckShift;
}

// The allocator aligns every block to 16 bytes at least (src/pm/alloc.h).
constexpr uint64_t kMinBlockAlign = 16;

}  // namespace

Status SlotCodec::KeyTooLong(size_t size) {
  return Status::InvalidArgument("key too long: " + std::to_string(size) +
                                 " bytes (limit kMaxKeySize = " +
                                 std::to_string(kMaxKeySize) + " bytes)");
}

Status SlotCodec::CheckSizes(std::string_view key, std::string_view value) {
  PMHASH_RETURN_IF_ERROR(CheckKey(key));
  if (value.size() > kMaxValueSize) {
    return Status::InvalidArgument("value too long: " + std::to_string(value.size()) +
                                   " bytes (limit kMaxValueSize = " +
                                   std::to_string(kMaxValueSize) + " bytes)");
  }
  return Status::OK();
}

Status SlotCodec::Encode(std::string_view key, std::string_view value, uint64_t key_hash,
                         SlotForm* form, KvWords* words) {
  if (FitsInline(key, value)) {
    // Only the caller's DRAM copy is written here; the engine stores the words into PM.
    std::memcpy(&words->word0, key.data(), 8);
    std::memcpy(&words->word1, value.data(), 8);
    *form = SlotForm::kInline;
    return Status::OK();
  }
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(EncodeRecord(key, value, &offset));
  words->word0 = offset;
  words->word1 = key_hash;
  *form = SlotForm::kRecord;
  return Status::OK();
}

Status SlotCodec::EncodeRecord(std::string_view key, std::string_view value,
                               uint64_t* record_offset) {
  PMHASH_RETURN_IF_ERROR(CheckSizes(key, value));
  const uint64_t size = SlotCodec::RecordBytes(key.size(), value.size());
  Result<uint64_t> block = allocator_.Allocate(size);
  if (!block.ok()) return block.status();
  const uint64_t offset = *block;
  char* rec = pool_.At<char>(offset);
  WriteRecord(offset, key, value);
  // No fence: the caller fences once before its commit store.
  persister_.Flush(rec, size);
  *record_offset = offset;
  return Status::OK();
}

void SlotCodec::WriteRecord(uint64_t offset, std::string_view key, std::string_view value) {
  char* rec = pool_.At<char>(offset);
  // Header as one aligned 8-byte store, its check computed from the caller's bytes: the
  // record is written once and never changes.
  persister_.Store(reinterpret_cast<uint64_t*>(rec), RecordWord(offset, key, value));
  if (!key.empty()) persister_.Copy(rec + sizeof(RecordHeader), key.data(), key.size());
  if (!value.empty()) {
    persister_.Copy(rec + sizeof(RecordHeader) + key.size(), value.data(), value.size());
  }
}

const char* SlotCodec::RecordAt(uint64_t offset, RecordHeaderView* header) const {
  // Bounds before any read: a pointer from a damaged pool must not become a wild read.
  if (offset < pool_.heap_offset() || offset > pool_.size() - sizeof(RecordHeader)) {
    return nullptr;
  }
  const char* rec = pool_.At<const char>(offset);
  RecordHeader h;
  std::memcpy(&h, rec, sizeof(h));
  if (SlotCodec::RecordBytes(h.key_len(), h.value_len()) > pool_.size() - offset) {
    return nullptr;
  }
  header->key_len = h.key_len();
  header->value_len = h.value_len();
  return rec;
}

uint64_t SlotCodec::RecordBytesAt(uint64_t offset) const {
  RecordHeaderView header;
  if (RecordAt(offset, &header) == nullptr) return 0;
  return RecordBytes(header.key_len, header.value_len);
}

bool SlotCodec::RecordKeyEquals(const KvWords& words, std::string_view key,
                                uint64_t key_hash) const {
  // The hash word lives in the slot: a mismatch rejects without touching the record.
  if (words.word1 != key_hash) return false;
  RecordHeaderView header;
  const char* rec = RecordAt(words.word0, &header);
  if (rec == nullptr) return false;
  // The record is this codec's read, so it reports it (engines report their buckets).
  const size_t compared = header.key_len == key.size() ? key.size() : 0;
  persister_.NoteRead(rec, sizeof(RecordHeader) + compared);
  return header.key_len == key.size() &&
         (key.empty() || std::memcmp(rec + sizeof(RecordHeader), key.data(), key.size()) == 0);
}

std::string_view SlotCodec::Key(SlotForm form, const KvWords& words) const {
  switch (form) {
    case SlotForm::kInline:
      return std::string_view(reinterpret_cast<const char*>(&words.word0), 8);
    case SlotForm::kRecord: {
      RecordHeaderView header;
      const char* rec = RecordAt(words.word0, &header);
      if (rec == nullptr) break;
      persister_.NoteRead(rec, sizeof(RecordHeader) + header.key_len);
      return std::string_view(rec + sizeof(RecordHeader), header.key_len);
    }
    case SlotForm::kEmpty:
      break;
  }
  return std::string_view();
}

std::string_view SlotCodec::Value(SlotForm form, const KvWords& words) const {
  switch (form) {
    case SlotForm::kInline:
      return std::string_view(reinterpret_cast<const char*>(&words.word1), 8);
    case SlotForm::kRecord: {
      RecordHeaderView header;
      const char* rec = RecordAt(words.word0, &header);
      if (rec == nullptr) break;
      const char* value = rec + sizeof(RecordHeader) + header.key_len;
      // The header and the value (the caller reads it), not the key between them.
      persister_.NoteRead(rec, sizeof(RecordHeader));
      persister_.NoteRead(value, header.value_len);
      return std::string_view(value, header.value_len);
    }
    case SlotForm::kEmpty:
      break;
  }
  return std::string_view();
}

void SlotCodec::Release(SlotForm form, const KvWords& words) {
  if (form == SlotForm::kRecord) ReleaseRecord(words.word0);
}

void SlotCodec::ReleaseRecord(uint64_t record_offset) { allocator_.Free(record_offset); }

void SlotCodec::DescribeRecord(SlotForm form, const KvWords& words,
                               const pm::RegionVisitor& mark) const {
  if (form != SlotForm::kRecord) return;
  RecordHeaderView header;
  if (RecordAt(words.word0, &header) == nullptr) return;
  mark(words.word0, SlotCodec::RecordBytes(header.key_len, header.value_len), pm::Region::kRecords,
       true);
}

bool SlotCodec::Plausible(SlotForm form, const KvWords& words) const {
  switch (form) {
    case SlotForm::kEmpty:
    case SlotForm::kInline:
      return true;  // any 16 bytes are a valid inline key and value
    case SlotForm::kRecord:
      break;
    default:
      return false;  // a form byte no engine writes
  }
  // Check the offset arithmetically before asking the allocator or reading anything, so
  // a wild offset never becomes a wild read.
  const uint64_t offset = words.word0;
  const uint64_t heap_begin = pool_.heap_offset();
  const uint64_t heap_end = heap_begin + pool_.heap_size();
  if (offset < heap_begin || offset >= heap_end || heap_end - offset < sizeof(RecordHeader) ||
      offset % kMinBlockAlign != 0) {
    return false;
  }
  if (!allocator_.IsAllocated(offset)) return false;
  return PlausibleRecordAt(offset, allocator_.UsableSize(offset));
}

bool SlotCodec::PlausibleRecordAt(uint64_t offset, uint64_t room) const {
  const uint64_t heap_begin = pool_.heap_offset();
  const uint64_t heap_end = heap_begin + pool_.heap_size();
  if (offset < heap_begin || offset >= heap_end || heap_end - offset < sizeof(RecordHeader) ||
      offset % sizeof(RecordHeader) != 0) {
    return false;
  }
  RecordHeader header;
  std::memcpy(&header, pool_.At<const char>(offset), sizeof(header));
  if (header.key_len() > kMaxKeySize || header.value_len() > kMaxValueSize) return false;
  const uint64_t size = SlotCodec::RecordBytes(header.key_len(), header.value_len());
  if (size > heap_end - offset || size > room) return false;
  // The record's check: every byte of it as written.
  const char* key = pool_.At<const char>(offset) + sizeof(RecordHeader);
  return RecordWord(offset, std::string_view(key, header.key_len()),
                    std::string_view(key + header.key_len(), header.value_len())) == header.word;
}

}  // namespace pmhash
