#include "engine/id_filter.hpp"

#include <algorithm>

#include "engine/run_hash.hpp"

namespace fusee::engine {
namespace {

constexpr int kProbes = 7;
constexpr std::size_t kBitsPerId = 10;
constexpr std::size_t kBitsMin = 64 * 1024;

// splitmix64's finaliser: the ids of one shard share run_hash modulo the
// shard count, which the filter's positions must not inherit.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

IdFilter::IdFilter(std::size_t expected_ids)
    : words_((std::max(kBitsMin, expected_ids * kBitsPerId) + 63) / 64, 0) {}

template <typename F>
void IdFilter::probe(std::string_view id, F visit) const {
  auto h1 = mix(run_hash(id));
  auto h2 = mix(h1) | 1;
  auto bit_count = static_cast<std::uint64_t>(words_.size()) * 64;
  for (int i = 0; i < kProbes; ++i) visit((h1 + static_cast<std::uint64_t>(i) * h2) % bit_count);
}

void IdFilter::add(std::string_view id) {
  probe(id, [&](std::uint64_t bit) { words_[bit / 64] |= std::uint64_t{1} << (bit % 64); });
}

bool IdFilter::may_contain(std::string_view id) const {
  bool all = true;
  probe(id, [&](std::uint64_t bit) { all = all && (words_[bit / 64] >> (bit % 64) & 1) != 0; });
  return all;
}

std::vector<std::byte> IdFilter::encode() const {
  std::vector<std::byte> out;
  out.reserve(8 + words_.size() * 8);
  auto put = [&](std::uint64_t value) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(value >> (8 * i)));
  };
  put(bits());
  for (auto word : words_) put(word);
  return out;
}

std::optional<IdFilter> IdFilter::decode(std::span<const std::byte> bytes) {
  auto get = [&](std::size_t at) {
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value |= std::uint64_t(std::to_integer<std::uint8_t>(bytes[at + i])) << (8 * i);
    return value;
  };
  if (bytes.size() < 8) return std::nullopt;
  auto bit_count = get(0);
  if (bit_count == 0 || bit_count % 64 != 0 || bytes.size() != 8 + bit_count / 8) return std::nullopt;
  IdFilter filter;
  filter.words_.resize(bit_count / 64);
  for (std::size_t i = 0; i < filter.words_.size(); ++i) filter.words_[i] = get(8 + i * 8);
  return filter;
}

}  // namespace fusee::engine
