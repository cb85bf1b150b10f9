// A primary's view of its backups' lag (replica/node_stats.hpp): in
// batches, in payload bytes, and in time -- how long ago the oldest batch a
// backup lacks was proposed.
#include <doctest/doctest.h>

#include <thread>

#include "replica/node_stats.hpp"

namespace fusee::replica {
namespace {

TEST_SUITE("unit") {
  TEST_CASE("node stats: a backup's lag in time is the age of the oldest batch it lacks") {
    NodeStats stats;
    // This lead proposed batches 5 to 7 (1 to 4 were an earlier lead's).
    stats.proposed(5);
    stats.proposed(6);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    stats.proposed(7);
    ReplicaStatus status;
    status.log_end = 7;
    status.holds = {7, 5, 6, 7};  // the primary (durable through 7), and three backups
    const auto lags = stats.lag_us(status);
    REQUIRE(lags.size() == 4);
    CHECK(lags[0] == 0);
    CHECK(lags[3] == 0);
    // Batch 6 was proposed at least 30 ms before batch 7: the backup that
    // lacks it lags longer than the one that lacks only batch 7.
    CHECK(lags[1] >= 30'000);
    CHECK(lags[1] >= lags[2]);
    CHECK(lags[1] - lags[2] >= 30'000);
    // A batch this lead did not propose (an earlier lead's) counts from the
    // oldest it did: a lower bound, never zero while something is lacking.
    status.holds = {7, 2, 7, 7};
    CHECK(stats.lag_us(status)[1] >= lags[1]);
    // After a step-down nothing is recorded: a lag reads as 0.
    stats.stopped_serving();
    CHECK(stats.lag_us(status)[1] == 0);
  }
}

}  // namespace
}  // namespace fusee::replica
