// Continue-as-new: a run ends its generation and starts the next under the
// same id with new input (Ctx::continue_as_new). The journal starts afresh;
// the result is the last generation's; signals and updates the old code had
// not taken pass to the new one; an update it took and did not answer
// fails; children close by their ParentClose; reopening (and checkpoints)
// keep only the newest generation.
#include <doctest/doctest.h>

#include <future>
#include <string>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

// Counts up to 3, one generation per number, a step in each.
const WorkflowRef<int, int> kLoop{"loop"};
// Generation 1 waits for "go" and continues; generation 2 takes what
// generation 1 left: the signal "extra" and the update "bump".
const WorkflowRef<int, int> kInbox{"inbox"};
const Signal<int> kGo{"go"};
const Signal<int> kExtra{"extra"};
const Update<int, int> kBump{"bump"};
const Update<int, int> kTaken{"taken"};
// Waits for "next" in each generation and continues with the sum, until
// a 0 comes.
const WorkflowRef<int, int> kSum{"sum"};
const Signal<int> kNext{"next"};

boost::json::array records_of(Engine& engine, const std::string& id) {
  return boost::json::parse(engine.journal_json(id)).at("records").as_array();
}

void register_loop(Engine& engine, CallCounter& steps) {
  engine.register_workflow(kLoop, [&steps](Ctx& ctx, int n) -> Task<int> {
    auto count = [&steps, n] {
      steps.add();
      return n;
    };
    int seen = co_await ctx.step("count", count);
    if (seen < 3) ctx.continue_as_new(seen + 1);
    co_return seen * 10;
  });
}

void register_sum(Engine& engine) {
  engine.register_workflow(kSum, [](Ctx& ctx, int total) -> Task<int> {
    int next = (co_await ctx.wait_for(kNext)).value_or(0);
    if (next != 0) ctx.continue_as_new(total + next);
    co_return total;
  });
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("continue_as_new starts the next generation with the new input; the result is the last one's", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  CallCounter steps;
  auto engine = harness.open();
  register_loop(*engine, steps);
  // A parent waits for the child from its start (its shard subscribes as it
  // starts it, before the child's first step): the wait follows the id
  // through the generations.
  const WorkflowRef<int, int> parent{"parent"};
  engine->register_workflow(parent, [](Ctx& ctx, int n) -> Task<int> { co_return co_await ctx.child(kLoop, "l-1", n); });
  CHECK(engine->execute(parent, "p-1", 1) == 30);
  CHECK(result_of(engine, kLoop, "l-1") == 30);
  CHECK(steps.count() == 3);
  auto info = engine->get_run("l-1");
  REQUIRE(info);
  CHECK(info->generation == 3);
  CHECK(info->status == RunStatus::completed);
  // The journal is the last generation's alone: it starts with the
  // continued run_started, which carries the input.
  auto records = records_of(*engine, "l-1");
  REQUIRE(records.size() == 3);  // run_started, step_completed, run_completed
  CHECK(records[0].at("kind") == "run_started");
  CHECK(records[0].at("generation") == 3);
  CHECK(records[0].at("flag") == true);
  CHECK(records[0].at("value").at("input") == 3);
  CHECK(records[2].at("kind") == "run_completed");
}

TEST_CASE_TEMPLATE("signals and updates the old generation had not taken pass to the next; a taken one fails", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  std::promise<void> bump_accepted;
  std::promise<void> taken_accepted;
  engine->register_workflow(kInbox, [&](Ctx& ctx, int generation) -> Task<int> {
    if (generation == 1) {
      // Validators run as the shard accepts the update, in the same turn.
      ctx.on_update(kBump, [&bump_accepted](const int&) {
        bump_accepted.set_value();
        return std::string();
      });
      ctx.on_update(kTaken, [&taken_accepted](const int&) {
        taken_accepted.set_value();
        return std::string();
      });
      auto taken = co_await ctx.next_update(kTaken);  // taken, never answered
      (void)taken;
      (void)co_await ctx.wait_for(kGo);
      ctx.continue_as_new(2);
    }
    ctx.on_update(kBump);
    int extra = (co_await ctx.wait_for(kExtra)).value_or(0);
    auto bump = co_await ctx.next_update(kBump);
    co_await ctx.reply(bump, bump.arg + extra);
    co_return extra;
  });
  (void)engine->start(kInbox, "i-1", 1);
  Background<int> taken([engine] { return engine->update("i-1", kTaken, 1, "t-1"); });
  REQUIRE(taken_accepted.get_future().wait_for(kPatience) == std::future_status::ready);
  Background<int> bump([engine] { return engine->update("i-1", kBump, 100, "b-1"); });
  REQUIRE(bump_accepted.get_future().wait_for(kPatience) == std::future_status::ready);
  engine->signal("i-1", kExtra, 7);
  engine->signal("i-1", kGo, 0);
  CHECK(result_of(engine, kInbox, "i-1") == 7);
  CHECK(bump.get() == 107);
  auto message = error_message(errc::failed, [&] { (void)taken.get(); });
  CHECK_MESSAGE(contains(message, "ended before it answered"), message);
  auto records = records_of(*engine, "i-1");
  REQUIRE(!records.empty());
  auto carried = records[0].at("value").as_object();
  CHECK(carried.at("signals").as_array().size() == 1);
  CHECK(carried.at("signals").as_array()[0].at("name") == "extra");
  CHECK(carried.at("updates").as_array().size() == 1);
  CHECK(carried.at("updates").as_array()[0].at("id") == "b-1");
}

TEST_CASE_TEMPLATE("a continued run carries on from its newest generation after a reopen and a checkpoint", M, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  {
    auto engine = harness.open();
    register_sum(*engine);
    (void)engine->start(kSum, "s-1", 0);
    for (int add : {1, 2, 3}) engine->signal("s-1", kNext, add);
    engine->checkpoint();
    engine->signal("s-1", kNext, 4);  // past the checkpoint: only in the log
    engine->shutdown();
  }
  {
    auto engine = harness.open();
    register_sum(*engine);
    // The fourth signal was acknowledged, and may have been taken only now,
    // after the reopen: the fifth generation comes then.
    CHECK(eventually([&] { return engine->get_run("s-1")->generation == 5; }));
    CHECK(engine->get_run("s-1")->status == RunStatus::running);
    CHECK(eventually([&] { return records_of(*engine, "s-1").size() == 2; }));  // run_started, wait_started
    engine->checkpoint();  // the older generations leave the run store
    engine->signal("s-1", kNext, 5);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_sum(*engine);
  CHECK(eventually([&] { return engine->get_run("s-1")->generation == 6; }));  // likewise the fifth
  auto records = records_of(*engine, "s-1");
  CHECK(records[0].at("value").at("input") == 15);
  engine->signal("s-1", kNext, 0);
  CHECK(result_of(engine, kSum, "s-1") == 15);
}

TEST_CASE_TEMPLATE("continue_as_new closes the children it does not abandon, as ending does", M, InMemory, OnDisk) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> parent{"parent"};
  const WorkflowRef<int, int> child{"child"};
  engine->register_workflow(child, [](Ctx& ctx, int) -> Task<int> {
    co_return (co_await ctx.wait_for(kGo)).value_or(0);
  });
  engine->register_workflow(parent, [&](Ctx& ctx, int generation) -> Task<int> {
    if (generation == 1) {
      (void)ctx.child(child, "kept", 0).on_parent_close(ParentClose::abandon).start();
      (void)ctx.child(child, "closed", 0).on_parent_close(ParentClose::cancel).start();
      ctx.continue_as_new(2);
    }
    co_return 2;
  });
  CHECK(engine->execute(parent, "p-1", 1) == 2);
  auto message = error_message(errc::cancelled, [&] { (void)result_of(engine, child, "closed"); });
  CHECK_MESSAGE(contains(message, "continued as new"), message);
  CHECK(engine->get_run("kept")->status == RunStatus::running);
  engine->signal("kept", kGo, 4);
  CHECK(result_of(engine, child, "kept") == 4);
}
}
