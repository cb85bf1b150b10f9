// Continue-as-new: a run ends its generation and starts the next under the
// same id with new input (Ctx::continue_as_new). The journal starts afresh;
// the result is the last generation's; signals and updates the old code had
// not taken pass to the new one; an update it took and did not answer
// fails; children close by their ParentClose; reopening (and checkpoints)
// keep only the newest generation.
#include <doctest/doctest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/shard.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/engine/slow_log.hpp"
#include "tests/support/crash_points.hpp"
#include "tests/support/fault_file_system.hpp"

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
  REQUIRE(records.size() == 4);  // run_started, step_started, step_completed, run_completed
  CHECK(records[0].at("kind") == "run_started");
  CHECK(records[0].at("generation") == 3);
  CHECK(records[0].at("flag") == true);
  CHECK(records[0].at("value").at("input") == 3);
  CHECK(records[1].at("kind") == "step_started");
  CHECK(records[3].at("kind") == "run_completed");
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

namespace {

// Waits for "go"; generation 1 then arms the hold in a step (its result's
// sync passes, the next one, the next generation's start, is held) and
// continues as new; generation 2 returns 10.
const WorkflowRef<int, int> kHeld{"held"};

void register_held(Engine& engine, SlowLog& slow) {
  engine.register_workflow(kHeld, [&slow](Ctx& ctx, int generation) -> Task<int> {
    (void)co_await ctx.wait_for(kGo);
    if (generation == 1) {
      auto arm = [&slow] {
        slow.arm(1);
        return 1;
      };
      co_await ctx.step("arm", arm);
      ctx.continue_as_new(2);
    }
    co_return 10;
  });
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("a checkpoint taken before the next generation's start is durable keeps the old one's journal") {
  // The store held generation 1's journal; generation 2 started in memory,
  // its start not yet durable, when a checkpoint ran. Erasing generation 1
  // there would leave, after a crash that loses generation 2's start, a run
  // with neither generation in the store.
  SlowLog slow;
  FaultFileSystem fs(slowed_by(slow));
  auto clock = std::make_shared<ManualClock>();
  auto config = crash_config(fs, clock);
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  std::unique_ptr<FaultFileSystem> image;
  {
    auto engine = Engine::open(config);
    register_held(*engine, slow);
    (void)engine->start(kHeld, "held", 1);
    CHECK(eventually([&] { return engine->stats().records_written >= 1; }));  // its start is durable
    // Two checkpoints: a run's journal goes to the store at its second.
    engine->checkpoint();
    engine->checkpoint();
    engine->signal("held", kGo, 1, "go-1");
    REQUIRE(slow.wait_holding());
    CHECK(eventually([&] {
      auto run = engine->get_run("held");
      return run && run->generation == 2;
    }));
    engine->checkpoint();
    fs.set_crash_after_ops(fs.operation_count());  // the held sync fails; nothing more reaches the disk
    image = fs.crash_image(CrashOutcome::drop_all());
    slow.release();
    engine->shutdown();
  }
  CHECK_FALSE(slow.held_a_shard);
  SlowLog idle;
  auto config_again = crash_config(*image, clock);
  auto engine = Engine::open(config_again);  // the journal fits
  register_held(*engine, idle);
  // (go-1 was acknowledged, so durable: generation 1 takes it again.)
  CHECK(eventually([&] {
    auto run = engine->get_run("held");
    return run && run->generation == 2;
  }));
  INFO(engine->journal_json("held"));
  engine->signal("held", kGo, 1, "go-2");
  CHECK(engine->result(kHeld, "held") == 10);
}
}

namespace {

// One shard, checkpoints only when asked: what the store holds is the
// test's doing.
Config one_shard(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock) {
  auto config = crash_config(fs, clock);
  config.shards = 1;
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  return config;
}

// Starts "sum" and checkpoints twice: generation 1's journal (its start and
// its wait, durable) is in the store.
void store_first_generation(Engine& engine) {
  (void)engine.start(kSum, "sum", 1);
  CHECK(eventually([&] { return engine.stats().records_written >= 2; }));
  engine.checkpoint();
  engine.checkpoint();  // a run's journal goes to the store at its second
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("after a checkpoint erased an older generation, its records left in the log are passed over at recovery") {
  // A checkpoint erased generation 1 of "sum" from the store (generation 2
  // had started, durably) while another run, new, was left out of the store
  // for one checkpoint: replay then starts at that run's first record,
  // before generation 1's last ones, which the log still holds.
  FaultFileSystem fs;
  auto clock = std::make_shared<ManualClock>();
  auto config = one_shard(fs, clock);
  std::unique_ptr<FaultFileSystem> image;
  {
    auto engine = Engine::open(config);
    register_sum(*engine);
    store_first_generation(*engine);
    (void)engine->start(kSum, "other", 100);
    engine->signal("sum", kNext, 2);
    // Durable by now: each run's start and wait, the signal and its taking,
    // generation 2's start and wait.
    CHECK(eventually([&] { return engine->stats().records_written >= 8; }));
    REQUIRE(engine->get_run("sum")->generation == 2);
    engine->checkpoint();  // erases generation 1; leaves "other" and generation 2 out
    image = fs.crash_image(CrashOutcome::keep_all(CrashOutcome::Names::keep));
  }
  auto reopened = one_shard(*image, clock);
  auto engine = Engine::open(reopened);
  register_sum(*engine);
  CHECK(engine->get_run("sum")->generation == 2);
  engine->signal("sum", kNext, 0);
  engine->signal("other", kNext, 0);
  CHECK(engine->result(kSum, "sum") == 3);
  CHECK(engine->result(kSum, "other") == 100);
}
}

TEST_SUITE("unit") {
TEST_CASE("a generation replaced in the log at recovery leaves none of its records in the store") {
  // The store held generation 1; the log past it, generation 1's last
  // records and generation 2's start. Recovery replays both; the next
  // checkpoint must store generation 2 alone, not generation 1's tail
  // beside it (which the open after would find without its start).
  FaultFileSystem fs;
  auto clock = std::make_shared<ManualClock>();
  auto config = one_shard(fs, clock);
  std::unique_ptr<FaultFileSystem> first;
  {
    auto engine = Engine::open(config);
    register_sum(*engine);
    store_first_generation(*engine);
    engine->signal("sum", kNext, 2);
    CHECK(eventually([&] { return engine->stats().records_written >= 6; }));  // generation 2 started and waits
    first = fs.crash_image(CrashOutcome::keep_all(CrashOutcome::Names::keep));
  }
  std::unique_ptr<FaultFileSystem> second;
  {
    auto reopened = one_shard(*first, clock);
    auto engine = Engine::open(reopened);
    register_sum(*engine);
    CHECK(engine->get_run("sum")->generation == 2);
    engine->checkpoint();
    engine->checkpoint();
    second = first->crash_image(CrashOutcome::keep_all(CrashOutcome::Names::keep));
  }
  auto reopened = one_shard(*second, clock);
  auto engine = Engine::open(reopened);
  register_sum(*engine);
  CHECK(engine->get_run("sum")->generation == 2);
  engine->signal("sum", kNext, 0);
  CHECK(engine->result(kSum, "sum") == 3);
}
}
