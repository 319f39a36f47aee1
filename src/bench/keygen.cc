#include "bench/keygen.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_set>
#include <utility>

namespace pmhash::bench {

// ---- Rng ----------------------------------------------------------------------------

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) {
    x += 0x9e3779b97f4a7c15ull;
    s = Mix64(x);
  }
}

uint64_t Rng::Next() {
  auto rotl = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

// ---- Keys ---------------------------------------------------------------------------

KeySpace::KeySpace(size_t key_size, const DistSpec& dist)
    : key_size_(key_size), kind_(dist.kind) {
  if (kind_ == DistSpec::Kind::kCrafted) crafted_bits_ = static_cast<int>(dist.param);
}

uint64_t KeySpace::FirstWord(uint64_t index) const {
  switch (kind_) {
    case DistSpec::Kind::kSequential: return index;
    case DistSpec::Kind::kCrafted: return CraftedWord(index);
    default: return Mix64(index);
  }
}

uint64_t KeySpace::CraftedWord(uint64_t index) const {
  constexpr uint64_t kSlotBits = 42;
  if ((index & kNegativeBit) != 0) {
    return CraftedSearch((uint64_t{1} << kSlotBits) | (index & ((uint64_t{1} << kSlotBits) - 1)));
  }
  // Positive indices are a dense range from 0: each searched once, in order.
  std::lock_guard<std::mutex> lock(crafted_mu_);
  while (crafted_.size() <= index) crafted_.push_back(CraftedSearch(crafted_.size()));
  return crafted_[index];
}

uint64_t KeySpace::CraftedSearch(uint64_t slot) const {
  constexpr unsigned kCandidateBits = 21;  // 2^21 tries: none found has odds e^-32 at B = 16
  std::string key(key_size_, '\0');
  uint64_t word = 0;
  for (uint64_t j = 0; j < (uint64_t{1} << kCandidateBits); ++j) {
    word = Mix64((slot << kCandidateBits) | j);
    WriteWord(word, key.data());
    if (HashKey(key, 0) >> (64 - crafted_bits_) == 0) break;
  }
  return word;
}

void KeySpace::Write(uint64_t index, char* out) const { WriteWord(FirstWord(index), out); }

void KeySpace::WriteWord(uint64_t word, char* out) const {
  const size_t first = key_size_ < 8 ? key_size_ : 8;
  std::memcpy(out, &word, first);
  uint64_t extra = word;
  for (size_t at = 8; at < key_size_; at += 8) {
    extra = Mix64(extra + 0x9e3779b97f4a7c15ull);
    const size_t n = key_size_ - at < 8 ? key_size_ - at : 8;
    std::memcpy(out + at, &extra, n);
  }
}

std::string KeySpace::Key(uint64_t index) const {
  std::string k(key_size_, '\0');
  Write(index, k.data());
  return k;
}

// ---- Distributions ------------------------------------------------------------------

static bool ParseDouble(std::string_view text, double* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

Status ParseDist(const std::string& text, DistSpec* out) {
  std::string name = text, param;
  if (size_t colon = text.find(':'); colon != std::string::npos) {
    name = text.substr(0, colon);
    param = text.substr(colon + 1);
  }
  DistSpec spec;
  if (name == "uniform" || name == "sequential") {
    spec.kind = name == "uniform" ? DistSpec::Kind::kUniform : DistSpec::Kind::kSequential;
    if (!param.empty()) {
      return Status::InvalidArgument("--dist " + name + " takes no parameter");
    }
  } else if (name == "crafted") {
    spec.kind = DistSpec::Kind::kCrafted;
    spec.param = kCraftedDefaultBits;
    uint64_t bits = 0;
    if (!param.empty()) {
      auto [end, ec] = std::from_chars(param.data(), param.data() + param.size(), bits);
      if (ec != std::errc() || end != param.data() + param.size() || bits < 1 ||
          bits > kCraftedMaxBits) {
        return Status::InvalidArgument("--dist crafted:" + param +
                                       ": the shared hash bits must be a whole number 1..16");
      }
      spec.param = static_cast<double>(bits);
    }
  } else if (name == "zipfian") {
    spec.kind = DistSpec::Kind::kZipfian;
    spec.param = 0.99;
    if (!param.empty() && (!ParseDouble(param, &spec.param) || !(spec.param > 0) ||
                           !(spec.param < 1))) {
      return Status::InvalidArgument("--dist zipfian:" + param +
                                     ": the constant must be a number in (0, 1)");
    }
  } else if (name == "selfsimilar") {
    spec.kind = DistSpec::Kind::kSelfSimilar;
    spec.param = 0.2;
    if (!param.empty() && (!ParseDouble(param, &spec.param) || !(spec.param > 0) ||
                           !(spec.param < 0.5))) {
      return Status::InvalidArgument("--dist selfsimilar:" + param +
                                     ": the skew must be a number in (0, 0.5)");
    }
  } else {
    return Status::InvalidArgument("--dist '" + text +
                                   "': expected uniform, zipfian[:0.99], selfsimilar[:0.2], "
                                   "sequential or crafted[:12]");
  }
  *out = spec;
  return Status::OK();
}

std::string DistName(const DistSpec& spec) {
  char buf[64];
  switch (spec.kind) {
    case DistSpec::Kind::kUniform: return "uniform";
    case DistSpec::Kind::kSequential: return "sequential";
    case DistSpec::Kind::kZipfian:
      std::snprintf(buf, sizeof(buf), "zipfian:%g", spec.param);
      return buf;
    case DistSpec::Kind::kSelfSimilar:
      std::snprintf(buf, sizeof(buf), "selfsimilar:%g", spec.param);
      return buf;
    case DistSpec::Kind::kCrafted:
      std::snprintf(buf, sizeof(buf), "crafted:%g", spec.param);
      return buf;
  }
  return "?";
}

std::unique_ptr<IndexGenerator> MakeGenerator(const DistSpec& spec, uint64_t n, uint64_t start) {
  switch (spec.kind) {
    case DistSpec::Kind::kUniform: return std::make_unique<UniformGenerator>(n);
    case DistSpec::Kind::kSequential: return std::make_unique<SequentialGenerator>(n, start);
    case DistSpec::Kind::kZipfian:
      return std::make_unique<ScrambledZipfianGenerator>(n, spec.param);
    case DistSpec::Kind::kSelfSimilar:
      return std::make_unique<SelfSimilarGenerator>(n, spec.param);
    case DistSpec::Kind::kCrafted:  // the key set is the flood; its draws are uniform
      return std::make_unique<UniformGenerator>(n);
  }
  return std::make_unique<UniformGenerator>(n);
}

std::vector<uint64_t> HottestDraws(const DistSpec& spec, uint64_t n, uint64_t k) {
  std::vector<uint64_t> out;
  k = std::min(k, n);
  switch (spec.kind) {
    case DistSpec::Kind::kZipfian: {
      std::unordered_set<uint64_t> seen;
      for (uint64_t rank = 0; out.size() < k && rank < 64 * k; ++rank) {
        const uint64_t item = ScrambledZipfianGenerator::FnvHash64(rank) % n;
        if (seen.insert(item).second) out.push_back(item);
      }
      break;
    }
    case DistSpec::Kind::kSelfSimilar:
      for (uint64_t i = 0; i < k; ++i) out.push_back(i);
      break;
    case DistSpec::Kind::kUniform:
    case DistSpec::Kind::kSequential:
    case DistSpec::Kind::kCrafted:
      break;
  }
  return out;
}

double ZipfianGenerator::Zeta(uint64_t n, double theta) {
  // O(n): remembered, since every thread of every phase builds a generator.
  static std::mutex mu;
  static std::map<std::pair<uint64_t, double>, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({n, theta});
  if (it != cache.end()) return it->second;
  double sum = 0;
  for (uint64_t i = 0; i < n; ++i) sum += 1.0 / std::pow(static_cast<double>(i + 1), theta);
  if (cache.size() > 64) cache.clear();
  cache[{n, theta}] = sum;
  return sum;
}

ZipfianGenerator::ZipfianGenerator(uint64_t n, double theta)
    : ZipfianGenerator(n, theta, Zeta(n, theta)) {}

ZipfianGenerator::ZipfianGenerator(uint64_t n, double theta, double zetan)
    : n_(n), theta_(theta), zetan_(zetan) {
  const double zeta2 = Zeta(2, theta);
  alpha_ = 1.0 / (1.0 - theta);
  eta_ = (1 - std::pow(2.0 / static_cast<double>(n), 1 - theta)) / (1 - zeta2 / zetan);
  half_pow_theta_ = 1.0 + std::pow(0.5, theta);
}

uint64_t ZipfianGenerator::Next(Rng& rng) {
  const double u = rng.Unit();
  const double uz = u * zetan_;
  if (uz < 1.0) return 0;
  if (uz < half_pow_theta_) return 1;
  uint64_t v = static_cast<uint64_t>(static_cast<double>(n_) *
                                     std::pow(eta_ * u - eta_ + 1, alpha_));
  return v < n_ ? v : n_ - 1;
}

uint64_t ScrambledZipfianGenerator::FnvHash64(uint64_t value) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int i = 0; i < 8; ++i) {
    h ^= value & 0xff;
    value >>= 8;
    h *= 1099511628211ull;
  }
  // Java's Math.abs on a long (Long.MIN_VALUE stays as it is).
  const int64_t s = static_cast<int64_t>(h);
  return s < 0 && s != INT64_MIN ? static_cast<uint64_t>(-s) : h;
}

ScrambledZipfianGenerator::ScrambledZipfianGenerator(uint64_t n, double theta)
    : n_(n),
      zipf_(theta == 0.99 ? ZipfianGenerator(kYcsbItemCount, theta, kYcsbZetan)
                          : ZipfianGenerator(n, theta)) {}

uint64_t ScrambledZipfianGenerator::Next(Rng& rng) { return FnvHash64(zipf_.Next(rng)) % n_; }

SelfSimilarGenerator::SelfSimilarGenerator(uint64_t n, double h)
    : n_(n), exponent_(std::log(h) / std::log(1.0 - h)) {}

uint64_t SelfSimilarGenerator::Next(Rng& rng) {
  uint64_t v = static_cast<uint64_t>(static_cast<double>(n_) * std::pow(rng.Unit(), exponent_));
  return v < n_ ? v : n_ - 1;
}

// ---- Values -------------------------------------------------------------------------

static bool ParseSize(std::string_view text, size_t* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

Status ParseValueSize(const std::string& text, ValueSizeSpec* out) {
  ValueSizeSpec spec;
  const size_t dash = text.find('-');
  bool ok = dash == std::string::npos
                ? ParseSize(text, &spec.min) && (spec.max = spec.min, true)
                : ParseSize(std::string_view(text).substr(0, dash), &spec.min) &&
                      ParseSize(std::string_view(text).substr(dash + 1), &spec.max);
  if (!ok || spec.min > spec.max) {
    return Status::InvalidArgument("--value-size '" + text +
                                   "': expected a size in bytes (8) or a range (16-1024)");
  }
  if (spec.max > (1u << 20)) {
    return Status::InvalidArgument("--value-size '" + text + "': at most 1048576 bytes");
  }
  *out = spec;
  return Status::OK();
}

ValuePool::ValuePool(size_t max_value, uint64_t seed) {
  span_ = 1u << 20;  // 1 MiB of start offsets: values differ without costing cache space
  bytes_.resize(span_ + max_value);
  Rng rng(seed ^ 0x76616c7565ull);
  for (size_t i = 0; i < bytes_.size(); i += 8) {
    uint64_t w = rng.Next();
    std::memcpy(bytes_.data() + i, &w, bytes_.size() - i < 8 ? bytes_.size() - i : 8);
  }
}

}  // namespace pmhash::bench
