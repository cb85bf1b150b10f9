// Crash-point enumeration for cancellation: a run waiting for a signal and
// a parent with a child (ParentClose::cancel) are cancelled, clean up and
// end, on the fault-injecting file system frozen at every operation boundary
// and crashed with several outcomes. After reopening, a client finishes the
// job (starts again, cancels again what it has no acknowledgement for), and
// the promise holds: an acknowledged cancel is not lost and is not turned
// into a terminate, the child of a cancelled parent is cancelled, a clean-up
// step whose result was durable does not run again, and a reported outcome
// does not change.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>
#include <chrono>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "tests/support/crash_points.hpp"
#include "tests/support/fault_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, int> kWaiter{"waiter"};
const WorkflowRef<int, int> kParent{"parent"};
const Signal<int> kGo{"go"};
const std::string kChildId = "p-child";
const std::vector<std::string> kCancelled = {"w", "p"};  // the runs the client cancels

// What one life acknowledged, and which step functions ran in it.
struct Life {
  std::mutex mu;
  std::set<std::string> started;
  std::set<std::string> cancelled;
  std::map<std::string, std::string> outcomes;  // id -> the error its result reported
  std::map<std::string, int> cleaned;           // id -> clean-up steps run
  void note_cleaned(const std::string& id) {
    std::lock_guard lock(mu);
    cleaned[id]++;
  }
  int cleaned_count(const std::string& id) {
    std::lock_guard lock(mu);
    return cleaned.contains(id) ? cleaned[id] : 0;
  }
};

// A clean-up step, then the cancellation goes on up.
Task<int> clean_up(Ctx& ctx, Life& life, std::exception_ptr cancelled) {
  auto clean = [&life, id = ctx.run_id()] {
    life.note_cleaned(id);
    return true;
  };
  (void)co_await ctx.step("clean-up", clean);
  std::rethrow_exception(cancelled);
}

void register_workflows(Engine& engine, Life& life) {
  engine.register_workflow(kWaiter, [&life](Ctx& ctx, int) -> Task<int> {
    std::exception_ptr cancelled;
    try {
      auto go = co_await ctx.wait_for(kGo);
      co_return go.value_or(0);
    } catch (const Error& error) {
      if (error.error() != errc::cancelled) throw;
      cancelled = std::current_exception();
    }
    co_return co_await clean_up(ctx, life, cancelled);
  });
  engine.register_workflow(kParent, [&life](Ctx& ctx, int) -> Task<int> {
    std::exception_ptr cancelled;
    try {
      auto child = ctx.child(kWaiter, kChildId, 0).on_parent_close(ParentClose::cancel).start();
      auto go = ctx.wait_for(kGo).start();
      auto [from_child, from_signal] = co_await ctx.all(child, go);
      co_return from_child + from_signal.value_or(0);
    } catch (const Error& error) {
      if (error.error() != errc::cancelled) throw;
      cancelled = std::current_exception();
    }
    co_return co_await clean_up(ctx, life, cancelled);
  });
}

// The error run `id` ended with ("completed" if it did not fail); "never
// ended" when it has not within a minute (a lost cancel leaves it waiting).
std::string outcome_of(Engine& engine, const std::string& id) {
  auto result = engine.result_json_async(id);
  if (result.wait_for(std::chrono::minutes(1)) != std::future_status::ready) return "never ended";
  try {
    (void)result.get();
    return "completed";
  } catch (const Error& error) {
    return std::string(errc_name(error.error())) + ": " + error.what();
  }
}

void crashing_life(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock, Life& life) {
  try {
    auto engine = Engine::open(crash_config(fs, clock));
    register_workflows(*engine, life);
    engine->start(kWaiter, "w", 0);
    life.started.insert("w");
    engine->start(kParent, "p", 0);
    life.started.insert("p");
    // The child starts once the parent's records are durable (never, if
    // the disk froze first).
    while (!engine->get_run(kChildId) && !fs.crashed()) std::this_thread::yield();
    for (const auto& id : kCancelled) {
      engine->cancel(id, "stop " + id);
      life.cancelled.insert(id);
    }
    for (const auto& id : {std::string("w"), std::string("p"), kChildId}) {
      auto outcome = outcome_of(*engine, id);
      // The log failing is not how the run ended.
      if (!outcome.starts_with("storage: ") && !outcome.starts_with("shut_down: ")) life.outcomes[id] = outcome;
    }
  } catch (const Error& error) {
    CHECK_MESSAGE(fs.crashed(), "an error without a crash: " << error.what());
  }
}

void check_after_crash(FaultFileSystem& image, const std::shared_ptr<ManualClock>& clock, Life& before,
                       const std::string& where) {
  INFO(where);
  Life after;
  std::map<std::string, std::string> outcomes;
  {
    auto engine = Engine::open(crash_config(image, clock));
    for (const auto& id : before.started) CHECK_MESSAGE(engine->get_run(id).has_value(), "acknowledged start of " << id << " lost");
    register_workflows(*engine, after);
    engine->start(kWaiter, "w", 0);
    engine->start(kParent, "p", 0);
    // A cancel without an acknowledgement is sent again: if it was recorded
    // after all, this second one terminates the run.
    for (const auto& id : kCancelled) {
      if (!before.cancelled.contains(id)) engine->cancel(id, "stop " + id);
    }
    for (const auto& id : {std::string("w"), std::string("p"), kChildId}) {
      outcomes[id] = outcome_of(*engine, id);
      CHECK_MESSAGE(outcomes[id].starts_with("cancelled: "), id << " ended " << outcomes[id]);
      if (before.outcomes.contains(id)) CHECK_MESSAGE(before.outcomes[id] == outcomes[id], "a reported outcome changed");
      bool terminated = outcomes[id].find("terminates it") != std::string::npos;
      // An acknowledged cancel was not lost, so nothing terminated the run:
      // it cleaned up and let the cancellation through. So did the child,
      // whose cancel comes from its parent and never escalates.
      if (before.cancelled.contains(id) || id == kChildId) {
        CHECK_MESSAGE(!terminated, id << " was terminated: " << outcomes[id]);
        CHECK(before.cleaned_count(id) + after.cleaned_count(id) >= 1);
      }
      if (!terminated && id != kChildId) CHECK(outcomes[id].find("was cancelled: stop " + id) != std::string::npos);
      if (id == kChildId) CHECK(outcomes[id].find("was cancelled: its parent run 'p'") != std::string::npos);
      // A reported end means the clean-up's result was durable before it.
      if (before.outcomes.contains(id)) CHECK_MESSAGE(after.cleaned_count(id) == 0, "the clean-up of " << id << " ran again");
    }
    engine->shutdown();
  }
  // Stable: the next recovery finds the same outcomes without running anything.
  Life third;
  auto again = Engine::open(crash_config(image, clock));
  register_workflows(*again, third);
  for (const auto& [id, outcome] : outcomes) CHECK(outcome_of(*again, id) == outcome);
  CHECK(third.cleaned.empty());
}

}  // namespace

// Every point takes tens of seconds on 2 cores: make test checks a seeded
// sample within the budget, make test-long every point (crash_sample.hpp).
namespace {

void enumerate_points() {
  auto clock = std::make_shared<ManualClock>();
  auto crash_points = enumerate_life_crash_points<Life>(
      "cancel", std::chrono::seconds(6), [&](FaultFileSystem& fs, Life& life) { crashing_life(fs, clock, life); },
      [&](FaultFileSystem& image, Life& life, const std::string& where) { check_after_crash(image, clock, life, where); });
  CHECK(crash_points > 10);
}

}  // namespace

TEST_SUITE("crash") {
  TEST_CASE("engine: crashes while runs are cancelled and clean up lose no acknowledged cancel") { enumerate_points(); }
}
