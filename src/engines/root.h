// The root header every engine's root area opens with (Engine::root, pm::kRootOffset);
// the engine's own root fields follow it. Engine creates, validates and shuts it down
// for every engine (CreateRoot, OpenRoot / ValidateRoot, Close), so no engine repeats it.
//
//   struct EngineRoot {      // 32 bytes at the start of the root area
//     uint64 magic;          // the engine's root magic: stored last at creation, so a
//                            // root is valid only once everything before it is durable
//     uint32 version;        // the engine's layout version (bumped when its layout changes)
//     uint32 check;          // the low 32 bits of Hash64 over magic, version and the
//                            // engine's fixed root fields (RootLayout::fixed_bytes after
//                            // this header), which never change after creation
//     uint64 table;          // sealed word (util/hash.h, salt = its pool offset): pool
//                            // offset of the live table. A resize switches it with one
//                            // failure-atomic 8-byte store (the resize's commit point)
//     uint64 count;          // sealed word: keys stored, exact after a clean Close (the
//                            // kit stores it), recounted by an engine's recovery after a
//                            // crash
//   };
//   ... the engine's own fields (RootLayout::bytes in all); every byte after them, to the
//   end of the 4 KiB root area, is zero.
//
// So every byte of the root area checks itself: a damaged one is Corruption at open,
// naming the engine, the field and its pool offset (Engine::ValidateRoot). The mutable
// words are sealed rather than covered by `check`, so each update stays one failure-atomic
// store. An engine's own mutable root words are sealed the same way (Engine::StoreSealed,
// LoadSealed). Layout versions 1 (before these checks) are refused by the version check.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pmhash::engines {

struct EngineRoot {
  uint64_t magic;
  uint32_t version;
  uint32_t check;
  uint64_t table;
  uint64_t count;
};
static_assert(sizeof(EngineRoot) == 32, "the root header is four words");
static_assert(offsetof(EngineRoot, magic) == 0 && offsetof(EngineRoot, version) == 8 &&
                  offsetof(EngineRoot, check) == 12 && offsetof(EngineRoot, table) == 16 &&
                  offsetof(EngineRoot, count) == 24,
              "the header's words sit where every engine kept them");
static_assert(offsetof(EngineRoot, table) % 8 == 0 && offsetof(EngineRoot, count) % 8 == 0,
              "table and count are stored with one failure-atomic 8-byte store each");

// What an engine's root area holds, for CreateRoot and ValidateRoot.
struct RootLayout {
  uint64_t magic;
  uint32_t version;
  size_t bytes;        // the engine's root: EngineRoot and its own fields (<= 4 KiB)
  size_t fixed_bytes;  // of those, the fields right after EngineRoot that never change
                       // after creation (covered by EngineRoot::check)
};

// The first two words of every engine's table block (the block root.table links):
//
//   struct TableHeader {
//     uint64 magic;  // the engine's table magic
//     uint64 size;   // the table's size in the engine's unit (cells per level, buckets, lines)
//   };
//
// Engine::NewTableBlock writes them and ValidateTableBlock checks them; the engine's own
// header fields follow (each engine static_asserts that its header starts this way).
struct TableHeader {
  uint64_t magic;
  uint64_t size;
};
static_assert(sizeof(TableHeader) == 16 && offsetof(TableHeader, magic) == 0 &&
                  offsetof(TableHeader, size) == 8,
              "where every engine's table header kept its magic and size (existing pools)");

}  // namespace pmhash::engines
