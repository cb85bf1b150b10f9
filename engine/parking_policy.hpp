// ParkingPolicy: which waiting runs leave memory at a checkpoint. A run
// waiting longer than park_after goes; past the memory budget (an estimate
// of what loaded runs hold; 0: none) the longest-waiting others go early,
// until what stays is within 3/4 of it, so that the next checkpoint is not
// asked again at once. Pure: the shard hands it the runs that may park
// (every record durable, waiting on something that may park) and parks
// what it picks (Shard::runs_to_park, docs/checkpoints.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

#include "fusee/clock.hpp"

namespace fusee::engine {

class ParkingPolicy {
 public:
  struct Candidate {
    TimePoint waiting_since;
    std::size_t memory_bytes = 0;
  };

  ParkingPolicy(std::chrono::milliseconds park_after, std::size_t budget_bytes)
      : park_after_(park_after), budget_bytes_(budget_bytes) {}

  // The indices of `candidates` to park, the long waiters first, then (over
  // the budget) the others from the longest-waiting. `loaded_bytes`: what
  // every loaded run holds, the candidates included.
  std::vector<std::size_t> choose(std::span<const Candidate> candidates, TimePoint now,
                                  std::size_t loaded_bytes) const;

 private:
  std::chrono::milliseconds park_after_;
  std::size_t budget_bytes_;
};

}  // namespace fusee::engine
