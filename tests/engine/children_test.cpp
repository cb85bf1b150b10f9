// Child runs in memory and local mode: a child's output reaches its parent, a failing child surfaces as errc::failed naming the child, and a finished child is not started again on replay.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const Signal<std::string> kGo{"go"};

// double: twice its input; throws for a negative one.
const WorkflowRef<int, int> kDouble{"double"};

void register_double(Engine& engine, CallCounter& calls) {
  engine.register_workflow(kDouble, [&calls](Ctx&, int input) -> Task<int> {
    calls.add();
    if (input < 0) throw std::runtime_error("out of stock");
    co_return input * 2;
  });
}

// parent: starts child "<run id>-child" of double, returns its output + 1,
// or describes the child's failure.
const WorkflowRef<int, std::string> kParent{"parent"};

void register_parent(Engine& engine) {
  engine.register_workflow(kParent, [](Ctx& ctx, int input) -> Task<std::string> {
    std::string outcome;
    try {
      int doubled = co_await ctx.child(kDouble, ctx.run_id() + "-child", input);
      outcome = std::to_string(doubled + 1);
    } catch (const Error& error) {
      outcome = std::string(errc_name(error.error())) + "|" + error.what();
    }
    co_return outcome;
  });
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a child run returns its output to its parent and is a run of its own", M, InMemory, OnDisk, Remote) {
  CallCounter child_calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_double(*engine, child_calls);
  register_parent(*engine);

  (void)engine->start(kParent, "p-1", 20);
  CHECK(result_of(engine, kParent, "p-1") == "41");
  CHECK(result_of(engine, kDouble, "p-1-child") == 40);
  CHECK(child_calls.count() == 1);

  RunFilter children;
  children.workflow = "double";
  std::vector<RunInfo> runs = engine->list_runs(children);
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].id == "p-1-child");
  CHECK(runs[0].status == RunStatus::completed);

  // Each journal links the other: the child's start names its parent, the
  // parent's child command names the child.
  auto child_journal = boost::json::parse(engine->journal_json("p-1-child")).as_object();
  const auto& started = child_journal.at("records").as_array().front().as_object();
  CHECK(started.at("kind") == "run_started");
  CHECK(started.at("parent") == "p-1");
  auto parent_journal = boost::json::parse(engine->journal_json("p-1")).as_object();
  CHECK(parent_journal.at("records").as_array().front().at("parent") == "");
  const auto& command = parent_journal.at("commands").as_array().front().as_object();
  CHECK(command.at("command") == "child");
  CHECK(command.at("name") == "p-1-child");
}

TEST_CASE_TEMPLATE("a failing child surfaces in its parent as errc::failed naming the child", M, InMemory, OnDisk, Remote) {
  CallCounter child_calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_double(*engine, child_calls);
  register_parent(*engine);

  (void)engine->start(kParent, "p-2", -1);
  std::string outcome = result_of(engine, kParent, "p-2");
  CHECK(contains(outcome, "failed|"));
  CHECK(contains(outcome, "p-2-child"));
  CHECK(contains(outcome, "out of stock"));
  error_message(errc::failed, [&] { (void)result_of(engine, kDouble, "p-2-child"); });
}

TEST_CASE_TEMPLATE("a parent that does not catch its child's failure fails with errc::failed naming the child", M,
                   InMemory, OnDisk, Remote) {
  CallCounter child_calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_double(*engine, child_calls);
  const WorkflowRef<int, int> careless{"careless-parent"};
  engine->register_workflow(careless, [](Ctx& ctx, int input) -> Task<int> {
    co_return co_await ctx.child(kDouble, "careless-child", input);
  });

  (void)engine->start(careless, "p-3", -5);
  std::string message = error_message(errc::failed, [&] { (void)result_of(engine, careless, "p-3"); });
  CHECK(contains(message, "careless-child"));
  std::vector<RunInfo> runs = engine->list_runs();
  REQUIRE(runs.size() == 2);
  for (const RunInfo& run : runs) CHECK(run.status == RunStatus::failed);
}

TEST_CASE("local mode: a finished child's result is journaled, so its parent does not start it again on replay") {
  CallCounter child_calls;
  EngineHarness harness(Mode::local);
  const WorkflowRef<int, int> ref{"patient-parent"};
  auto register_all = [&](Engine& engine) {
    register_double(engine, child_calls);
    engine.register_workflow(ref, [](Ctx& ctx, int input) -> Task<int> {
      int doubled = co_await ctx.child(kDouble, "patient-child", input);
      (void)co_await ctx.wait_for(kGo);
      co_return doubled + 1;
    });
  };
  {
    auto engine = harness.open();
    register_all(*engine);
    (void)engine->start(ref, "p-1", 10);
    require_waiting(*engine, "p-1");  // on its child: started (the start returns before the parent's code runs)
    CHECK(result_of(engine, kDouble, "patient-child") == 20);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_all(*engine);
  engine->signal("p-1", kGo, std::string("go"));
  CHECK(result_of(engine, ref, "p-1") == 21);
  CHECK(child_calls.count() == 1);
}

TEST_CASE("local mode: a parent and its unfinished child both resume after a reopen and the parent gets the output") {
  CallCounter child_bodies;
  EngineHarness harness(Mode::local, 4);
  const WorkflowRef<int, int> child{"waiting-child"};
  const WorkflowRef<int, int> parent{"waiting-parent"};
  auto register_all = [&](Engine& engine) {
    engine.register_workflow(child, [&child_bodies](Ctx& ctx, int input) -> Task<int> {
      child_bodies.add();
      std::optional<std::string> go = co_await ctx.wait_for(kGo);
      co_return input + static_cast<int>(go.value_or("").size());
    });
    engine.register_workflow(parent, [&child](Ctx& ctx, int input) -> Task<int> {
      co_return co_await ctx.child(child, "the-child", input) * 10;
    });
  };
  {
    auto engine = harness.open();
    register_all(*engine);
    (void)engine->start(parent, "the-parent", 4);
    child_bodies.require(1);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_all(*engine);
  engine->signal("the-child", kGo, std::string("go"));
  CHECK(result_of(engine, parent, "the-parent") == 60);
  CHECK(result_of(engine, child, "the-child") == 6);
  CHECK(child_bodies.count() == 2);  // started once, replayed once
}
}

namespace {
const WorkflowRef<int, int> kLateParent{"late-parent"};
const WorkflowRef<int, int> kLateChild{"late-child"};

// The same again, for the reopen.
const WorkflowRef<int, int> kLateParent2{"late-parent-2"};
const WorkflowRef<int, int> kLateChild2{"late-child-2"};

void register_late_parent(Engine& engine, const WorkflowRef<int, int>& parent, const WorkflowRef<int, int>& child) {
  engine.register_workflow(parent, [child](Ctx& ctx, int n) -> Task<int> {
    co_return co_await ctx.child(child, ctx.run_id() + "-child", n);
  });
}
void register_late_child(Engine& engine, const WorkflowRef<int, int>& child) {
  engine.register_workflow(child, [](Ctx&, int n) -> Task<int> { co_return n * 2; });
}
}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a child of a workflow not registered yet waits for it, also across a reopen, and starts once it is",
                   M, InMemory, OnDisk, Remote) {
  // A parent replayed at open may ask for its child before the application
  // has registered the child's workflow (a queue admits its runs so):
  // failing the child then would be for good.
  EngineHarness harness(M::mode);
  {
    auto engine = harness.open();
    register_late_parent(*engine, kLateParent, kLateChild);
    register_late_parent(*engine, kLateParent2, kLateChild2);
    (void)engine->start(kLateParent, "early", 4);
    CHECK(eventually([&] { return engine->get_run("early").has_value(); }));
    CallCounter never;
    (void)never.wait_for(1, kReactionTime);
    CHECK_FALSE(engine->get_run("early-child").has_value());  // not started, not failed
    CHECK(engine->get_run("early")->status == RunStatus::running);
    register_late_child(*engine, kLateChild);
    CHECK(result_of(engine, kLateParent, "early") == 8);
    if (M::mode == Mode::memory) return;
    (void)engine->start(kLateParent2, "across", 5);
    CHECK(eventually([&] { return engine->get_run("across").has_value(); }));
    engine->shutdown();
  }
  // Reopened: the parent replays and asks for its child before the child's
  // workflow is registered.
  auto engine = harness.open();
  register_late_parent(*engine, kLateParent2, kLateChild2);
  CallCounter never;
  (void)never.wait_for(1, kReactionTime);
  register_late_child(*engine, kLateChild2);
  CHECK(result_of(engine, kLateParent2, "across") == 10);
}
}
