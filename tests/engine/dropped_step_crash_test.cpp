// Crash-point enumeration for a started step nobody awaits (issue 35): the
// code starts a charge, drops its Future and returns. The rule
// (docs/engine.md, "A started command nobody awaits") is that the run ends
// only once the step has: so at every crash point, after reopening, the run
// completes, the charge ran under one key and at least once, its
// step_completed comes before the run's end in the journal, and a result
// acknowledged before the crash had the charge done before it.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>
#include <iostream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/crash_points.hpp"
#include "tests/support/fault_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, int> kFire{"fire"};

struct Life {
  std::mutex mu;
  std::vector<std::string> keys;
  bool result_acknowledged = false;
  std::size_t charges_at_result = 0;
  void charged(const std::string& key) {
    std::lock_guard lock(mu);
    keys.push_back(key);
  }
  std::size_t charges() {
    std::lock_guard lock(mu);
    return keys.size();
  }
};

void register_fire(Engine& engine, Life& life) {
  engine.register_workflow(kFire, [&life](Ctx& ctx, int input) -> Task<int> {
    auto charge = [&life, input](StepContext& step) {
      life.charged(step.key());
      return input;
    };
    auto dropped = ctx.step("charge", charge).start();  // kept, never awaited
    (void)dropped;
    co_return input + 1;
  });
}

void crashing_life(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock, Life& life) {
  try {
    auto engine = Engine::open(crash_config(fs, clock));
    register_fire(*engine, life);
    engine->start(kFire, "f-1", 1);
    int result = engine->result(kFire, "f-1");
    CHECK(result == 2);
    life.charges_at_result = life.charges();
    life.result_acknowledged = true;
    engine->shutdown();
  } catch (const Error& error) {
    CHECK_MESSAGE(fs.crashed(), "an error without a crash: " << error.what());
  }
}

void check_after_crash(FaultFileSystem& image, const std::shared_ptr<ManualClock>& clock, Life& before,
                       const std::string& where) {
  INFO(where);
  if (before.result_acknowledged) CHECK_MESSAGE(before.charges_at_result >= 1, "the run ended before its step");
  Life after;
  std::string journal;
  {
    auto engine = Engine::open(crash_config(image, clock));
    register_fire(*engine, after);
    engine->start(kFire, "f-1", 1);  // attaches, or starts it if its start was lost
    CHECK(engine->result(kFire, "f-1") == 2);
    journal = engine->journal_json("f-1");
    engine->shutdown();
  }
  std::set<std::string> keys(before.keys.begin(), before.keys.end());
  keys.insert(after.keys.begin(), after.keys.end());
  CHECK(keys.size() == 1);
  CHECK(before.keys.size() + after.keys.size() >= 1);
  if (before.result_acknowledged) CHECK_MESSAGE(after.keys.empty(), "the step ran again after the run had ended");
  std::vector<std::string> kinds;
  const auto parsed = boost::json::parse(journal);
  for (const auto& record : parsed.at("records").as_array()) {
    kinds.emplace_back(record.at("kind").as_string());
  }
  REQUIRE(kinds.size() >= 2);
  CHECK(kinds.back() == "run_completed");
  CHECK(kinds[kinds.size() - 2] == "step_completed");
}

void enumerate_points() {
  auto clock = std::make_shared<ManualClock>();
  auto crash_points = enumerate_life_crash_points<Life>(
      "dropped step", std::chrono::seconds(6), [&](FaultFileSystem& fs, Life& life) { crashing_life(fs, clock, life); },
      [&](FaultFileSystem& image, Life& life, const std::string& where) { check_after_crash(image, clock, life, where); });
  CHECK(crash_points > 10);
}

}  // namespace

TEST_SUITE("crash") {
  TEST_CASE("engine: a started step nobody awaits ends before its run, at every crash point") { enumerate_points(); }
}
