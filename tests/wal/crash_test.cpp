// Crash-point enumeration: every scripted workload, frozen at every file
// system operation, every crash outcome; the promise checked after each, with
// two more reopens and crashes during recovery.
#include <doctest/doctest.h>

#include <algorithm>
#include <iostream>
#include <vector>

#include "tests/support/crash_sample.hpp"
#include "tests/support/log_workloads.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

struct Totals {
  std::uint64_t crash_points = 0;
  std::uint64_t crash_states = 0;
  std::uint64_t recovery_crash_states = 0;
};

void check_point(const Workload& workload, std::uint64_t seed, std::uint64_t crash_at, Totals& totals) {
  FaultFileSystem fs(workload.fs_options);
  auto options = workload_options(workload, seed);
  Ledger ledger(workload.shards);
  fs.set_crash_after_ops(crash_at);
  WorkloadContext context{fs, options, ledger};
  workload.run(context);
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
}

}  // namespace

TEST_SUITE("crash") {
TEST_CASE("every crash point of every workload recovers all that was acknowledged, and nothing else") {
  // Every (workload, operation) is one point: make test checks a seeded
  // sample of them all within the budget, make test-long every one
  // (tests/support/crash_sample.hpp). A point past a workload's end is its
  // end (nothing crashed), checked too.
  auto workloads = log_workloads();
  REQUIRE(workloads.size() >= 20);
  PointRanges ranges;
  std::vector<std::uint64_t> seeds;
  for (std::size_t w = 0; w < workloads.size(); ++w) {
    const auto seed = 0x5eed0000 + w;
    FaultFileSystem fs(workloads[w].fs_options);
    auto options = workload_options(workloads[w], seed);
    Ledger ledger(workloads[w].shards);
    WorkloadContext context{fs, options, ledger};
    workloads[w].run(context);
    seeds.push_back(seed);
    ranges.add(fs.operation_count() + 1);  // crash after 0 .. count operations (count: the end)
  }
  // At least 100,000 crash states (docs/testing.md), budget or not.
  CrashSample sample("log crash enumeration", std::chrono::seconds(25), 200);
  Totals totals;
  while (auto point = sample.next(ranges.total() - 1, totals.crash_states + totals.recovery_crash_states < 100'000)) {
    const auto [w, crash_at] = ranges.locate(*point);
    check_point(workloads[w], seeds[w], crash_at, totals);
  }
  sample.report(totals.crash_states + totals.recovery_crash_states);
  MESSAGE("crash enumeration: " << workloads.size() << " workloads, " << totals.crash_points << " crash points, "
                                << totals.crash_states << " crash states checked, " << totals.recovery_crash_states
                                << " crash states during recovery checked");
  CHECK(totals.crash_states > 500);
}
}
