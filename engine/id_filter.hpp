// IdFilter: a Bloom filter of run ids -- "certainly not here" or "maybe".
// Remote mode keeps one per shard of the ids the server's run store holds
// (finished and parked runs), so that starting a new run does not ask the
// server whether its id finished or parked earlier: the answer is known to
// be no without a round trip. A "maybe" (a stored id, or a false positive,
// about 1% while the filter holds what it was sized for) asks the server.
//
// Never a false negative: every id added is reported as maybe. Not
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace fusee::engine {

class IdFilter {
 public:
  // Sized for `expected_ids` at about 1% false positives (10 bits and 7
  // probes per id), at least 64 Ki bits.
  explicit IdFilter(std::size_t expected_ids);

  void add(std::string_view id);
  bool may_contain(std::string_view id) const;
  std::size_t bits() const { return words_.size() * 64; }

  // u64 bit count, then the words (little-endian); decode refuses (nothing)
  // anything else.
  std::vector<std::byte> encode() const;
  static std::optional<IdFilter> decode(std::span<const std::byte> bytes);

 private:
  IdFilter() = default;
  // The probes' positions: double hashing over a mixed run_hash.
  template <typename F>
  void probe(std::string_view id, F visit) const;

  std::vector<std::uint64_t> words_;
};

}  // namespace fusee::engine
