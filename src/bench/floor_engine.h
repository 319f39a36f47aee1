// The floor's test engine, `floor-api`: an Engine whose QuickGet (and DoGet) reads one
// random 64-byte line of a table as large as its pool and returns the line's first word.
// `pmhash bench --floor` runs its lookups through the whole public path (the bench loop,
// Index::Get, the kit's key check, hash and operation bracket, the virtual QuickGet or
// DoGet, Status and the value copy) and prints them as "lookup through the API" beside the plain lookup loop
// over the same kind of table: the gap between the two is what the path costs, the part
// every engine pays before its own probe (BENCHMARKS.md, issue 29).
//
// Why it lives here: the benchmark must reach it, and src/bench may not include tests/
// (tests/support holds the suites' test-only engines). It is not an index (it stores no
// key: every key finds the line its hash picks), so it is not registered in the library:
// no Open reaches it and no generic suite runs on it. It is made with MakeEngine and opened
// with OpenEngine on a pool the floor creates, as the suites open their test-only engines.
//
// ---- On-media layout ----------------------------------------------------------------
//
//   root area: the kit's root header alone (engines/root.h), table = the line table
//   table block (allocator, a large run taking most of the heap):
//   struct FloorLines {
//     uint64 magic;       // kFloorLinesMagic
//     uint64 lines;       // N
//     uint8  pad[48];
//     FloorLine line[N];  // 64 bytes each; line k's first word is FloorWord(k)
//   };
//
// ---- Invariants -----------------------------------------------------------------------
//
// Get(key) is OK with the 8-byte value FloorWord(Reduce(KeyHash(key), N)); nothing
// changes after Create. The lines are written at creation and not persisted: a crashed
// pool reopens (Recover validates the root and the table header) with whatever the lines
// hold, which no measurement reads (the floor never reopens its pool). Insert, Update,
// Put and Delete are refused (InvalidArgument); Count() is 0 and ForEach visits nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engines/engine.h"

namespace pmhash::bench {

inline constexpr uint64_t kFloorRootMagic = 0x31524c4650484d50ull;   // "PMHPFLR1"
inline constexpr uint64_t kFloorLinesMagic = 0x314c4c4650484d50ull;  // "PMHPFLL1"
inline constexpr const char* kFloorEngineName = "floor-api";

struct alignas(64) FloorLine {
  uint64_t word[8];
};
static_assert(sizeof(FloorLine) == 64, "a line is one cache line: one miss per lookup");

// The first word of line k: what the floor's loops read from their bucket k too.
uint64_t FloorWord(uint64_t line);

// A `floor-api` engine object for OpenEngine (the pool it is opened on must be named
// kFloorEngineName, e.g. pm::Pool::CreateDram(kFloorEngineName, ...)).
std::unique_ptr<engines::Engine> MakeFloorEngine();

// The lines of an open `floor-api` engine's table.
uint64_t FloorEngineLines(const engines::Engine& engine);

}  // namespace pmhash::bench
