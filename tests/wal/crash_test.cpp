// Crash-point enumeration: every scripted workload, frozen at every file
// system operation, every crash outcome; the promise checked after each, with
// two more reopens and crashes during recovery.
#include <doctest/doctest.h>

#include <iostream>

#include "tests/support/log_workloads.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

struct Totals {
  std::uint64_t crash_points = 0;
  std::uint64_t crash_states = 0;
  std::uint64_t recovery_crash_states = 0;
};

void enumerate(const Workload& workload, std::uint64_t seed, Totals& totals) {
  for (std::uint64_t crash_at = 0;; ++crash_at) {
    FaultFileSystem fs(workload.fs_options);
    auto options = workload_options(workload, seed);
    Ledger ledger(workload.shards);
    fs.set_crash_after_ops(crash_at);
    WorkloadContext context{fs, options, ledger};
    workload.run(context);
    bool crashed = fs.crashed();
    ++totals.crash_points;
    auto outcomes = all_crash_outcomes(fs.pending_data_op_count(), 2);
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
      auto image = fs.crash_image(outcomes[i]);
      auto where = "workload '" + workload.name + "', seed " + std::to_string(seed) + ", crash after " +
                   std::to_string(crash_at) + " ops, " + outcomes[i].describe();
      auto recovered = check_recovery(*image, ledger, options, where);
      ++totals.crash_states;
      // Crash again during recovery, for the outcomes at either extreme.
      if (i == 0 || i + 1 == outcomes.size())
        totals.recovery_crash_states += check_crash_during_recovery(*image, recovered, options, where);
    }
    if (!crashed) break;  // the workload finished before this crash point
  }
}

}  // namespace

TEST_SUITE("crash") {
TEST_CASE("every crash point of every workload recovers all that was acknowledged, and nothing else") {
  auto workloads = log_workloads();
  REQUIRE(workloads.size() >= 20);
  Totals totals;
  for (const auto& workload : workloads) {
    CAPTURE(workload.name);
    Totals before = totals;
    enumerate(workload, 0x5eed0000 + totals.crash_points, totals);
    MESSAGE(workload.name << ": " << totals.crash_points - before.crash_points << " crash points, "
                          << totals.crash_states - before.crash_states << " crash states, "
                          << totals.recovery_crash_states - before.recovery_crash_states
                          << " crashes during recovery");
  }
  MESSAGE("crash enumeration: " << workloads.size() << " workloads, " << totals.crash_points << " crash points, "
                                << totals.crash_states << " crash states checked, " << totals.recovery_crash_states
                                << " crash states during recovery checked");
  CHECK(totals.crash_states > 1000);
}
}
