// A concurrent, cache-blocked Bloom filter in DRAM (SmartHT's volatile filter layer).
//
// Layout: an array of 64-byte blocks (8 atomic 64-bit words, 512 bits). A key's hash picks
// one block; all k probe bits fall inside it, so Add and MayContain touch one cache line.
//
//   block   = multiply-high(hash, num_blocks)          (top bits of the hash)
//   x_0     = hash * 0x9E3779B97F4A7C15                (carries the low bits upward)
//   probe i = top 9 bits of x_i; x_{i+1} = x_i * C + 0x9E3779B97F4A7C15 (64-bit LCG)
//
// Not plain double hashing (a + i*b): for the 1 key in 512 whose b has small top bits all
// probes land on one or two bits, which inflated the FP rate 4.7x at k = 13 (bloom.cc).
//
// Blocking and FP rate: a blocked filter has a higher false-positive rate than a classic
// one with the same bits, because the number of keys per block varies (Poisson); for
// k = 3 and 63 bits/key the classic rate is 1.0e-4, the blocked one 1.36e-4. So the
// size is computed from the blocked model, FP(lambda) = sum_j Pois(j; lambda) *
// (1 - (1 - 1/512)^(k j))^k with lambda = keys per block: the smallest block count whose
// modelled rate is at most the target (about 12% more memory than classic for k = 3).
//
// Sizing versus the paper: SmartHT (003, section III-B1) sizes its filter with
// bits = -n ln(p) / ln(2)^2, the formula for the *optimal* k (13 for p = 1e-4), yet uses
// 3 hash functions; with k = 3 that size gives about 3e-3, not 1e-4. Here the size is
// computed for the k actually used, so the configured rate holds: k = 3 and 1e-4 need
// about 71 bits per key (k = 13 would need about 22). (The paper's "288 million bits for
// 200 million keys" does not follow from its own formula either, which gives 3.8e9.)
//
// Threads: Add, MayContain, BitsSet and the estimates may run concurrently from any
// number of threads (relaxed atomic fetch_or / loads: a bit once set stays set, so no
// ordering is needed; a MayContain racing with the Add of the same key may miss it, as
// with any lock-free filter). Clear, Serialize and LoadFrom give a consistent snapshot
// only while no Add runs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pmhash/status.h"
#include "util/dram_buffer.h"
#include "util/hash.h"

namespace pmhash {

struct BloomOptions {
  // Keys the filter is sized for (0 is treated as 1). More keys raise the FP rate.
  uint64_t expected_keys = 0;
  // Target false-positive rate at expected_keys, in (0, 0.5].
  double false_positive_rate = 1e-4;
  // Probe bits per key (k), 1 .. BloomFilter::kMaxProbes. The paper uses 3.
  uint32_t num_probes = 3;
};

class BloomFilter {
 public:
  static constexpr size_t kBlockBytes = 64;
  static constexpr size_t kBlockBits = kBlockBytes * 8;
  static constexpr uint32_t kMaxProbes = 16;
  // Largest filter Make builds (InvalidArgument beyond).
  static constexpr uint64_t kMaxBytes = 64ull << 30;
  // Serialized form: a 64-byte header, then the blocks.
  static constexpr size_t kHeaderBytes = 64;

  // A filter sized for `options` (all bits clear). InvalidArgument for an option out of
  // range or a filter over kMaxBytes; ResourceExhausted if the memory cannot be allocated.
  static Result<BloomFilter> Make(const BloomOptions& options);
  // The block count Make would choose (for planning memory).
  static Result<uint64_t> BlocksFor(const BloomOptions& options);
  // The FP rate the blocked model predicts for `keys` keys in `num_blocks` blocks.
  static double ModelFalsePositiveRate(uint64_t keys, uint64_t num_blocks, uint32_t num_probes);
  // The k that minimises memory for a target rate (round(-log2 p), clamped to 1..kMaxProbes).
  static uint32_t OptimalProbes(double false_positive_rate);

  // Rebuilds a filter from Serialize() output. Corruption (saying what is wrong) if the
  // buffer is too short, has the wrong size for its header, a bad magic, version, probe
  // count or checksum.
  static Result<BloomFilter> Deserialize(std::span<const uint8_t> data);

  BloomFilter(BloomFilter&&) noexcept = default;
  BloomFilter& operator=(BloomFilter&&) noexcept = default;
  BloomFilter(const BloomFilter&) = delete;
  BloomFilter& operator=(const BloomFilter&) = delete;
  ~BloomFilter() = default;

  // Adds a key by its 64-bit hash. Use one hash function for a filter's whole life (an
  // engine's: Engine::KeyHash, the same word SlotCodec keeps).
  void AddHash(uint64_t hash);
  // False means the key was never added; true means it probably was. Inline: a smartht
  // search asks it on every lookup (issue 29).
  bool MayContainHash(uint64_t hash) const {
    Probes p(hash, num_blocks_);
    uint64_t* block = words() + p.block() * kWordsPerBlock;
    for (uint32_t i = 0; i < num_probes_; ++i) {
      const uint32_t bit = p.Next();
      const uint64_t w =
          std::atomic_ref<uint64_t>(block[bit >> 6]).load(std::memory_order_relaxed);
      if ((w & (uint64_t{1} << (bit & 63))) == 0) return false;
    }
    return true;
  }
  // Starts loading the block MayContainHash(hash) reads (a pipelined lookup).
  void PrefetchHash(uint64_t hash) const;

  // Clears every bit (e.g. before a rebuild after a crash).
  void Clear();

  uint64_t num_blocks() const { return num_blocks_; }
  uint32_t num_probes() const { return num_probes_; }
  uint64_t num_bits() const { return num_blocks_ * kBlockBits; }
  const BloomOptions& options() const { return options_; }
  // DRAM held by the bit array.
  size_t MemoryBytes() const { return num_blocks_ * kBlockBytes; }

  // Bits set (a full scan) and the fraction of bits set.
  uint64_t BitsSet() const;
  double FillRatio() const;
  // Distinct keys added, estimated from the fill (-(m/k) ln(1 - X/m)); reasonable while
  // the filter is not saturated.
  double EstimatedKeys() const;
  // The FP rate for a random absent key given the bits now set: the mean over blocks of
  // (bits set in block / 512)^k (a full scan).
  double EstimatedFalsePositiveRate() const;

  // Serialized size and form: header (magic "PMHBLOOM", version, k, block count, the
  // options, checksum), then the blocks in host (little-endian) byte order.
  size_t SerializedSize() const { return kHeaderBytes + MemoryBytes(); }
  // `out` must be exactly SerializedSize() bytes; InvalidArgument otherwise.
  Status SerializeTo(std::span<uint8_t> out) const;
  std::vector<uint8_t> Serialize() const;
  // Replaces this filter's bits with a serialized filter of the same geometry (block
  // count and k); Corruption as for Deserialize, InvalidArgument if the geometry differs.
  // The filter is unchanged on error.
  Status LoadFrom(std::span<const uint8_t> data);

 private:
  static constexpr size_t kWordsPerBlock = kBlockBytes / sizeof(uint64_t);
  static constexpr uint64_t kMixer = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio, odd

  // Probe positions of a hash: the block (from the hash's top bits) and, per probe, a bit
  // within the block: the top 9 bits of x_i, where x_0 = hash * kMixer (which carries
  // the low bits, independent of the block, upward) and x_{i+1} = x_i * kStep + kMixer.
  // Why not double hashing (a + i*b): when b's top bits are small, which happens for 1
  // key in 512, all probes fall on one or two bits, and such absent keys pass half the
  // time; measured with k = 13 that alone gave 4.7e-4 at a 1e-4 target.
  class Probes {
   public:
    Probes(uint64_t hash, uint64_t num_blocks)
        : block_(Reduce(hash, num_blocks)), x_(hash * kMixer) {}
    uint64_t block() const { return block_; }
    // The next probe's bit, 0 .. 511.
    uint32_t Next() {
      const uint32_t bit = static_cast<uint32_t>(x_ >> 55);
      x_ = x_ * kStep + kMixer;
      return bit;
    }

   private:
    static constexpr uint64_t kStep = 0xD1342543DE82EF95ull;  // an LCG multiplier (odd)
    uint64_t block_;
    uint64_t x_;
  };

  BloomFilter(const BloomOptions& options, uint64_t num_blocks, DramBuffer words);
  // Zeroed blocks, on huge pages where the kernel allows (a lookup's one cache miss is
  // then not also a TLB miss).
  static Result<DramBuffer> AllocateWords(uint64_t num_blocks);
  uint64_t* words() const { return static_cast<uint64_t*>(words_.data()); }
  // Validates a serialized buffer; fills the header fields on success.
  static Status ParseHeader(std::span<const uint8_t> data, BloomOptions* options,
                            uint64_t* num_blocks);

  BloomOptions options_;
  uint64_t num_blocks_ = 0;
  uint32_t num_probes_ = 0;
  DramBuffer words_;  // num_blocks_ * 8 words, accessed atomically
};

}  // namespace pmhash
