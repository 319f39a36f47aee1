#include "support/scripts.h"

#include <random>

#include "util/hash.h"

namespace pmhash::testing {
namespace {

std::string Key8(uint64_t i) {
  std::string k(8, '\0');
  for (int b = 0; b < 8; ++b) k[b] = static_cast<char>((i * 0x9e3779b97f4a7c15ull) >> (8 * b));
  return k;
}

std::string Value(std::mt19937_64& rng, size_t len, uint64_t tag) {
  std::string v(len, '\0');
  uint64_t x = tag * 0x2545f4914f6cdd1dull + rng();
  for (size_t i = 0; i < len; ++i) {
    v[i] = static_cast<char>(x >> (8 * (i % 8)));
    if (i % 8 == 7) x = x * 6364136223846793005ull + 1442695040888963407ull;
  }
  return v;
}

// Keys that land in one bucket of most designs: equal low 8 and high 4 hash bits.
std::vector<std::string> SkewedKeys(size_t n, uint64_t seed) {
  std::vector<std::string> out;
  std::mt19937_64 rng(seed);
  while (out.size() < n) {
    std::string k = Key8(rng());
    const uint64_t h = HashKey(k);
    if ((h & 0xff) == 0x5a && (h >> 60) == 0x3) out.push_back(k);
  }
  return out;
}

}  // namespace

std::vector<Script> StandardScripts(uint64_t seed, double scale) {
  auto n = [&](size_t base) { return static_cast<size_t>(base * scale); };
  std::mt19937_64 rng(seed);
  std::vector<Script> scripts;

  // Inline inserts from a tiny table: every resize / split / doubling, then updates.
  Script grow{"grow", {}, 16};
  for (size_t i = 0; i < n(300); ++i) grow.ops.push_back({Op::kInsert, Key8(i), Value(rng, 8, i)});
  for (size_t i = 0; i < n(60); ++i) {
    grow.ops.push_back({Op::kUpdate, Key8(rng() % n(300)), Value(rng, 8, i)});
  }
  scripts.push_back(std::move(grow));

  // Skewed keys hammering one bucket: overflow, splits, moves; deletes and re-inserts.
  Script skew{"skewed", {}, 16};
  std::vector<std::string> keys = SkewedKeys(n(160), seed);
  for (size_t i = 0; i < keys.size(); ++i) skew.ops.push_back({Op::kInsert, keys[i], Value(rng, 8, i)});
  for (size_t i = 0; i < keys.size(); i += 3) skew.ops.push_back({Op::kDelete, keys[i], ""});
  for (size_t i = 0; i < keys.size(); i += 3) {
    skew.ops.push_back({Op::kInsert, keys[i], Value(rng, 8, i + 1)});
  }
  scripts.push_back(std::move(skew));

  // Mixed operations and sizes over a small key space: inline and out-of-line keys and
  // values, inline <-> record transitions, empty and binary keys, failing calls.
  Script mixed{"mixed", {}, 16};
  std::vector<std::string> space;
  for (int i = 0; i < 90; ++i) space.push_back(Key8(1000 + i));
  for (int i = 0; i < 30; ++i) space.push_back(std::string("k").append(std::to_string(i)));
  space.push_back("");
  space.push_back(std::string("\0", 1));
  space.push_back(std::string("a\0b", 3));
  space.push_back(std::string(300, 'L'));
  for (size_t i = 0; i < n(700); ++i) {
    const std::string& k = space[rng() % space.size()];
    const size_t r = rng() % 10;
    const size_t vlen = r < 6 ? 8 : r < 8 ? 1 + rng() % 40 : 100 + rng() % 500;
    const auto kind = static_cast<Op::Kind>(rng() % 4);
    mixed.ops.push_back({kind, k, kind == Op::kDelete ? "" : Value(rng, vlen, i)});
  }
  scripts.push_back(std::move(mixed));

  // Churn: fill, empty, refill (tombstones, freed blocks reused).
  Script churn{"churn", {}, 64};
  for (size_t i = 0; i < n(150); ++i) churn.ops.push_back({Op::kInsert, Key8(5000 + i), Value(rng, 8, i)});
  for (size_t i = 0; i < n(150); ++i) churn.ops.push_back({Op::kDelete, Key8(5000 + i), ""});
  for (size_t i = 0; i < n(150); ++i) {
    churn.ops.push_back({Op::kPut, Key8(5000 + i), Value(rng, i % 2 ? 8 : 24, i)});
  }
  scripts.push_back(std::move(churn));
  return scripts;
}

}  // namespace pmhash::testing
