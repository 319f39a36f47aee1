// Workload generation for the benchmark driver: keys, values, and the distributions that
// pick which key an operation touches. Everything here runs before the timed part.
//
// Keys are named by a 64-bit index. Positive keys (inserted by load) have indices below
// 2^63; negative keys (never inserted) have bit 63 set, so the two sets are disjoint. An
// index becomes a key through KeySpace: with sequential keys the first 8 bytes are the
// index itself (the papers' SequenceNum trace), with crafted keys the first of a series
// of candidates that hashes where the flood wants it, otherwise a bijective mix of the
// index (random keys, distinct by construction); bytes past the 8th are derived from the
// first 8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/status.h"
#include "util/hash.h"

namespace pmhash::bench {

inline constexpr uint64_t kNegativeBit = 1ull << 63;

// splitmix64's finalizer: a bijection on 64-bit words (each step is invertible).
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// A small fast PRNG (xoshiro256**), seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, n) (n > 0), by multiply-shift.
  uint64_t Below(uint64_t n) { return Reduce(Next(), n); }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

// Which distribution picks keys (and, for sequential and crafted, which keys there are).
struct DistSpec {
  enum class Kind { kUniform, kZipfian, kSelfSimilar, kSequential, kCrafted };
  Kind kind = Kind::kUniform;
  double param = 0;  // zipfian constant (default 0.99), self-similar skew (default 0.2),
                     // crafted: hash bits the keys share (default 12)
};
// "uniform" | "zipfian[:theta]" | "selfsimilar[:h]" | "sequential" | "crafted[:bits]".
Status ParseDist(const std::string& text, DistSpec* out);
std::string DistName(const DistSpec& spec);

// --dist crafted[:B]: keys whose xxh3 hashes under seed 0 (the unseeded hash of layout-3
// pools) share their top B bits, all 0: in a pool of seed 0 every key has home 0 in any
// table of up to 2^B homes, and the keys crowd into the first 2^-B of a larger table's
// homes; in a pool of any other seed they are ordinary keys. A hash flood, as an attacker
// who knows the seed would send it (docs/reliability.md, "Crafted keys").
inline constexpr int kCraftedDefaultBits = 12;
inline constexpr int kCraftedMaxBits = 16;

// Key bytes for an index.
class KeySpace {
 public:
  // key_size >= 8. The keys are `dist`'s: sequential keys are the index itself, crafted
  // ones are found by brute force (2^B hashes a key on average, each computed once and
  // kept), others a bijective mix of the index.
  KeySpace(size_t key_size, const DistSpec& dist);
  size_t key_size() const { return key_size_; }
  uint64_t FirstWord(uint64_t index) const;
  // Writes key_size() bytes for `index` to out.
  void Write(uint64_t index, char* out) const;
  std::string Key(uint64_t index) const;

 private:
  // The key bytes of first word `word` (the bytes past the 8th derive from it).
  void WriteWord(uint64_t word, char* out) const;
  // The first word of crafted key `index`: CraftedSearch of the index (< 2^42), or of
  // 2^42 + the low 42 bits of a negative one, so that the two sets are disjoint.
  uint64_t CraftedWord(uint64_t index) const;
  // The first candidate Mix64(slot << 21 | j), j = 0, 1, ..., whose key hashes (seed 0)
  // to B leading zero bits: distinct slots give distinct words (Mix64 is a bijection).
  uint64_t CraftedSearch(uint64_t slot) const;

  size_t key_size_;
  DistSpec::Kind kind_;
  int crafted_bits_ = 0;
  // Crafted first words of positive indices, found so far (a search costs 2^B hashes).
  mutable std::mutex crafted_mu_;
  mutable std::vector<uint64_t> crafted_;
};

// Draws indices in [0, n) (n > 0). Each thread owns one.
class IndexGenerator {
 public:
  virtual ~IndexGenerator() = default;
  virtual uint64_t Next(Rng& rng) = 0;
};

// `start` is where a sequential stream begins (threads start at different places).
std::unique_ptr<IndexGenerator> MakeGenerator(const DistSpec& spec, uint64_t n, uint64_t start);

// The oracle of a hotspot detector (Engine::SetHotKeyOracle): the at most k distinct
// draws of MakeGenerator(spec, n, ...) most likely to come, most likely first. Zipfian:
// the items of ranks 0, 1, ... as the scrambled generator places them (a rank's
// probability falls with it, and the ranks past n that fold onto an item add less than
// the next rank does, for the k of a detector); self-similar: 0, 1, ...; uniform,
// sequential and crafted: none (no draw is likelier than another).
std::vector<uint64_t> HottestDraws(const DistSpec& spec, uint64_t n, uint64_t k);

// YCSB's ZipfianGenerator over [0, n) with constant theta (the most popular item is 0).
class ZipfianGenerator final : public IndexGenerator {
 public:
  ZipfianGenerator(uint64_t n, double theta);
  // With a precomputed zeta(n, theta) (YCSB's scrambled generator uses n = 10^10).
  ZipfianGenerator(uint64_t n, double theta, double zetan);
  uint64_t Next(Rng& rng) override;
  static double Zeta(uint64_t n, double theta);

 private:
  uint64_t n_;
  double theta_, zetan_, alpha_, eta_, half_pow_theta_;
};

// YCSB's ScrambledZipfianGenerator: zipfian popularity, with the popular items spread
// over [0, n) by FNV-1a hashing. With theta 0.99 it uses YCSB's own constants (a zipfian
// over 10^10 items, zeta precomputed); other thetas compute zeta over n items.
class ScrambledZipfianGenerator final : public IndexGenerator {
 public:
  ScrambledZipfianGenerator(uint64_t n, double theta);
  uint64_t Next(Rng& rng) override;
  // YCSB's Utils.fnvhash64 (including Java's Math.abs).
  static uint64_t FnvHash64(uint64_t value);
  static constexpr uint64_t kYcsbItemCount = 10000000000ull;
  static constexpr double kYcsbZetan = 26.46902820178302;

 private:
  uint64_t n_;
  ZipfianGenerator zipf_;
};

// Gray et al.'s self-similar distribution (as PiBench): a fraction h of the keys gets
// 1 - h of the accesses, recursively; low indices are hot.
class SelfSimilarGenerator final : public IndexGenerator {
 public:
  SelfSimilarGenerator(uint64_t n, double h);
  uint64_t Next(Rng& rng) override;

 private:
  uint64_t n_;
  double exponent_;
};

class UniformGenerator final : public IndexGenerator {
 public:
  explicit UniformGenerator(uint64_t n) : n_(n) {}
  uint64_t Next(Rng& rng) override { return rng.Below(n_); }

 private:
  uint64_t n_;
};

class SequentialGenerator final : public IndexGenerator {
 public:
  SequentialGenerator(uint64_t n, uint64_t start) : n_(n), next_(start % n) {}
  uint64_t Next(Rng&) override {
    uint64_t v = next_;
    next_ = next_ + 1 == n_ ? 0 : next_ + 1;
    return v;
  }

 private:
  uint64_t n_, next_;
};

// Value sizes: fixed, or a range drawn uniformly per operation.
struct ValueSizeSpec {
  size_t min = 8, max = 8;
  bool fixed() const { return min == max; }
};
// "8" or "16-1024".
Status ParseValueSize(const std::string& text, ValueSizeSpec* out);

// Random bytes that values are sliced from (no per-operation allocation or writing).
class ValuePool {
 public:
  ValuePool(size_t max_value, uint64_t seed);
  // A value of `size` bytes that depends on `salt`.
  std::string_view Slice(uint64_t salt, size_t size) const {
    return std::string_view(bytes_.data() + Offset(salt), size);
  }
  uint32_t Offset(uint64_t salt) const { return static_cast<uint32_t>(Mix64(salt) % span_); }
  const char* data() const { return bytes_.data(); }

 private:
  std::string bytes_;
  size_t span_;
};

}  // namespace pmhash::bench
