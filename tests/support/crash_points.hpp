// Crash-point enumeration for a workload of one or more engine lives: the
// workload runs on a FaultFileSystem frozen after 0, 1, 2, ... operations
// until it runs to its end, and each frozen state is crashed four ways
// (nothing pending kept, all kept with names, a random subset, a torn write)
// and handed to `check`. Returns the number of crash points.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "fusee/fusee.hpp"
#include "tests/support/crash_sample.hpp"
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
  if (const char* text = std::getenv("FUSEE_CRASH_CHECKPOINT_MS"); text != nullptr && *text != '\0') {
    config.checkpoint_interval = std::chrono::milliseconds(std::strtoll(text, nullptr, 10));
  }
  return config;
}

// life(fs) runs the workload and returns what it acknowledged;
// check(image, acknowledged, where) reopens the crash image and checks it.
// The workload runs once whole first (its end, crashed too, and how many
// operations it makes), then frozen at the points `sample` picks
// (tests/support/crash_sample.hpp: in make test a seeded sample within the
// case's budget, in make test-long every one). Returns the number of crash
// points checked.
template <typename Life, typename Check>
std::uint64_t enumerate_crash_points(Life life, Check check, CrashSample& sample, std::uint64_t* states = nullptr) {
  std::uint64_t crash_points = 0;
  auto crash_at_point = [&](FaultFileSystem& fs, std::uint64_t crash_at, auto& acknowledged) {
    ++crash_points;
    std::vector<CrashOutcome> outcomes{CrashOutcome::drop_all(), CrashOutcome::keep_all(CrashOutcome::Names::keep),
                                       CrashOutcome::random_subset(crash_at), CrashOutcome::tear(crash_at)};
    for (const auto& outcome : outcomes) {
      auto image = fs.crash_image(outcome);
      check(*image, acknowledged, "crash after " + std::to_string(crash_at) + " ops, " + outcome.describe());
      if (states) ++*states;
    }
  };
  std::uint64_t last = 0;
  {
    FaultFileSystem fs;
    auto acknowledged = life(fs);
    last = fs.operation_count();
    crash_at_point(fs, last, *acknowledged);
  }
  while (auto crash_at = sample.next(last)) {
    if (*crash_at >= last) continue;  // the end: checked above
    FaultFileSystem fs;
    fs.set_crash_after_ops(*crash_at);
    auto acknowledged = life(fs);
    crash_at_point(fs, *crash_at, *acknowledged);
  }
  return crash_points;
}

// The same for a workload whose life is a `Life` filled in by
// run_life(fs, life); prints "<name> crash enumeration: ..." and returns the
// number of crash points checked. `budget`: the case's time in make test.
template <typename Life, typename RunLife, typename Check>
std::uint64_t enumerate_life_crash_points(const std::string& name, std::chrono::seconds budget, RunLife run_life,
                                          Check check) {
  CrashSample sample(name, budget);
  std::uint64_t states = 0;
  auto crash_points = enumerate_crash_points(
      [&](FaultFileSystem& fs) {
        auto life = std::make_unique<Life>();
        run_life(fs, *life);
        return life;
      },
      check, sample, &states);
  sample.report(states);
  return crash_points;
}

}  // namespace fusee::testing
