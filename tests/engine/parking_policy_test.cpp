// ParkingPolicy: the long waiters park; past the memory budget the
// longest-waiting others go too, down to 3/4 of it; no budget, no early
// parking.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "engine/parking_policy.hpp"

using namespace fusee;
using engine::ParkingPolicy;
using std::chrono::milliseconds;

namespace {

const TimePoint kNow = TimePoint{} + std::chrono::hours(1000);

ParkingPolicy::Candidate waiting(milliseconds since, std::size_t bytes) { return {kNow - since, bytes}; }

std::vector<std::size_t> sorted(std::vector<std::size_t> indices) {
  std::sort(indices.begin(), indices.end());
  return indices;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("parking policy: runs waiting past park_after park, the others stay while within the budget") {
  ParkingPolicy policy(milliseconds(1000), 0);  // no budget
  std::vector<ParkingPolicy::Candidate> runs{waiting(milliseconds(999), 10), waiting(milliseconds(1000), 10),
                                             waiting(milliseconds(5000), 10), waiting(milliseconds(0), 10)};
  CHECK(sorted(policy.choose(runs, kNow, 1'000'000)) == std::vector<std::size_t>{1, 2});
  CHECK(policy.choose({}, kNow, 0).empty());
  // Within a budget: the same.
  CHECK(sorted(ParkingPolicy(milliseconds(1000), 100).choose(runs, kNow, 40)) == std::vector<std::size_t>{1, 2});
}

TEST_CASE("parking policy: over the budget the longest-waiting others go, down to 3/4 of it") {
  ParkingPolicy policy(milliseconds(60'000), 100);
  // 160 bytes loaded (40 of them in runs that may not park), budget 100:
  // down to 75 takes the three longest-waiting of the four candidates.
  std::vector<ParkingPolicy::Candidate> runs{waiting(milliseconds(10), 30), waiting(milliseconds(40), 30),
                                             waiting(milliseconds(20), 30), waiting(milliseconds(30), 30)};
  auto chosen = policy.choose(runs, kNow, 160);
  CHECK(chosen == std::vector<std::size_t>{1, 3, 2});  // the longest waiter first
  // What the long waiters free counts first: one past park_after frees 60,
  // the rest is 100 -- at the budget, nothing more goes.
  std::vector<ParkingPolicy::Candidate> long_waiter{waiting(milliseconds(70'000), 60), waiting(milliseconds(5), 30),
                                                    waiting(milliseconds(6), 30)};
  CHECK(policy.choose(long_waiter, kNow, 160) == std::vector<std::size_t>{0});
  // Just over: down to 75.
  CHECK(policy.choose(long_waiter, kNow, 161) == std::vector<std::size_t>{0, 2});
  // Nothing can free enough: every candidate goes, and no more.
  std::vector<ParkingPolicy::Candidate> small{waiting(milliseconds(1), 5), waiting(milliseconds(2), 5)};
  CHECK(sorted(policy.choose(small, kNow, 1000)) == std::vector<std::size_t>{0, 1});
}
}
