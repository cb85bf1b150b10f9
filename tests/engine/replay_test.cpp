// Replay in local mode: runs cut by a shutdown finish after a reopen with the same result and without running recorded steps again, finished runs stay finished, and a workflow that leaves its journal's path stops with nondeterminism.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const Signal<std::string> kGo{"go"};

// reserve -> charge -> wait for "go" -> ship; each step counts its calls.
const WorkflowRef<int, std::vector<int>> kOrder{"order"};

struct OrderCalls {
  CallCounter body, reserve, charge, ship;
};

void register_order(Engine& engine, OrderCalls& calls) {
  engine.register_workflow(kOrder, [&calls](Ctx& ctx, int input) -> Task<std::vector<int>> {
    calls.body.add();
    int reserved = co_await ctx.step("reserve", [&calls, input] {
      calls.reserve.add();
      return input + 1;
    });
    int charged = co_await ctx.step("charge", [&calls, reserved] {
      calls.charge.add();
      return reserved * 10;
    });
    std::optional<std::string> go = co_await ctx.wait_for(kGo);
    int shipped = co_await ctx.step("ship", [&calls, charged] {
      calls.ship.add();
      return charged + 5;
    });
    co_return std::vector<int>{reserved, charged, shipped, static_cast<int>(go.value_or("").size())};
  });
}

// The result of an order run that nothing interrupted (memory mode).
std::vector<int> uninterrupted_order(int input) {
  OrderCalls calls;
  EngineHarness harness(Mode::memory);
  auto engine = harness.open();
  register_order(*engine, calls);
  (void)engine->start(kOrder, "reference", input);
  engine->signal("reference", kGo, std::string("go!"));
  return result_of(engine, kOrder, "reference");
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("local mode: a run cut by a shutdown finishes after a reopen with the same result, running no recorded step again") {
  OrderCalls calls;
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_order(*engine, calls);
    (void)engine->start(kOrder, "o-1", 4);
    calls.charge.require(1);
    engine->shutdown();
  }
  CHECK(calls.ship.count() == 0);
  auto engine = harness.open();
  register_order(*engine, calls);
  engine->signal("o-1", kGo, std::string("go!"));
  CHECK(result_of(engine, kOrder, "o-1") == uninterrupted_order(4));
  CHECK(calls.reserve.count() == 1);
  CHECK(calls.charge.count() == 1);
  CHECK(calls.ship.count() == 1);
  CHECK(calls.body.count() == 2);  // the workflow itself is re-executed from its start
}

TEST_CASE("local mode: a run survives two reopens in a row without running a recorded step again") {
  OrderCalls calls;
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_order(*engine, calls);
    (void)engine->start(kOrder, "o-1", 7);
    calls.charge.require(1);
    engine->shutdown();
  }
  {
    auto engine = harness.open();
    register_order(*engine, calls);
    calls.body.require(2);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_order(*engine, calls);
  engine->signal("o-1", kGo, std::string("go!"));
  CHECK(result_of(engine, kOrder, "o-1") == uninterrupted_order(7));
  CHECK(calls.reserve.count() == 1);
  CHECK(calls.charge.count() == 1);
  CHECK(calls.ship.count() == 1);
}

TEST_CASE("local mode: a finished run is not run again after a reopen and keeps its result") {
  OrderCalls calls;
  EngineHarness harness(Mode::local);
  std::vector<int> before;
  {
    auto engine = harness.open();
    register_order(*engine, calls);
    (void)engine->start(kOrder, "o-1", 1);
    engine->signal("o-1", kGo, std::string("go!"));
    before = result_of(engine, kOrder, "o-1");
    engine->shutdown();
  }
  auto engine = harness.open();
  register_order(*engine, calls);
  CHECK(result_of(engine, kOrder, "o-1") == before);
  CHECK(calls.body.count() == 1);
  std::vector<RunInfo> runs = engine->list_runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].status == RunStatus::completed);
  CHECK(runs[0].workflow == "order");
  error_message(errc::not_found, [&] { engine->signal("o-1", kGo, std::string("again")); });
}

TEST_CASE("local mode: unfinished runs of every workflow resume after a reopen, each once its workflow is registered") {
  OrderCalls calls;
  CallCounter other_first_steps;
  EngineHarness harness(Mode::local, 3);
  const WorkflowRef<int, int> other{"other"};
  auto register_other = [&](Engine& engine) {
    engine.register_workflow(other, [&other_first_steps](Ctx& ctx, int input) -> Task<int> {
      int first = co_await ctx.step("first", [&other_first_steps, input] {
        other_first_steps.add();
        return input * 3;
      });
      (void)co_await ctx.wait_for(kGo);
      co_return first;
    });
  };
  constexpr int kRuns = 6;
  {
    auto engine = harness.open();
    register_order(*engine, calls);
    register_other(*engine);
    for (int i = 0; i < kRuns; ++i) {
      (void)engine->start(kOrder, "order-" + std::to_string(i), i);
      (void)engine->start(other, "other-" + std::to_string(i), i);
    }
    calls.charge.require(kRuns);
    other_first_steps.require(kRuns);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_order(*engine, calls);
  for (int i = 0; i < kRuns; ++i) {
    engine->signal("order-" + std::to_string(i), kGo, std::string("go!"));
    engine->signal("other-" + std::to_string(i), kGo, std::string("go!"));
  }
  for (int i = 0; i < kRuns; ++i) CHECK(result_of(engine, kOrder, "order-" + std::to_string(i)) == uninterrupted_order(i));
  auto waiting = result_in_background(engine, other, "other-0");
  CHECK_FALSE(waiting.ready(50ms));  // its workflow is not registered yet
  register_other(*engine);
  CHECK(waiting.get() == 0);
  for (int i = 1; i < kRuns; ++i) CHECK(result_of(engine, other, "other-" + std::to_string(i)) == i * 3);
  CHECK(calls.reserve.count() == kRuns);
  CHECK(calls.charge.count() == kRuns);
  CHECK(other_first_steps.count() == kRuns);
}

TEST_CASE("local mode: a workflow that asks for another step at a recorded position stops with nondeterminism naming both") {
  CallCounter charged, emailed;
  EngineHarness harness(Mode::local);
  const WorkflowRef<int, int> ref{"checkout"};
  {
    auto engine = harness.open();
    engine->register_workflow(ref, [&charged](Ctx& ctx, int) -> Task<int> {
      co_await ctx.step("charge-card", [&charged] { return charged.add(); });
      (void)co_await ctx.wait_for(kGo);
      co_return 1;
    });
    (void)engine->start(ref, "c-1", 0);
    charged.require(1);
    engine->shutdown();
  }
  auto engine = harness.open();
  engine->register_workflow(ref, [&emailed](Ctx& ctx, int) -> Task<int> {
    co_await ctx.step("send-email", [&emailed] { return emailed.add(); });
    (void)co_await ctx.wait_for(kGo);
    co_return 2;
  });
  std::string message = error_message(errc::nondeterminism, [&] { (void)result_of(engine, ref, "c-1"); });
  CHECK(contains(message, "charge-card"));
  CHECK(contains(message, "send-email"));
  CHECK(emailed.count() == 0);
  CHECK(charged.count() == 1);
}

TEST_CASE("local mode: after a nondeterminism stop, the next open with the journal's code finishes the run") {
  CallCounter charged;
  EngineHarness harness(Mode::local);
  const WorkflowRef<int, int> ref{"checkout"};
  auto register_original = [&](Engine& engine) {
    engine.register_workflow(ref, [&charged](Ctx& ctx, int) -> Task<int> {
      co_await ctx.step("charge-card", [&charged] { return charged.add(); });
      (void)co_await ctx.wait_for(kGo);
      co_return 1;
    });
  };
  {
    auto engine = harness.open();
    register_original(*engine);
    (void)engine->start(ref, "c-1", 0);
    charged.require(1);
    engine->shutdown();
  }
  {
    auto engine = harness.open();
    engine->register_workflow(ref, [](Ctx& ctx, int) -> Task<int> {
      co_await ctx.step("send-email", [] { return 0; });
      co_return 2;
    });
    error_message(errc::nondeterminism, [&] { (void)result_of(engine, ref, "c-1"); });
    engine->shutdown();
  }
  auto engine = harness.open();
  register_original(*engine);
  engine->signal("c-1", kGo, std::string("go"));
  CHECK(result_of(engine, ref, "c-1") == 1);
  CHECK(charged.count() == 1);
}

TEST_CASE("local mode: a workflow that returns before the end of its journal stops with nondeterminism") {
  CallCounter charged;
  EngineHarness harness(Mode::local);
  const WorkflowRef<int, int> ref{"checkout"};
  {
    auto engine = harness.open();
    engine->register_workflow(ref, [&charged](Ctx& ctx, int) -> Task<int> {
      co_await ctx.step("charge-card", [&charged] { return charged.add(); });
      (void)co_await ctx.wait_for(kGo);
      co_return 1;
    });
    (void)engine->start(ref, "c-1", 0);
    charged.require(1);
    engine->shutdown();
  }
  auto engine = harness.open();
  engine->register_workflow(ref, [](Ctx&, int) -> Task<int> { co_return 2; });
  std::string message = error_message(errc::nondeterminism, [&] { (void)result_of(engine, ref, "c-1"); });
  CHECK(contains(message, "charge-card"));
}

TEST_CASE("local mode: a workflow that asks for another kind of command at a recorded position stops with nondeterminism") {
  CallCounter charged;
  EngineHarness harness(Mode::local);
  const WorkflowRef<int, int> ref{"checkout"};
  {
    auto engine = harness.open();
    engine->register_workflow(ref, [&charged](Ctx& ctx, int) -> Task<int> {
      co_await ctx.step("charge-card", [&charged] { return charged.add(); });
      (void)co_await ctx.wait_for(kGo);
      co_return 1;
    });
    (void)engine->start(ref, "c-1", 0);
    charged.require(1);
    engine->shutdown();
  }
  auto engine = harness.open();
  engine->register_workflow(ref, [](Ctx& ctx, int) -> Task<int> {
    co_await ctx.sleep("charge-card", 1s);  // same name, another kind
    co_return 2;
  });
  std::string message = error_message(errc::nondeterminism, [&] { (void)result_of(engine, ref, "c-1"); });
  CHECK(contains(message, "charge-card"));
  CHECK(contains(message, "sleep"));
  CHECK(contains(message, "step"));
}

TEST_CASE("local mode: every kind of outcome survives a reopen unchanged, with no workflow registered") {
  EngineHarness harness(Mode::local);
  const WorkflowRef<int, std::string> ref{"outcomes"};
  struct Seen {
    std::string id;
    RunStatus status;
    std::string error;
  };
  std::vector<Seen> before;
  {
    auto engine = harness.open();
    engine->register_workflow(ref, [](Ctx& ctx, int mode) -> Task<std::string> {
      if (mode == 1) throw std::runtime_error("broken on purpose");
      if (mode == 2) (void)co_await ctx.wait_for(kGo);
      co_return "fine";
    });
    (void)engine->start(ref, "completed-1", 0);
    (void)engine->start(ref, "failed-1", 1);
    (void)engine->start(ref, "cancelled-1", 2);
    StartOptions deadline;
    deadline.deadline = 1s;
    (void)engine->start(ref, "timed-out-1", 2, deadline);
    CHECK(result_of(engine, ref, "completed-1") == "fine");
    error_message(errc::failed, [&] { (void)result_of(engine, ref, "failed-1"); });
    engine->cancel("cancelled-1", "changed my mind");
    error_message(errc::cancelled, [&] { (void)result_of(engine, ref, "cancelled-1"); });
    harness.clock().advance(2s);
    error_message(errc::timed_out, [&] { (void)result_of(engine, ref, "timed-out-1"); });
    for (const RunInfo& info : engine->list_runs()) before.push_back({info.id, info.status, info.error});
    engine->shutdown();
  }
  REQUIRE(before.size() == 4);
  auto engine = harness.open();
  CHECK(result_of(engine, ref, "completed-1") == "fine");
  CHECK(contains(error_message(errc::failed, [&] { (void)result_of(engine, ref, "failed-1"); }),
                 "broken on purpose"));
  CHECK(contains(error_message(errc::cancelled, [&] { (void)result_of(engine, ref, "cancelled-1"); }),
                 "changed my mind"));
  error_message(errc::timed_out, [&] { (void)result_of(engine, ref, "timed-out-1"); });
  std::vector<RunInfo> after = engine->list_runs();
  REQUIRE(after.size() == before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    CAPTURE(before[i].id);
    CHECK(after[i].id == before[i].id);
    CHECK(after[i].status == before[i].status);
    CHECK(after[i].error == before[i].error);
  }
}
}
