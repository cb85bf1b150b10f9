// Crash-point enumeration for changing code: a run that fails on a bug is
// reset onto a fixed version, and a run takes a patch's new path, on the
// fault-injecting file system frozen at every operation boundary and
// crashed with several outcomes. After reopening, a client finishes the
// job (starts again, resets again what it has no acknowledgement for), and
// the promise holds: an acknowledged reset is not lost and its kept step
// does not run again, the patch's answer does not flip, results do not
// change, and the kept journals read the same after another open.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "tests/support/crash_points.hpp"
#include "tests/support/fault_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, int> kBilling{"billing"};
const WorkflowRef<int, int> kPatched{"patched"};
const Signal<int> kGo{"go"};

struct Life {
  std::mutex mu;
  bool reset_acknowledged = false;
  std::map<std::string, int> results;
  std::map<std::string, int> ran;  // step -> runs of its function
  void note(const std::string& step) {
    std::lock_guard lock(mu);
    ran[step]++;
  }
  int count(const std::string& step) {
    std::lock_guard lock(mu);
    return ran.contains(step) ? ran[step] : 0;
  }
};

// billing v1 charges with a bug, v2 (registered when `fixed`) does not;
// patched takes its bonus step under ctx.patched.
void register_code(Engine& engine, Life& life, bool fixed) {
  for (std::uint32_t version = 1; version <= (fixed ? 2u : 1u); ++version) {
    engine.register_workflow(kBilling, version, [&life, version](Ctx& ctx, int input) -> Task<int> {
      auto quote = [&life, input] {
        life.note("quote");
        return input * 10;
      };
      int price = co_await ctx.step("quote", quote);
      auto charge = [&life, version, price]() -> int {
        life.note("charge");
        if (version == 1) throw std::runtime_error("charge: off by one");
        return price + 1;
      };
      co_return co_await ctx.step("charge", charge);
    });
  }
  engine.register_workflow(kPatched, [&life](Ctx& ctx, int input) -> Task<int> {
    int x = input;
    if (ctx.patched("bonus")) {
      auto bonus = [&life, x] {
        life.note("bonus");
        return x + 1000;
      };
      x = co_await ctx.step("bonus", bonus);
    }
    auto go = co_await ctx.wait_for(kGo);
    co_return x + go.value_or(0);
  });
}

// The run's result, or -1 when it failed.
int result_or_failed(Engine& engine, const std::string& id) {
  try {
    return engine.result(kBilling, id);
  } catch (const Error& error) {
    if (error.error() == errc::storage || error.error() == errc::shut_down) throw;
    return -1;
  }
}

void crashing_life(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock, Life& life) {
  try {
    {
      // The first deploy: billing has its bug, and b-1 fails on it.
      auto engine = Engine::open(crash_config(fs, clock));
      register_code(*engine, life, false);
      engine->start(kBilling, "b-1", 4);
      life.results["b-1"] = result_or_failed(*engine, "b-1");
      engine->shutdown();
    }
    // The fix is deployed as version 2, and b-1 is reset onto it.
    auto engine = Engine::open(crash_config(fs, clock));
    register_code(*engine, life, true);
    engine->reset("b-1", ResetPoint::after("quote"), "charge fixed");
    life.reset_acknowledged = true;
    life.results["b-1 reset"] = result_or_failed(*engine, "b-1");
    engine->start(kPatched, "p-1", 1);
    engine->signal("p-1", kGo, 5, "go-p-1");
    life.results["p-1"] = engine->result(kPatched, "p-1");
    engine->checkpoint();  // the finished runs and their journals to the run store
  } catch (const Error& error) {
    CHECK_MESSAGE(fs.crashed(), "an error without a crash: " << error.what());
  }
}

int generation_of(Engine& engine, const std::string& id) {
  auto info = engine.get_run(id);
  return info ? static_cast<int>(info->generation) : 0;
}

void check_after_crash(FaultFileSystem& image, const std::shared_ptr<ManualClock>& clock, Life& before,
                       const std::string& where) {
  INFO(where);
  Life after;
  std::string journal;
  {
    auto engine = Engine::open(crash_config(image, clock));
    register_code(*engine, after, true);
    engine->start(kBilling, "b-1", 4);  // attaches, or starts it on version 2 if its start was lost
    if (before.reset_acknowledged) {
      CHECK_MESSAGE(generation_of(*engine, "b-1") == 2, "an acknowledged reset was lost");
    } else if (result_or_failed(*engine, "b-1") != 41) {
      engine->reset("b-1", ResetPoint::after("quote"), "charge fixed");
    }
    CHECK(result_or_failed(*engine, "b-1") == 41);
    // The quote kept by an acknowledged reset was durable: it never runs again.
    if (before.reset_acknowledged) CHECK_MESSAGE(after.count("quote") == 0, "the reset's kept step ran again");
    if (before.results.contains("b-1 reset")) CHECK(before.results["b-1 reset"] == 41);
    engine->start(kPatched, "p-1", 1);
    engine->signal("p-1", kGo, 5, "go-p-1");
    int patched = engine->result(kPatched, "p-1");
    CHECK(patched == 1006);  // the run reached the patch with the new code, before or after the crash
    if (before.results.contains("p-1")) {
      CHECK(before.results["p-1"] == patched);
      CHECK_MESSAGE(after.count("bonus") == 0, "the patch's step ran again");
    }
    engine->checkpoint();
    journal = engine->journal_json("b-1");
    // A reset was needed unless the lost first start let b-1 start on version 2.
    if (generation_of(*engine, "b-1") == 2) CHECK_MESSAGE(journal.find("\"run_reset\"") != std::string::npos, journal);
    engine->shutdown();
  }
  // Stable: the next open finds the same results and journal, running nothing.
  Life third;
  auto again = Engine::open(crash_config(image, clock));
  register_code(*again, third, true);
  CHECK(result_or_failed(*again, "b-1") == 41);
  CHECK(again->result(kPatched, "p-1") == 1006);
  CHECK(again->journal_json("b-1") == journal);
  CHECK(third.ran.empty());
}

}  // namespace

// Every point takes tens of seconds on 2 cores: make test checks a seeded
// sample within the budget, make test-long every point (crash_sample.hpp).
namespace {

void enumerate_points() {
  auto clock = std::make_shared<ManualClock>();
  auto crash_points = enumerate_life_crash_points<Life>(
      "versioning", std::chrono::seconds(6), [&](FaultFileSystem& fs, Life& life) { crashing_life(fs, clock, life); },
      [&](FaultFileSystem& image, Life& life, const std::string& where) { check_after_crash(image, clock, life, where); });
  CHECK(crash_points > 10);
}

}  // namespace

TEST_SUITE("crash") {
  TEST_CASE("engine: crashes around a reset and a patch lose no acknowledged reset and flip no patch") { enumerate_points(); }
}
