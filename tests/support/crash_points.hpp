// Crash-point enumeration for a workload of one or more engine lives: the
// workload runs on a FaultFileSystem frozen after 0, 1, 2, ... operations
// until it runs to its end, and each frozen state is crashed four ways
// (nothing pending kept, all kept with names, a random subset, a torn write)
// and handed to `check`. Returns the number of crash points.
#pragma once

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "fusee/fusee.hpp"
#include "tests/support/fault_file_system.hpp"

namespace fusee::testing {

// An engine on the fault file system for one life of a crash workload:
// local mode on /data, buffered flushes, 2 shards, the shared ManualClock,
// and a counting random source (the same ids in every life).
inline Config crash_config(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock) {
  auto config = Config::local("/data");
  config.warn = [](const std::string&) {};
  config.file_system = &fs;
  config.flush = FlushMethod::buffered;
  config.shards = 2;
  config.clock = clock;
  config.random = [n = std::uint64_t{0}]() mutable { return ++n; };
  return config;
}

// life(fs) runs the workload and returns what it acknowledged;
// check(image, acknowledged, where) reopens the crash image and checks it.
// stride > 1 takes every stride-th point only (the first, then ...), and the
// end: for a long workload in the default suites, whose every point a slow
// suite checks.
template <typename Life, typename Check>
std::uint64_t enumerate_crash_points(Life life, Check check, std::uint64_t stride = 1) {
  std::uint64_t crash_points = 0;
  for (std::uint64_t crash_at = 0;; crash_at += stride) {
    FaultFileSystem fs;
    fs.set_crash_after_ops(crash_at);
    auto acknowledged = life(fs);
    ++crash_points;
    std::vector<CrashOutcome> outcomes{CrashOutcome::drop_all(), CrashOutcome::keep_all(CrashOutcome::Names::keep),
                                       CrashOutcome::random_subset(crash_at), CrashOutcome::tear(crash_at)};
    for (const auto& outcome : outcomes) {
      auto image = fs.crash_image(outcome);
      check(*image, *acknowledged, "crash after " + std::to_string(crash_at) + " ops, " + outcome.describe());
    }
    if (!fs.crashed()) break;  // the workload ran to its end: every point is covered
  }
  return crash_points;
}

// The same for a workload whose life is a `Life` filled in by
// run_life(fs, life); prints "<name> crash enumeration (every N): ..." and
// returns the number of crash points.
template <typename Life, typename RunLife, typename Check>
std::uint64_t enumerate_life_crash_points(const std::string& name, std::uint64_t stride, RunLife run_life,
                                          Check check) {
  auto crash_points = enumerate_crash_points(
      [&](FaultFileSystem& fs) {
        auto life = std::make_unique<Life>();
        run_life(fs, *life);
        return life;
      },
      check, stride);
  std::cout << name << " crash enumeration (every " << stride << "): " << crash_points << " crash points, "
            << crash_points * 4 << " crash states checked\n";
  return crash_points;
}

}  // namespace fusee::testing
