#include "common/bloom.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include "util/hash.h"

namespace pmhash {
namespace {

constexpr char kMagic[8] = {'P', 'M', 'H', 'B', 'L', 'O', 'O', 'M'};
constexpr uint32_t kVersion = 1;

static_assert(std::endian::native == std::endian::little,
              "the serialized form is little-endian and written as host words");
static_assert(BloomFilter::kBlockBits == 512, "probe positions are 9-bit");

// Serialized header; kHeaderBytes long so the blocks start 64-byte aligned.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t num_probes;
  uint64_t num_blocks;
  uint64_t expected_keys;      // informational (the options the filter was made with)
  double false_positive_rate;  // informational
  uint64_t checksum;           // Hash64(blocks, seed = Hash64(header bytes before this))
  uint8_t reserved[16];        // zero (checked: every byte of an image is verified)
};
static_assert(sizeof(Header) == BloomFilter::kHeaderBytes);
static_assert(offsetof(Header, magic) == 0 && offsetof(Header, version) == 8 &&
                  offsetof(Header, num_probes) == 12 && offsetof(Header, num_blocks) == 16 &&
                  offsetof(Header, expected_keys) == 24 &&
                  offsetof(Header, false_positive_rate) == 32 &&
                  offsetof(Header, checksum) == 40 && offsetof(Header, reserved) == 48,
              "the serialized header's layout (version 1): the checksum covers [0, 40)");
constexpr size_t kChecksummedHeaderBytes = offsetof(Header, checksum);

uint64_t Checksum(const void* header, const void* blocks, size_t block_bytes) {
  return Hash64(blocks, block_bytes, Hash64(header, kChecksummedHeaderBytes));
}

std::atomic_ref<uint64_t> Word(uint64_t* words, uint64_t index) {
  return std::atomic_ref<uint64_t>(words[index]);
}

// Poisson(j; lambda) without under/overflow for large lambda.
double PoissonPmf(uint64_t j, double lambda) {
  return std::exp(static_cast<double>(j) * std::log(lambda) - lambda -
                  std::lgamma(static_cast<double>(j) + 1));
}

// FP rate of a blocked filter with `lambda` keys per block on average.
double BlockedRate(double lambda, uint32_t k) {
  if (lambda <= 0) return 0;
  const double bits = BloomFilter::kBlockBits;
  const uint64_t hi = static_cast<uint64_t>(lambda + 12 * std::sqrt(lambda) + 40);
  const uint64_t lo = static_cast<uint64_t>(std::max(0.0, lambda - 12 * std::sqrt(lambda) - 40));
  double rate = 0;
  for (uint64_t j = lo; j <= hi; ++j) {
    const double fill = 1 - std::pow(1 - 1 / bits, static_cast<double>(k) * static_cast<double>(j));
    rate += PoissonPmf(j, lambda) * std::pow(fill, k);
  }
  return std::min(rate, 1.0);
}

// The largest keys-per-block whose modelled rate meets `target` (the rate grows with
// lambda). Bisection in log space: lambda spans many orders of magnitude over k and p.
// It depends on (target, k) only, and costs thousands of exp/lgamma calls, so the answer
// is remembered: every open of a SmartHT index sizes a filter.
double KeysPerBlock(double target, uint32_t k) {
  static std::mutex mu;
  static std::map<std::pair<double, uint32_t>, double> known;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find({target, k}); it != known.end()) return it->second;
  }
  double lo = 1e-9, hi = 1e5;
  for (int i = 0; i < 100; ++i) {
    const double mid = std::sqrt(lo * hi);
    if (BlockedRate(mid, k) <= target) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  known.emplace(std::make_pair(target, k), lo);
  return lo;
}

Status CheckOptions(const BloomOptions& o) {
  if (!(o.false_positive_rate > 0 && o.false_positive_rate <= 0.5)) {
    return Status::InvalidArgument("Bloom filter false_positive_rate must be in (0, 0.5], got " +
                                   std::to_string(o.false_positive_rate));
  }
  if (o.num_probes < 1 || o.num_probes > BloomFilter::kMaxProbes) {
    return Status::InvalidArgument("Bloom filter num_probes must be in 1.." +
                                   std::to_string(BloomFilter::kMaxProbes) + ", got " +
                                   std::to_string(o.num_probes));
  }
  return Status::OK();
}

}  // namespace

double BloomFilter::ModelFalsePositiveRate(uint64_t keys, uint64_t num_blocks,
                                           uint32_t num_probes) {
  if (num_blocks == 0) return 1;
  return BlockedRate(static_cast<double>(keys) / static_cast<double>(num_blocks), num_probes);
}

uint32_t BloomFilter::OptimalProbes(double false_positive_rate) {
  if (!(false_positive_rate > 0 && false_positive_rate < 1)) return 1;
  const double k = std::round(-std::log2(false_positive_rate));
  return static_cast<uint32_t>(std::clamp(k, 1.0, static_cast<double>(kMaxProbes)));
}

Result<uint64_t> BloomFilter::BlocksFor(const BloomOptions& options) {
  PMHASH_RETURN_IF_ERROR(CheckOptions(options));
  const double keys = static_cast<double>(std::max<uint64_t>(options.expected_keys, 1));
  const double target = options.false_positive_rate;
  const double blocks = std::ceil(keys / KeysPerBlock(target, options.num_probes));
  if (blocks * kBlockBytes > static_cast<double>(kMaxBytes)) {
    return Status::InvalidArgument(
        "Bloom filter for " + std::to_string(options.expected_keys) + " keys at rate " +
        std::to_string(target) + " with k = " + std::to_string(options.num_probes) +
        " would need " + std::to_string(blocks * kBlockBytes / (1 << 20)) +
        " MiB (limit " + std::to_string(kMaxBytes >> 20) + " MiB)");
  }
  return std::max<uint64_t>(1, static_cast<uint64_t>(blocks));
}

Result<DramBuffer> BloomFilter::AllocateWords(uint64_t num_blocks) {
  Result<DramBuffer> words = DramBuffer::Allocate(num_blocks * kBlockBytes);
  if (!words.ok()) {
    return Status::ResourceExhausted("Bloom filter: " + std::string(words.status().message()));
  }
  return words;
}

BloomFilter::BloomFilter(const BloomOptions& options, uint64_t num_blocks, DramBuffer words)
    : options_(options),
      num_blocks_(num_blocks),
      num_probes_(options.num_probes),
      words_(std::move(words)) {}

Result<BloomFilter> BloomFilter::Make(const BloomOptions& options) {
  Result<uint64_t> blocks = BlocksFor(options);
  if (!blocks.ok()) return blocks.status();
  auto words = AllocateWords(*blocks);
  if (!words.ok()) return words.status();
  return BloomFilter(options, *blocks, std::move(words).value());
}

void BloomFilter::AddHash(uint64_t hash) {
  Probes p(hash, num_blocks_);
  uint64_t masks[kWordsPerBlock] = {};
  for (uint32_t i = 0; i < num_probes_; ++i) {
    const uint32_t bit = p.Next();
    masks[bit >> 6] |= uint64_t{1} << (bit & 63);
  }
  uint64_t* block = words() + p.block() * kWordsPerBlock;
  for (size_t w = 0; w < kWordsPerBlock; ++w) {
    if (masks[w] == 0) continue;
    auto word = Word(block, w);
    // Skip the read-modify-write when the bits are there: keeps the line shared between
    // cores when hot keys are re-added.
    if ((word.load(std::memory_order_relaxed) & masks[w]) != masks[w]) {
      word.fetch_or(masks[w], std::memory_order_relaxed);
    }
  }
}

void BloomFilter::PrefetchHash(uint64_t hash) const {
  __builtin_prefetch(words() + Probes(hash, num_blocks_).block() * kWordsPerBlock);
}

void BloomFilter::Clear() {
  const uint64_t n = num_blocks_ * kWordsPerBlock;
  for (uint64_t i = 0; i < n; ++i) Word(words(), i).store(0, std::memory_order_relaxed);
}

uint64_t BloomFilter::BitsSet() const {
  const uint64_t n = num_blocks_ * kWordsPerBlock;
  uint64_t bits = 0;
  for (uint64_t i = 0; i < n; ++i) {
    bits += std::popcount(Word(words(), i).load(std::memory_order_relaxed));
  }
  return bits;
}

double BloomFilter::FillRatio() const {
  return static_cast<double>(BitsSet()) / static_cast<double>(num_bits());
}

double BloomFilter::EstimatedKeys() const {
  const double m = static_cast<double>(num_bits());
  const double x = static_cast<double>(BitsSet());
  if (x >= m) return std::numeric_limits<double>::infinity();
  return -(m / num_probes_) * std::log1p(-x / m);
}

double BloomFilter::EstimatedFalsePositiveRate() const {
  double sum = 0;
  for (uint64_t b = 0; b < num_blocks_; ++b) {
    uint64_t bits = 0;
    for (size_t w = 0; w < kWordsPerBlock; ++w) {
      bits += std::popcount(
          Word(words(), b * kWordsPerBlock + w).load(std::memory_order_relaxed));
    }
    sum += std::pow(static_cast<double>(bits) / kBlockBits, num_probes_);
  }
  return sum / static_cast<double>(num_blocks_);
}

Status BloomFilter::SerializeTo(std::span<uint8_t> out) const {
  if (out.size() != SerializedSize()) {
    return Status::InvalidArgument("Bloom filter serialization needs a buffer of " +
                                   std::to_string(SerializedSize()) + " bytes, got " +
                                   std::to_string(out.size()));
  }
  uint8_t* blocks = out.data() + kHeaderBytes;
  const uint64_t n = num_blocks_ * kWordsPerBlock;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t w = Word(words(), i).load(std::memory_order_relaxed);
    std::memcpy(blocks + i * sizeof(uint64_t), &w, sizeof(w));
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.num_probes = num_probes_;
  h.num_blocks = num_blocks_;
  h.expected_keys = options_.expected_keys;
  h.false_positive_rate = options_.false_positive_rate;
  h.checksum = Checksum(&h, blocks, MemoryBytes());
  std::memcpy(out.data(), &h, sizeof(h));
  return Status::OK();
}

std::vector<uint8_t> BloomFilter::Serialize() const {
  std::vector<uint8_t> out(SerializedSize());
  Status s = SerializeTo(out);  // cannot fail: the size is right
  (void)s;
  return out;
}

Status BloomFilter::ParseHeader(std::span<const uint8_t> data, BloomOptions* options,
                                uint64_t* num_blocks) {
  if (data.size() < kHeaderBytes) {
    return Status::Corruption("Bloom filter image too short: " + std::to_string(data.size()) +
                              " bytes, a header alone is " + std::to_string(kHeaderBytes));
  }
  Header h;
  std::memcpy(&h, data.data(), sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    return Status::Corruption("not a Bloom filter image (bad magic)");
  }
  if (h.version != kVersion) {
    return Status::Corruption("Bloom filter image version " + std::to_string(h.version) +
                              ", expected " + std::to_string(kVersion));
  }
  if (h.num_probes < 1 || h.num_probes > kMaxProbes) {
    return Status::Corruption("Bloom filter image has " + std::to_string(h.num_probes) +
                              " probes (must be 1.." + std::to_string(kMaxProbes) + ")");
  }
  const uint64_t payload = data.size() - kHeaderBytes;
  if (h.num_blocks == 0 || h.num_blocks > kMaxBytes / kBlockBytes ||
      h.num_blocks * kBlockBytes != payload) {
    return Status::Corruption("Bloom filter image of " + std::to_string(data.size()) +
                              " bytes does not match its header (" +
                              std::to_string(h.num_blocks) + " blocks need " +
                              std::to_string(kHeaderBytes + h.num_blocks * kBlockBytes) + ")");
  }
  if (Checksum(&h, data.data() + kHeaderBytes, payload) != h.checksum) {
    return Status::Corruption("Bloom filter image checksum mismatch");
  }
  for (uint8_t b : h.reserved) {  // after the checksum, so checked to be zero instead
    if (b != 0) return Status::Corruption("Bloom filter image header: reserved bytes not zero");
  }
  options->expected_keys = h.expected_keys;
  options->false_positive_rate = h.false_positive_rate;
  options->num_probes = h.num_probes;
  *num_blocks = h.num_blocks;
  return Status::OK();
}

Result<BloomFilter> BloomFilter::Deserialize(std::span<const uint8_t> data) {
  BloomOptions options;
  uint64_t num_blocks = 0;
  PMHASH_RETURN_IF_ERROR(ParseHeader(data, &options, &num_blocks));
  auto words = AllocateWords(num_blocks);
  if (!words.ok()) return words.status();
  std::memcpy(words->data(), data.data() + kHeaderBytes, num_blocks * kBlockBytes);
  return BloomFilter(options, num_blocks, std::move(words).value());
}

Status BloomFilter::LoadFrom(std::span<const uint8_t> data) {
  BloomOptions options;
  uint64_t num_blocks = 0;
  PMHASH_RETURN_IF_ERROR(ParseHeader(data, &options, &num_blocks));
  if (num_blocks != num_blocks_ || options.num_probes != num_probes_) {
    return Status::InvalidArgument(
        "Bloom filter image has " + std::to_string(num_blocks) + " blocks and k = " +
        std::to_string(options.num_probes) + "; this filter has " +
        std::to_string(num_blocks_) + " blocks and k = " + std::to_string(num_probes_));
  }
  const uint8_t* blocks = data.data() + kHeaderBytes;
  const uint64_t n = num_blocks_ * kWordsPerBlock;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t w;
    std::memcpy(&w, blocks + i * sizeof(uint64_t), sizeof(w));
    Word(words(), i).store(w, std::memory_order_relaxed);
  }
  return Status::OK();
}

}  // namespace pmhash
