// Scan, once for every engine: the cursor and the page (Index::Scan's contract in
// include/pmhash/index.h; docs/architecture.md, "Scan").
//
// The cursor is a position in hash order. Every engine's home (cell, bucket, head bucket,
// directory entry) is Reduce(hash, homes) (util/hash.h), which grows with the hash: home k
// holds exactly the keys whose hash lies in [HomeStart(k), HomeStart(k + 1)), HomeStart(k)
// = ceil(k * 2^64 / homes). A page that starts at position p reads the homes from
// Reduce(p, homes) on, in order, each whole, and ends at a home boundary b once it holds
// max_keys keys: it has then read every key whose hash lies in [p, b), and the next page
// starts at b. A position names no table address, only a point of the hash space, so it
// stays valid whatever the table does between pages: a doubling (home k becomes 2k and
// 2k + 1, whose boundaries include the old ones), a split of an extendible table's
// segment, a table of another size altogether. An extendible table indexes its directory
// by the top bits of the hash as well: its homes are the directory entries, and a segment
// shared by several entries is read whole and filtered (CollectHomes drops what lies
// outside the homes asked for), so CCEH- and Spash-like engines fit the same cursor.
//
// Why a key present for the whole scan is read at least once: every position from 0 to
// the end lies in exactly one page's [p, b), and the page that covers a key's hash reads
// the key's home with the table held still (the engine keeps it from resizing during the
// page: CollectHomes' contract), so a key that is there throughout is there then. Keys
// move between pages (a resize, linear probing's shifts) but never leave their home, and
// the home is all a position depends on.
//
// The cursor word (Engine::Scan): bits 16..63 are the position's top 48 bits, bits 0..15
// a check of them keyed with the pool's uuid and seed (ScanCursorCheck), so a cursor from
// another pool or an arbitrary word is InvalidArgument (but for a chance of 2^-16; the
// check is never 0, so a cursor is 0 only at the start and at the end). A
// boundary is therefore rounded down to a multiple of 2^16 before it becomes a cursor:
// the next page starts up to 2^16 positions early and may read again a key of the
// previous home whose hash lies in that sliver (the "rarely" of a repeated key; with the
// table's homes 2^40 or fewer, a sliver is at most 1/2^8 of a home). Only home
// boundaries are ever handed out, never a key's hash: those depend on the table's size
// alone, so a cursor reveals nothing of the seed (the order of the keys in a page does
// tell which keys share a home: docs/reliability.md, "Crafted keys").
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/hash.h"

namespace pmhash::engines {

// A key a page read, with its KeyHash and value.
struct ScanEntry {
  uint64_t hash = 0;
  std::string key, value;
};

// Appends a key read by a page, copying key and value (views into PM, valid only under
// the engine's lock). Out of line on purpose: copying strings inline into every engine's
// DoScan cost linear's Get its inlined value copy (GCC spent the translation unit's
// inlining budget on DoScan: +18 instructions a Get, counted with callgrind).
void AddScanEntry(std::vector<ScanEntry>* out, uint64_t hash, std::string_view key,
                  std::string_view value);

// Low bits of a position that a cursor word gives to its check.
inline constexpr unsigned kScanCheckBits = 16;
inline constexpr uint64_t kScanCheckMask = (uint64_t{1} << kScanCheckBits) - 1;

// The first position of home k of `homes` (k <= homes; homes itself: 2^64, the end),
// rounded down to a cursor's resolution: a page may end there.
inline unsigned __int128 HomeStart(uint64_t k, uint64_t homes) {
  const unsigned __int128 exact =
      ((static_cast<unsigned __int128>(k) << 64) + homes - 1) / homes;
  return exact & ~static_cast<unsigned __int128>(kScanCheckMask);
}

// One Scan page, as an engine's DoScan collects it.
class ScanPage {
 public:
  // `from`: the position the page starts at (a multiple of 2^16, 0 at the start).
  ScanPage(uint64_t from, size_t max_keys) : from_(from), max_keys_(max_keys) {}

  uint64_t from() const { return from_; }

  // Collects the page from a table of `homes` homes (homes >= 1; home k holds the keys
  // with Reduce(KeyHash(key), homes) == k). Calls collect(first, last, &entries) for runs
  // of homes in order, the first from Reduce(from, homes) to the next multiple of `area`
  // (area >= 1), the others `area` homes long, until the page holds max_keys keys at a
  // home boundary past `from`, or the table ends. collect appends every key whose home
  // lies in [first, last), with its hash and value; what else it appends is dropped (the
  // other keys of a shared chain, group or segment, the displaced keys of a probing run).
  // The engine keeps the table from resizing until this returns (the homes of one page
  // are of one table), and takes whatever lock a home needs inside collect.
  template <typename Collect>
  void CollectHomes(uint64_t homes, uint64_t area, Collect&& collect) {
    homes_ = homes;
    std::vector<ScanEntry> run;
    for (uint64_t k = Reduce(from_, homes); k < homes;) {
      const uint64_t last = std::min(homes, (k / area + 1) * area);
      run.clear();
      collect(k, last, &run);
      if (TakeHomes(k, last, &run)) return;
      k = last;
    }
    done_ = true;
  }

  // The keys read, in hash order.
  const std::vector<ScanEntry>& entries() const { return entries_; }
  // Whether the page reached the end of the table; else the next page's position.
  bool done() const { return done_; }
  uint64_t next() const { return next_; }
  // Where a page that resumes at the home of `hash` starts (after a visitor stopped
  // early): that home's first position, or `from` if that lies before it.
  uint64_t ResumeAt(uint64_t hash) const;

 private:
  // Moves the keys of homes [first, last) from *run into the page, home by home; true
  // when the page is complete (next_ set).
  bool TakeHomes(uint64_t first, uint64_t last, std::vector<ScanEntry>* run);

  const uint64_t from_;
  const size_t max_keys_;
  uint64_t homes_ = 1;
  std::vector<ScanEntry> entries_;
  bool done_ = false;
  uint64_t next_ = 0;
};

// The check bits of a cursor word at `position`, keyed with `key` (Engine: the pool's
// uuid and seed): never 0, so that no cursor but the first and the last is 0, not even
// one at position 0 (a visitor that stopped in the first home of the first page).
inline uint64_t ScanCursorCheck(uint64_t position, uint64_t key) {
  const uint64_t check = Hash64(&position, sizeof(position), key) >> (64 - kScanCheckBits);
  return check != 0 ? check : 1;
}

}  // namespace pmhash::engines
