// I/O error loops: every workload with its 1st, 2nd, 3rd... file system
// operation failing (EIO, ENOSPC, short writes, a sync that loses the data),
// once and for good, until a run fires no fault. Every waiter must get an
// answer, nothing unflushed may be acknowledged (P5), and what was
// acknowledged must survive a crash right after the failure and a reopen.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "tests/support/crash_sample.hpp"
#include "tests/support/log_workloads.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const char* effect_name(FaultEffect effect) {
  switch (effect) {
    case FaultEffect::io_error: return "EIO";
    case FaultEffect::no_space: return "ENOSPC";
    case FaultEffect::short_write: return "short write";
    case FaultEffect::sync_loses_data: return "sync loses data";
  }
  return "?";
}

}  // namespace

TEST_SUITE("crash") {
TEST_CASE("an I/O error at any operation never acknowledges unflushed data and loses nothing acknowledged") {
  // Every (workload, kind of fault, operation) is one point: make test
  // checks a seeded sample of them all within the budget, make test-long
  // every one (tests/support/crash_sample.hpp).
  struct Variant {
    FaultEffect effect;
    bool persistent;
  };
  std::vector<Variant> variants;
  for (auto effect : {FaultEffect::io_error, FaultEffect::no_space, FaultEffect::short_write,
                      FaultEffect::sync_loses_data}) {
    for (bool persistent : {false, true}) variants.push_back({effect, persistent});
  }
  const auto workloads = log_workloads();
  // Each workload's operation count, run once without a fault: its points
  // are operations 1..count+1 (the last fires nothing) for each variant.
  PointRanges ranges;
  std::vector<std::uint64_t> operations;
  for (const auto& workload : workloads) {
    FaultFileSystem fs(workload.fs_options);
    auto options = workload_options(workload, 0);
    Ledger ledger(workload.shards);
    WorkloadContext context{fs, options, ledger};
    workload.run(context);
    operations.push_back(fs.operation_count() + 1);
    ranges.add(operations.back() * variants.size());
  }
  CrashSample sample("I/O error loops", std::chrono::seconds(8), 600);
  std::uint64_t runs = 0;
  std::uint64_t fired_runs = 0;
  while (auto point = sample.next(ranges.total() - 1)) {
    const auto [w, within] = ranges.locate(*point);
    const auto& workload = workloads[w];
    const auto& variant = variants[within / operations[w]];
    const auto nth = within % operations[w] + 1;
    auto where = "workload '" + workload.name + "', " + effect_name(variant.effect) +
                 (variant.persistent ? " persistent" : " once") + " at operation " + std::to_string(nth);
    INFO(where);
    FaultFileSystem fs(workload.fs_options);
    fs.inject(Fault{OpKind::any, nth, variant.effect, variant.persistent});
    auto options = workload_options(workload, nth);
    Ledger ledger(workload.shards);
    WorkloadContext context{fs, options, ledger};
    workload.run(context);  // returns: every waiter got an answer
    ++runs;
    if (fs.faults_fired() == 0) continue;
    ++fired_runs;
    // A power loss right after: only what is durable counts.
    auto lost_power = fs.crash_image(CrashOutcome::drop_all());
    check_recovery(*lost_power, ledger, options, where + ", then power loss");
    // A plain restart once the disk works again.
    fs.clear_faults();
    check_recovery(fs, ledger, options, where + ", then restart");
  }
  sample.report(fired_runs * 2, "faulted runs");
  MESSAGE("I/O error loops: " << runs << " runs, " << fired_runs << " with a fault fired");
  CHECK(fired_runs > 300);
}
}
