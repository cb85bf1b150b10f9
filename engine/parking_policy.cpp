#include "engine/parking_policy.hpp"

#include <algorithm>

namespace fusee::engine {

std::vector<std::size_t> ParkingPolicy::choose(std::span<const Candidate> candidates, TimePoint now,
                                               std::size_t loaded_bytes) const {
  std::vector<std::size_t> parking;
  std::vector<std::size_t> rest;
  std::size_t freed = 0;
  for (std::size_t index = 0; index < candidates.size(); ++index) {
    const auto& candidate = candidates[index];
    if (std::chrono::duration_cast<std::chrono::milliseconds>(now - candidate.waiting_since) >= park_after_) {
      freed += candidate.memory_bytes;
      parking.push_back(index);
    } else {
      rest.push_back(index);
    }
  }
  const auto staying = [&] { return loaded_bytes > freed ? loaded_bytes - freed : 0; };
  if (budget_bytes_ == 0 || staying() <= budget_bytes_) return parking;
  // Over the budget: the longest-waiting go early, down to 3/4 of it.
  std::stable_sort(rest.begin(), rest.end(), [&](std::size_t a, std::size_t b) {
    return candidates[a].waiting_since < candidates[b].waiting_since;
  });
  for (auto index : rest) {
    if (staying() <= budget_bytes_ / 4 * 3) break;
    freed += candidates[index].memory_bytes;
    parking.push_back(index);
  }
  return parking;
}

}  // namespace fusee::engine
