// Running ahead (docs/durability.md): in local mode a run's first step may
// begin before the run's start is durable, because the start, the step's
// start and whatever else the run journals in the turn that started it go
// to the log as one atomic group. What may run ahead, what must still wait,
// and what a crash in between leaves.
#include <doctest/doctest.h>

#include <mutex>
#include <string>
#include <vector>

#include "tests/engine/engine_harness.hpp"
#include "tests/engine/slow_log.hpp"
#include "tests/support/crash_points.hpp"
#include "tests/support/fault_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, int> kOneStep{"one-step"};
const WorkflowRef<int, int> kTwoSteps{"two-steps"};
const WorkflowRef<int, int> kNowFirst{"now-first"};
const WorkflowRef<int, int> kPatchedFirst{"patched-first"};
const WorkflowRef<int, int> kSignalFirst{"signal-first"};
const Signal<int> kGo{"go"};

// The keys and inputs each step function was called with, in call order.
struct Calls {
  std::mutex mu;
  std::vector<std::string> keys;
  void add(const StepContext& step, int input) {
    std::lock_guard lock(mu);
    keys.push_back(step.key() + "=" + std::to_string(input));
  }
  std::vector<std::string> all() {
    std::lock_guard lock(mu);
    return keys;
  }
};

void register_all(Engine& engine, Calls& calls) {
  engine.register_workflow(kOneStep, [&calls](Ctx& ctx, int n) -> Task<int> {
    co_return co_await ctx.step("charge", [&calls, n](StepContext& step) {
      calls.add(step, n);
      return n + 1;
    });
  });
  engine.register_workflow(kTwoSteps, [&calls](Ctx& ctx, int n) -> Task<int> {
    auto a = co_await ctx.step("a", [&calls, n](StepContext& step) {
      calls.add(step, n);
      return n + 1;
    });
    co_return co_await ctx.step("b", [&calls, a](StepContext& step) {
      calls.add(step, a);
      return a + 1;
    });
  });
  engine.register_workflow(kNowFirst, [&calls](Ctx& ctx, int n) -> Task<int> {
    (void)co_await ctx.now();
    co_return co_await ctx.step("charge", [&calls, n](StepContext& step) {
      calls.add(step, n);
      return n + 1;
    });
  });
  engine.register_workflow(kPatchedFirst, [&calls](Ctx& ctx, int n) -> Task<int> {
    const int add = ctx.patched("bigger") ? 10 : 1;
    co_return co_await ctx.step("charge", [&calls, n, add](StepContext& step) {
      calls.add(step, n);
      return n + add;
    });
  });
  engine.register_workflow(kSignalFirst, [&calls](Ctx& ctx, int n) -> Task<int> {
    const int go = (co_await ctx.wait_for(kGo)).value_or(0);
    co_return co_await ctx.step("charge", [&calls, n, go](StepContext& step) {
      calls.add(step, n);
      return n + go;
    });
  });
}

struct Cost {
  std::uint64_t batches = 0;
  std::uint64_t records = 0;
  std::uint64_t ahead = 0;
};

// What one execute costs the log (one shard, no checkpoints, so nothing
// else writes meanwhile).
template <typename In, typename Out>
Cost cost_of_execute(Engine& engine, const WorkflowRef<In, Out>& ref, const std::string& id, In input, Out expected) {
  auto before = engine.stats();
  CHECK(engine.execute(ref, id, input) == expected);
  auto after = engine.stats();
  return {after.batches_written - before.batches_written, after.records_written - before.records_written,
          after.steps_run_ahead - before.steps_run_ahead};
}

Config quiet(EngineHarness& harness) {
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  return config;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("a 1-step run costs one flush: its start, step and end go to the log in one batch") {
  EngineHarness harness(Mode::local, 1);
  auto engine = harness.open(quiet(harness));
  Calls calls;
  register_all(*engine, calls);
  auto cost = cost_of_execute(*engine, kOneStep, "r", 1, 2);
  CHECK(cost.batches == 1);
  CHECK(cost.records == 4);  // run_started, step_started, step_completed, run_completed
  CHECK(cost.ahead == 1);
  // Again for a second run on the same shard, and for a start that returns
  // at once (its run still costs one batch).
  cost = cost_of_execute(*engine, kOneStep, "r2", 5, 6);
  CHECK(cost.batches == 1);
  auto before = engine->stats();
  CHECK(engine->start(kOneStep, "r3", 7) == StartOutcome::started);
  CHECK(engine->result(kOneStep, "r3") == 8);
  CHECK(engine->stats().batches_written - before.batches_written == 1);
}

TEST_CASE("only the first step runs ahead; a later one waits for the records before it") {
  EngineHarness harness(Mode::local, 1);
  auto engine = harness.open(quiet(harness));
  Calls calls;
  register_all(*engine, calls);
  auto cost = cost_of_execute(*engine, kTwoSteps, "r", 1, 3);
  CHECK(cost.ahead == 1);
  // The start with step a in one batch; b's records and the end after it, in
  // one batch or two (outside the start's turn nothing groups them, and a log
  // thread may seal b's result before the end is appended).
  CHECK(cost.batches >= 2);
  CHECK(cost.batches <= 3);
  CHECK(cost.records == 6);
}

TEST_CASE("a first step after a journaled choice, or after a signal, or with running ahead off, waits for the start") {
  EngineHarness harness(Mode::local, 1);
  auto config = quiet(harness);
  Calls calls;
  auto open = [&] {
    auto engine = harness.open(config);
    register_all(*engine, calls);
    return engine;
  };
  // Nothing ran ahead: the start alone, then the rest (in one batch or more).
  auto check_waited = [](const Cost& cost) {
    CHECK(cost.ahead == 0);
    CHECK(cost.batches >= 2);
  };
  SUBCASE("after ctx.now()") { check_waited(cost_of_execute(*open(), kNowFirst, "r", 1, 2)); }
  SUBCASE("after ctx.patched()") { check_waited(cost_of_execute(*open(), kPatchedFirst, "r", 1, 11)); }
  SUBCASE("after a signal, in a later turn") {
    auto engine = open();
    CHECK(engine->start(kSignalFirst, "r", 1) == StartOutcome::started);
    engine->signal("r", kGo, 5, "go-1");
    CHECK(engine->result(kSignalFirst, "r") == 6);
    CHECK(engine->stats().steps_run_ahead == 0);
  }
  SUBCASE("Config::first_step_ahead off") {
    config.first_step_ahead = false;
    check_waited(cost_of_execute(*open(), kOneStep, "r", 1, 2));
  }
}

TEST_CASE("an update-with-start's first step waits for the start, so the update reaches the run first") {
  EngineHarness harness(Mode::local, 1);
  auto engine = harness.open(quiet(harness));
  Calls calls;
  register_all(*engine, calls);
  const Update<int, int> kBump{"bump"};
  const WorkflowRef<int, int> kBumped{"bumped"};
  engine->register_workflow(kBumped, [&calls, kBump](Ctx& ctx, int n) -> Task<int> {
    ctx.on_update(kBump);
    auto bump = ctx.next_update(kBump).start();
    auto charged = ctx.step("charge", [&calls, n](StepContext& step) {
                        calls.add(step, n);
                        return n;
                      }).start();
    // Whichever is first: with the step run ahead, always the step, and
    // the update would find the run ended.
    if (co_await ctx.any(bump, charged) == 0) {
      auto request = co_await bump;
      co_await ctx.reply(request, request.arg);
      const int charge = co_await charged;
      co_return charge + request.arg;
    }
    const int charge = co_await charged;
    co_return charge;
  });
  CHECK(engine->update_with_start(kBumped, "u", 1, kBump, 5) == 5);
  CHECK(engine->result(kBumped, "u") == 6);
  CHECK(engine->stats().steps_run_ahead == 0);
}

TEST_CASE_TEMPLATE("nothing runs ahead where the journal cannot keep a group whole", M, InMemory, Remote) {
  // Memory mode has no disk to run ahead of; remote mode's server appends a
  // worker's records one by one, so a group there would not be atomic.
  EngineHarness harness(M::mode, 1);
  auto engine = harness.open();
  Calls calls;
  register_all(*engine, calls);
  CHECK(engine->execute(kOneStep, "r", 1) == 2);
  CHECK(engine->stats().steps_run_ahead == 0);
}

TEST_CASE("while the start's flush is held the first step has run and the start is unanswered; a crash then loses the run whole, and a resend calls the step with the same key and input") {
  SlowLog slow;
  FaultFileSystem fs(slowed_by(slow));
  auto clock = std::make_shared<ManualClock>();
  auto config = crash_config(fs, clock);
  config.shards = 1;
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  Calls calls;
  std::unique_ptr<FaultFileSystem> image;
  {
    auto engine = Engine::open(config);
    register_all(*engine, calls);
    // A first run lets the log measure its (slowed) flushes, so that it
    // writes from its own threads, never a shard's (SlowLog).
    CHECK(engine->execute(kOneStep, "warm-up", 0) == 1);
    slow.arm(0);
    Background<StartOutcome> start([&engine] { return engine->start(kOneStep, "r", 41); });
    REQUIRE(slow.wait_holding());
    CHECK(eventually([&] { return calls.all().size() == 2; }));  // the step ran ahead of the disk
    CHECK_FALSE(start.ready(50ms));                                 // and the start waits for it
    fs.set_crash_after_ops(fs.operation_count());                   // the held sync fails: the crash
    image = fs.crash_image(CrashOutcome::drop_all());
    slow.release();
    engine->shutdown();
  }
  CHECK_FALSE(slow.held_a_shard);
  auto config_again = crash_config(*image, clock);
  config_again.shards = 1;
  auto engine = Engine::open(config_again);
  register_all(*engine, calls);
  // The run is gone whole: nothing of it was kept, nothing acknowledged.
  CHECK_FALSE(engine->get_run("r"));
  CHECK(engine->execute(kOneStep, "r", 41) == 42);
  CHECK(engine->result(kOneStep, "warm-up") == 1);  // durable before the crash
  auto keys = calls.all();
  REQUIRE(keys.size() == 3);
  CHECK(keys[1] == "r/1/0/charge=41");
  CHECK(keys[2] == keys[1]);  // one key, one input
}
}
